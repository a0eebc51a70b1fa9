# A loaded module's state is sealed until it could reach anyone (python/tracebridge/
# runtime/sealed.py): R's accessors reach it through Python's public methods, which break
# the seal, so a change made through them is seen by the next call.

test_that("R's $parameters of a loaded module break its seal: calls follow the change", {
  skip_if_no_torch()
  path <- tempfile(fileext = ".tb")
  on.exit(unlink(path), add = TRUE)
  made <- reticulate::py_run_string(sprintf(paste(
    "import torch, tracebridge",
    "from torch import nn",
    "torch.manual_seed(0)",
    "class Net(nn.Module):",
    "    def __init__(self):",
    "        super().__init__()",
    "        self.conv = nn.Conv2d(3, 4, 3)",
    "        self.bn = nn.BatchNorm2d(4)",
    "        self.lin = nn.Linear(4, 2)",
    "    def forward(self, x):",
    "        y = self.bn(self.conv(x)).mean((2, 3))",
    "        return y @ (self.lin.weight.t() * 2)",
    "net = Net().eval()",
    "with torch.no_grad():",
    "    net.bn.running_var.uniform_(0.5, 2.0)",
    "tracebridge.trace(net, torch.randn(1, 3, 6, 6)).save(r'%s')",
    "def _tb_sealed(m):",
    "    from tracebridge.runtime import sealed",
    "    return sealed.is_sealed(m)",
    sep = "\n"), path), convert = FALSE)
  sealed <- function(m) reticulate::py_to_r(made$`_tb_sealed`(attr(m, "py")))
  m <- jit_load(path)
  x <- torch_randn(1, 3, 6, 6)
  first <- with_no_grad(m(x))
  expect_true(sealed(m))
  expect_equal(as_array(with_no_grad(m(x = x))), as_array(first))  # named: bound, sealed
  expect_equal(as_array(with_no_grad(m$forward(x))), as_array(first))
  expect_true(sealed(m))
  params <- m$parameters
  expect_false(sealed(m))
  with_no_grad(params[["lin.weight"]]$mul_(3))
  with_no_grad(made$net$lin$weight$mul_(3))
  want <- with_no_grad(made$net(tensor_py(x)))
  got <- with_no_grad(m(x))
  expect_equal(as_array(got), reticulate::py_to_r(want$numpy()), tolerance = 1e-5)
  expect_false(isTRUE(all.equal(as_array(got), as_array(first))))
})
