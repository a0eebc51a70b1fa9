# Op-set 10's dtypes in files made by Python (prober20b F5): float8 weights and uint16
# inputs. R's base-R reader (jit_inspect) names them from the one dtype table
# (inst/shared_ir/dtypes.json) and checks their byte sizes; jit_load runs them.

test_that("a Python-made artifact with float8 state and a uint16 input loads in R", {
  skip_if_no_torch()
  path <- tempfile(fileext = ".tb")
  reticulate::py_run_string(paste(sep = "\n",
    "import torch, tracebridge",
    "class F8(torch.nn.Module):",
    "    def __init__(self):",
    "        super().__init__()",
    "        w = torch.tensor([[0.5, -1.0, 2.0], [4.0, 0.25, -8.0]])",
    "        self.register_buffer('w8', w.to(torch.float8_e4m3fn))",
    "        self.register_buffer('w5', w.to(torch.float8_e5m2))",
    "    def forward(self, ids):",
    "        x = ids.to(torch.float32)",
    "        return x @ self.w8.to(torch.float32).t() + x @ self.w5.to(torch.float32).t()",
    "f8_ids = torch.tensor([[1, 2, 3], [60000, 0, 1]]).to(torch.uint16)",
    "f8_model = F8()",
    "f8_want = f8_model(f8_ids)",
    sprintf("tracebridge.trace(f8_model, f8_ids).save(%s)", deparse(path))
  ))
  info <- jit_inspect(path, quiet = TRUE)
  expect_equal(info$state$dtype, c("float8_e4m3fn", "float8_e5m2"))
  expect_equal(info$state$type, c("f8e4m3fn[2, 3]", "f8e5m2[2, 3]"))
  expect_match(info$graphs[["forward"]], "(%ids: u16[", fixed = TRUE)
  loaded <- jit_load(path)
  # R's tensors are int64 where Python's were uint16: an input's dtype kind is what a graph
  # holds to (SPEC section 4), and the values are the same.
  ids <- torch_tensor(matrix(c(1, 60000, 2, 0, 3, 1), 2, 3), dtype = torch_long())
  want <- reticulate::py_eval("f8_want.tolist()")
  expect_equal(as_array(loaded(ids)), do.call(rbind, want))
})

test_that("a float8 result reaches R as its values, widened exactly", {
  skip_if_no_torch()
  path <- tempfile(fileext = ".tb")
  reticulate::py_run_string(paste(sep = "\n",
    "import torch, tracebridge",
    sprintf("tracebridge.trace(lambda x: (x * 2).to(torch.float8_e4m3fn), torch.ones(3)).save(%s)",
            deparse(path))
  ))
  loaded <- jit_load(path)
  expect_equal(as.numeric(as_array(loaded(torch_tensor(c(0.25, -1.5, 3))))), c(0.5, -3, 6))
})
