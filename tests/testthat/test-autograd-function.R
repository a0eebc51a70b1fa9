# A custom torch.autograd.Function traced in Python (issue 12 item 5): R's checker accepts
# the file, R's printer shows the node, and a gradient taken in R is the function's own.

test_that("a Python-made custom autograd function loads in R with its own gradient", {
  skip_if_no_torch()
  reticulate::py_run_string("
import torch, tracebridge

class RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad):
        return grad

class QuantNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return RoundSTE.apply(self.lin(x) * 4) * 0.25

torch.manual_seed(0)
ag_net = QuantNet()
ag_traced = tracebridge.trace(ag_net, torch.randn(5, 4))
")
  main <- reticulate::import_main(convert = FALSE)
  path <- tempfile(fileext = ".tb")
  main$ag_traced$save(path)
  info <- jit_inspect(path, quiet = TRUE)
  expect_equal(length(info$graphs), 3L)  # forward, the function's forward and backward
  expect_match(info$graphs[["forward"]], "prim.autograd_function([%1], forward='autograd_",
               fixed = TRUE)
  printer <- reticulate::import("tracebridge.ir.printer", convert = FALSE)
  program <- reticulate::import("tracebridge", convert = FALSE)$load(path)$program
  for (m in names(info$graphs)) {
    text <- reticulate::py_to_r(printer$graph_text(program$methods[[m]], m))
    expect_equal(info$graphs[[m]], text)  # R's printer and Python's agree
  }
  loaded <- jit_load(path)
  x <- torch_randn(2, 4)
  x$requires_grad_(TRUE)
  y <- loaded(x)
  y$sum()$backward()
  w <- reticulate::py_to_r(main$ag_net$lin$weight$detach()$numpy())
  # round() has a zero gradient; the function's own backward passes the gradient through:
  # d/dx sum(round(4 * (x W' + b)) / 4) = column sums of W, for every row.
  expect_equal(as_array(x$grad), matrix(colSums(w), 2, 4, byrow = TRUE), tolerance = 1e-6)
  eager <- reticulate::py_to_r(reticulate::py_call(main$ag_net, x$detach()$py)$detach()$numpy())
  expect_equal(as_array(y$detach()), eager, tolerance = 1e-6)
})
