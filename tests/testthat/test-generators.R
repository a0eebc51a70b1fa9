# A module that keeps a torch.Generator and draws from it in forward (gen20): its file
# holds the generator and its state; R loads and inspects it like any other.

test_that("a file whose random ops draw from a kept generator loads and runs in R", {
  skip_if_no_torch()
  path <- tempfile(fileext = ".tb")
  main <- reticulate::py_run_string(sprintf(paste(
    "import torch, tracebridge, warnings",
    "class Noisy(torch.nn.Module):",
    "    def __init__(s):",
    "        super().__init__()",
    "        s.g = torch.Generator().manual_seed(3)",
    "    def forward(s, x):",
    "        return x + torch.rand(x.shape, generator=s.g)",
    "m = Noisy()",
    "with warnings.catch_warnings():",
    "    warnings.simplefilter('ignore')  # (code in a string: its sizes go unread)",
    "    tracebridge.save(tracebridge.trace(m, torch.zeros(2)), r'%s')",
    "expected = [m(torch.zeros(3)).tolist() for _ in range(2)]",
    sep = "\n"), path), convert = TRUE)
  loaded <- jit_load(path)
  # the saved state is the one tracing left: eager's first two calls from it
  expect_equal(as_array(loaded(torch_zeros(3))), unlist(main$expected[[1]]), tolerance = 0)
  expect_equal(as_array(loaded(torch_zeros(3))), unlist(main$expected[[2]]), tolerance = 0)
  info <- jit_inspect(path, quiet = TRUE)
  expect_match(info$graphs[["forward"]], "generator=generator('g')", fixed = TRUE)
})
