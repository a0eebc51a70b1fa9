skip_if_no_torch <- function() {
  if (!torch_is_installed()) skip("Python torch and tracebridge are not available")
}

# How many Python objects of a kind ("Tensor" or "Module") are alive, after Python's
# collector ran: memory tests compare this before and after (call gc() first for R's).
py_live_count <- function(kind) {
  counter <- reticulate::py_run_string(paste(
    "import gc, torch",
    "def _tb_live_count(kind):",
    "    cls = {'Tensor': torch.Tensor, 'Module': torch.nn.Module}[kind]",
    "    gc.collect()",
    "    return sum(1 for o in gc.get_objects() if isinstance(o, cls))",
    sep = "\n"), convert = TRUE)$`_tb_live_count`
  counter(kind)
}

# Values of a tensor as an R array, for comparisons with base R.
arr <- function(x) as_array(x)
