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

# A .tb file from the text of its program.json and no tensors: crafted files for the
# reader's tests (test-check.R, test-crafted-attacks.R). Needs a zip program.
write_tb <- function(program) {
  skip_if(!nzchar(Sys.which(Sys.getenv("R_ZIPCMD", "zip"))), "no zip program")
  dir <- tempfile("members")
  dir.create(dir)
  writeLines(program, file.path(dir, "program.json"), useBytes = TRUE)
  con <- file(file.path(dir, "tensors.safetensors"), "wb")
  writeBin(c(8L, 0L), con, size = 4, endian = "little")
  writeBin(charToRaw("{}      "), con)
  close(con)
  path <- tempfile(fileext = ".tb")
  old <- setwd(dir)
  on.exit(setwd(old))
  utils::zip(path, c("program.json", "tensors.safetensors"), flags = "-0 -q -X")
  path
}
