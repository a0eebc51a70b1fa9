# R's checker (R/check.R): the rules of shared_ir/SPEC.md applied by jit_inspect() and
# jit_load() before anything uses a file, driven by the installed op and dtype tables.
# Each crafted file below is refused with a message that names the method, node and rule.

check_tb <- function(method = "forward", node = NULL, opset = 2, state = "{}") {
  skip_if(!nzchar(Sys.which(Sys.getenv("R_ZIPCMD", "zip"))), "no zip program")
  node <- node %||% paste0('{"op": "relu", "args": [{"ref": 0}], "kwargs": {}, ',
                           '"outputs": [{"id": 1, "kind": "Tensor", "dtype": "float32", ',
                           '"shape": [3]}], "out_spec": {"t": "leaf"}, "loc": "m.py:1"}')
  program <- sprintf('{"format": "tracebridge", "format_version": 1, "opset_version": %d,
 "producer": {"name": "tracebridge", "version": "0.1.0", "language": "python"},
 "kind": "function", "methods": {"%s": {
  "arg_names": ["x"],
  "inputs": [{"id": 0, "kind": "Tensor", "dtype": "float32", "shape": ["s0"], "name": "x"}],
  "in_spec": {"t": "tuple", "c": [{"t": "tuple", "c": [{"t": "leaf"}]},
                                  {"t": "dict", "keys": [], "c": []}]},
  "nodes": [%s], "outputs": [{"ref": 1}], "out_spec": {"t": "leaf"}}},
 "state": %s, "tensors": {"count": 0}}', as.integer(opset), method, node, state)
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

one_node <- function(op, args, kwargs = "{}", kind = "Tensor") {
  out <- if (kind == "Tensor") {
    '{"id": 1, "kind": "Tensor", "dtype": "float32", "shape": [3]}'
  } else {
    sprintf('{"id": 1, "kind": "%s"}', kind)
  }
  sprintf('{"op": "%s", "args": %s, "kwargs": %s, "outputs": [%s], "out_spec": {"t": "leaf"}}',
          op, args, kwargs, out)
}

test_that("the op and dtype tables are installed with the package", {
  ops <- tracebridge:::tb_tables()$ops
  expect_equal(ops$opset_version, 4L)
  expect_true(all(c("relu", "conv2d", "scaled_dot_product_attention") %in% names(ops$ops)))
  expect_false(any(grepl("data_ptr|storage|from_blob|_foreach", names(ops$ops))))
  expect_equal(tracebridge:::tb_tables()$dtypes$float32$short, "f32")
})

test_that("a well-formed file passes", {
  info <- jit_inspect(check_tb(), quiet = TRUE)
  expect_equal(info$methods, "forward")
  expect_silent(jit_inspect(check_tb(node = one_node("Tensor.view", '[{"ref": 0}, 3, -1]')),
                            quiet = TRUE))
})

test_that("ops that reach raw memory are refused, naming method, node and rule", {
  for (op in c("Tensor.const_data_ptr", "_from_blob", "_nested_view_from_buffer", "os.system")) {
    expect_error(jit_inspect(check_tb(node = one_node(op, '[{"ref": 0}]', kind = "int"))),
                 sprintf("method 'forward', node 0 \\(%s\\): uses op '%s', which is not in the op set",
                         gsub(".", "\\.", op, fixed = TRUE), gsub(".", "\\.", op, fixed = TRUE)),
                 class = "tracebridge_artifact_error")
  }
  expect_error(jit_inspect(check_tb(node = one_node("Tensor.data_ptr", '[{"ref": 0}]',
                                                    kind = "int"), opset = 1)),
               "removed after op-set version 1")
})

test_that("a value used before it is defined is refused", {
  expect_error(jit_inspect(check_tb(node = one_node("relu", '[{"ref": 99}]'))),
               "uses %99 before it is defined \\(or never\\) \\[rule: SSA\\]")
})

test_that("names follow the grammar and cannot shadow the module's attributes", {
  expect_error(jit_inspect(check_tb(method = "eval")), "would replace the loaded module")
  expect_error(jit_inspect(check_tb(method = "_f")), "is not a name of the form")
  node <- sub("}$", ', "loc": "m.py:1\\\\nimport os"}', one_node("relu", '[{"ref": 0}]'))
  expect_error(jit_inspect(check_tb(node = node)), "loc must be 'path:line'")
  expect_error(jit_inspect(check_tb(node = one_node("sum", '[{"ref": 0}]', '{"a b": 1}'))),
               "keyword 'a b' is not an identifier")
})

test_that("argument kinds are checked from ops.json", {
  expect_error(jit_inspect(check_tb(node = one_node("relu", '["x"]'))),
               "argument 0 of relu must be tensor, not str")
  expect_error(jit_inspect(check_tb(node = one_node("sum", '[{"ref": 0}]', '{"bogus": 1}'))),
               "sum takes no keyword 'bogus'")
})

test_that("resource bombs are refused before anything runs", {
  expect_error(jit_inspect(check_tb(node = one_node("Tensor.expand",
                                                    '[{"ref": 0}, 1000000, 1000000]'))),
               "asked for 1000000000000 elements")
  expect_error(jit_inspect(check_tb(node = one_node("scalar.pow", "[7, 1000000000]",
                                                    kind = "int"))),
               "scalar.pow by 1000000000")
  expect_error(jit_inspect(check_tb(node = one_node("add", '[{"ref": 0}, 1180591620717411303424]'))),
               "outside int64")
  deep <- paste0(strrep("[", 70), "1", strrep("]", 70))
  expect_error(jit_inspect(check_tb(node = one_node("add", sprintf('[{"ref": 0}, %s]', deep)))),
               "nested more than 64 levels")
})

test_that("jit_load() runs R's checker before Python sees the file", {
  skip_if_no_torch()
  expect_error(jit_load(check_tb(method = "eval")), "would replace the loaded module",
               class = "tracebridge_artifact_error")
})
