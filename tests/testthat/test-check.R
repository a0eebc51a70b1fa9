# R's reader (R/check.R): the document rules of shared_ir/SPEC.md that jit_inspect()
# applies, driven by the installed schema, op and dtype tables. The execution rules (ops,
# arguments, SSA, literals, sizes) live once, in Python's checker: jit_load() reaches them
# through Python, and each crafted file below is refused there with a message that names
# the method, node and rule (tests/python/test_check_program.py tests each rule).

check_tb <- function(method = "forward", node = NULL, opset = 2, state = "{}", extra = "") {
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
 "state": %s, %s"tensors": {"count": 0}}', as.integer(opset), method, node, state, extra)
  write_tb(program)
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
  expect_equal(ops$opset_version, 10L)
  expect_true(all(c("relu", "conv2d", "scaled_dot_product_attention") %in% names(ops$ops)))
  # prim.storage_offset (op-set 8) reads an integer, as prim.stride does: no memory
  raw <- setdiff(names(ops$ops), "prim.storage_offset")
  expect_false(any(grepl("data_ptr|storage|from_blob|_foreach", raw)))
  expect_equal(tracebridge:::tb_tables()$dtypes$float32$short, "f32")
})

test_that("a well-formed file passes", {
  info <- jit_inspect(check_tb(), quiet = TRUE)
  expect_equal(info$methods, "forward")
  expect_silent(jit_inspect(check_tb(node = one_node("Tensor.view", '[{"ref": 0}, 3, -1]')),
                            quiet = TRUE))
})

test_that("the schema is applied from program.schema.json", {
  schema <- tracebridge:::tb_tables()$schema
  expect_equal(schema$properties$format$const, "tracebridge")
  bad_kind <- sub('"outputs": [{"id": 1, "kind": "Tensor"', '"outputs": [{"id": 1, "kind": "Nope"',
                  one_node("relu", '[{"ref": 0}]'), fixed = TRUE)
  expect_error(jit_inspect(check_tb(node = bad_kind)),
               "does not follow the schema at methods/forward/nodes/0/outputs/0/kind",
               class = "tracebridge_artifact_error")
  no_op <- sub('"op": "relu", ', "", one_node("relu", '[{"ref": 0}]'), fixed = TRUE)
  expect_error(jit_inspect(check_tb(node = no_op)), "nodes/0: must contain op")
  expect_error(jit_inspect(check_tb(state = '{"w": {"kind": "parameter", "dtype": "float32"}}')),
               "schema at state/w: must contain shape")
})

test_that("module_modes holds sub-module paths with a flag each", {
  with_modes <- function(modes) check_tb(extra = paste0('"module_modes": ', modes, ", "))
  expect_silent(jit_inspect(with_modes('{"forward": {"": false, "bn": false, "b.0.drop": true}}'),
                            quiet = TRUE))
  expect_error(jit_inspect(with_modes('{"forward": {"bn": "yes"}}')), "module_modes")
  expect_error(jit_inspect(with_modes('{"forward": {"a b": true}}')), "module path")
  expect_error(jit_inspect(with_modes('{"other": {"bn": true}}')), "does not have")
})

test_that("names of methods and state follow the grammar in jit_inspect", {
  expect_error(jit_inspect(check_tb(method = "eval")), "would replace the loaded module")
  expect_error(jit_inspect(check_tb(method = "_f")), "is not a name of the form")
})

test_that("execution rules are Python's: jit_inspect shows the file, jit_load refuses it", {
  skip_if_no_torch()
  raw_memory <- check_tb(node = one_node("Tensor.const_data_ptr", '[{"ref": 0}]', kind = "int"))
  expect_equal(jit_inspect(raw_memory, quiet = TRUE)$ops$forward[["Tensor.const_data_ptr"]], 1L)
  cases <- list(
    list(raw_memory, paste("method 'forward', node 0 \\(Tensor\\.const_data_ptr\\): uses op",
                           "'Tensor\\.const_data_ptr', which is not in the op set")),
    list(check_tb(node = one_node("relu", '[{"ref": 99}]')),
         "uses %99 before it is defined \\(or never\\) \\[rule: SSA\\]"),
    list(check_tb(node = one_node("relu", '["x"]')), "argument 0 of relu must be tensor, not str"),
    list(check_tb(node = one_node("sum", '[{"ref": 0}]', '{"a b": 1}')),
         "keyword 'a b' is not an identifier"),
    list(check_tb(node = one_node("Tensor.expand", '[{"ref": 0}, 1000000, 1000000]')),
         "asked for 1000000000000 elements"),
    list(check_tb(node = one_node("scalar.pow", "[7, 1000000000]", kind = "int")),
         "scalar.pow by 1000000000")
  )
  for (case in cases) {
    expect_silent(jit_inspect(case[[1]], quiet = TRUE))
    expect_error(jit_load(case[[1]]), case[[2]], class = "tracebridge_artifact_error")
  }
  deep <- paste0(strrep("[", 70), "1", strrep("]", 70))
  expect_error(jit_inspect(check_tb(node = one_node("add", sprintf('[{"ref": 0}, %s]', deep)))),
               "nested more than 64 levels")
})

test_that("jit_load() refuses a file through Python's checker", {
  skip_if_no_torch()
  expect_error(jit_load(check_tb(method = "eval")), "would replace the loaded module",
               class = "tracebridge_artifact_error")
})

test_that("jit_load() refuses an autocast read of a device type torch keeps no state for", {
  skip_if_no_torch()
  read <- function(device) {
    check_tb(node = one_node("prim.autocast_enabled", sprintf('["%s"]', device), kind = "bool"),
             opset = 8)
  }
  for (device in c("bogus", "cpu:0")) {
    expect_silent(jit_inspect(read(device), quiet = TRUE))
    expect_error(jit_load(read(device)),
                 paste0("node 0 \\(prim\\.autocast_enabled\\): prim\\.autocast_enabled reads ",
                        "the autocast of device type '", device, "'.*\\[rule: literals\\]"),
                 class = "tracebridge_artifact_error")
  }
  expect_false(jit_load(read("cpu"))(torch_ones(3)))
})
