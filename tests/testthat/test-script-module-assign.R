# A script_module does what a module does from R: `$<-`, `[[`, `[[<-` assign and read a
# parameter, buffer or sub-module (R's `m$bn$running_mean <- v` assigns the changed
# sub-module back to `m`), and `$to()`, `$state_dict()`... act on the whole module.

saved_net <- function(path) {
  reticulate::py_run_string(sprintf(paste(
    "import torch, tracebridge",
    "from torch import nn",
    "torch.manual_seed(0)",
    "class Net(nn.Module):",
    "    def __init__(self):",
    "        super().__init__()",
    "        self.conv = nn.Conv2d(3, 4, 3)",
    "        self.bn = nn.BatchNorm2d(4)",
    "        self.lin = nn.Linear(4, 2)",
    "        self.register_buffer('scale', torch.ones(2))",
    "    def forward(self, x):",
    "        y = self.bn(self.conv(x)).mean((2, 3))",
    "        return self.lin(y) * self.scale",
    "net = Net().eval()",
    "tracebridge.trace(net, torch.randn(1, 3, 6, 6)).save(r'%s')",
    sep = "\n"), path), convert = FALSE)
}

eager_out <- function(made, x) {
  reticulate::py_to_r(with_no_grad(made$net(tensor_py(x)))$numpy())
}

# The Python model (`made$net`), its artifact (`path`) loaded in R, and an input.
loaded_net <- function() {
  path <- tempfile(fileext = ".tb")
  made <- saved_net(path)
  list(path = path, made = made, m = jit_load(path), x = torch_randn(2, 3, 6, 6))
}

test_that("$<- and [[<- through a loaded module reach its state, and calls follow", {
  skip_if_no_torch()
  net <- loaded_net()
  on.exit(unlink(net$path), add = TRUE)
  made <- net$made
  m <- net$m
  x <- net$x
  with_no_grad(m(x))  # folded values made first: the writes below must be seen
  m$bn$running_mean <- torch_ones(4)
  made$net$bn$running_mean$fill_(1)
  m$lin$weight <- nn_parameter(torch_ones(2, 4))
  with_no_grad(made$net$lin$weight$fill_(1))
  m$scale <- torch_tensor(c(2, 3))
  made$net$scale$copy_(reticulate::import("torch")$tensor(c(2, 3)))
  expect_equal(as_array(with_no_grad(m(x))), eager_out(made, x), tolerance = 1e-5)
  m[["scale"]] <- torch_tensor(c(-1, 1))
  made$net$scale$copy_(reticulate::import("torch")$tensor(c(-1, 1)))
  expect_equal(as_array(m[["scale"]]), c(-1, 1))
  expect_equal(as_array(m[["bn"]]$running_mean), rep(1, 4))
  expect_equal(as_array(with_no_grad(m(x))), eager_out(made, x), tolerance = 1e-5)
  expect_error(m$graph <- "x", "cannot be assigned")
})

test_that("$to(), $state_dict() and $load_state_dict() act on the whole loaded module", {
  skip_if_no_torch()
  net <- loaded_net()
  on.exit(unlink(net$path), add = TRUE)
  made <- net$made
  m <- net$m
  x <- net$x
  expect_identical(m$to(dtype = torch_float64()), m)
  expect_equal(as.character(m$lin$weight$dtype), as.character(torch_float64()))
  made$net$double()
  got <- with_no_grad(m(x$to(dtype = torch_float64())))
  expect_equal(as_array(got), eager_out(made, x$to(dtype = torch_float64())), tolerance = 1e-10)
  m$to(dtype = torch_float32())
  made$net$float()
  sd <- m$state_dict()
  expect_true(all(c("conv.weight", "bn.running_mean", "lin.bias", "scale") %in% names(sd)))
  sd[["lin.bias"]] <- torch_tensor(c(5, 6))
  m$load_state_dict(sd)
  made$net$lin$bias$data$copy_(reticulate::import("torch")$tensor(c(5, 6)))
  expect_equal(as_array(with_no_grad(m(x))), eager_out(made, x), tolerance = 1e-5)
})
