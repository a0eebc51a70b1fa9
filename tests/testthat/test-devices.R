# Devices on load, from R: jit_load restores the saved device, map_location overrides, and a
# device this machine lacks is an error that names the remedy. The file "saved from a GPU"
# is made in Python by recording a device string that no machine has (cuda:63).

dev_saved_on_absent_device <- function(path) {
  reticulate::py_run_string(paste(
    "import torch, tracebridge",
    "from tracebridge.artifact import devices",
    "def _tb_save_on_absent_device(path):",
    "    torch.manual_seed(0)",
    "    net = torch.nn.Linear(3, 2)",
    "    traced = tracebridge.trace(net, torch.rand(4, 3))",
    "    original = devices.saved_device",
    "    devices.saved_device = lambda tensor: 'cuda:63'",
    "    try:",
    "        traced.save(path)",
    "    finally:",
    "        devices.saved_device = original",
    "    return net.weight.detach().numpy().copy()",
    sep = "\n"), convert = TRUE)$`_tb_save_on_absent_device`(path)
}

test_that("jit_load of a file saved from an absent device says to pass map_location", {
  skip_if_no_torch()
  path <- tempfile(fileext = ".tb")
  weight <- dev_saved_on_absent_device(path)
  expect_error(jit_load(path), "map_location='cpu'", class = "tracebridge_artifact_error")
  loaded <- jit_load(path, map_location = "cpu")
  expect_equal(as_array(loaded$parameters[["weight"]]), weight, tolerance = 1e-7)
  by_name <- jit_load(path, map_location = list("cuda:63" = "cpu"))
  expect_equal(dim(as_array(by_name(torch_ones(5, 3)))), c(5, 2))
})

test_that("jit_load keeps a CPU file on the CPU", {
  skip_if_no_torch()
  f <- jit_trace(function(x) x * 2, torch_ones(3))
  path <- tempfile(fileext = ".tb")
  jit_save(f, path)
  expect_equal(as_array(jit_load(path)(torch_tensor(c(1, 2)))), c(2, 4))
  expect_equal(as_array(jit_load(path, map_location = "cpu")(torch_tensor(c(1, 2)))), c(2, 4))
})
