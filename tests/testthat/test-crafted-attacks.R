# Crafted files aimed at the ops and checks added since the op-safety review, read through
# R: jit_inspect() applies the document rules, jit_load() reaches Python's checker, and a
# call reaches the checked implementations. Each must be refused with tracebridge's error
# (never a crash or the allocator's message). The whole corpus runs in Python
# (tests/python/attack_cases.py, test_fuzz.py::test_crafted_attacks_*); this is a sample.

attack_tb <- function(nodes, out) {
  program <- sprintf('{"format": "tracebridge", "format_version": 2, "opset_version": 7,
 "producer": {"name": "tracebridge", "version": "0.1.0", "language": "python"},
 "kind": "function", "training": false, "methods": {"forward": {
  "arg_names": ["x"],
  "inputs": [{"id": 0, "kind": "Tensor", "dtype": "float32", "shape": ["s0"], "name": "x"}],
  "in_spec": {"t": "tuple", "c": [{"t": "tuple", "c": [{"t": "leaf"}]},
                                  {"t": "dict", "keys": [], "c": []}]},
  "nodes": [%s], "outputs": [{"ref": %d}], "out_spec": {"t": "leaf"}}},
 "dispatch": {}, "module_classes": {}, "state": {}, "meta": {}, "tensors": {"count": 0}}',
                     paste(nodes, collapse = ", "), as.integer(out))
  write_tb(program)
}

attack_node <- function(op, args, id, dtype = "float32", kwargs = "{}") {
  sprintf(paste0('{"op": "%s", "args": %s, "kwargs": %s, "outputs": [{"id": %d, ',
                 '"kind": "Tensor", "dtype": "%s", "shape": ["?"]}], "out_spec": {"t": "leaf"}}'),
          op, args, kwargs, as.integer(id), dtype)
}

attack_literal <- function(data, id, dtype) {
  attack_node("tensor", sprintf("[%s]", data), id, dtype, sprintf('{"dtype": {"dtype": "%s"}}', dtype))
}

# A one-element literal expanded to a written shape: an operand that costs the file nothing.
attack_wide <- function(shape, lit, id, dtype = "float32", value = "0.0") {
  one <- value
  for (i in seq_along(shape)) one <- sprintf("[%s]", one)
  c(attack_literal(one, lit, dtype),
    attack_node("Tensor.expand", sprintf('[{"ref": %d}, {"tuple": [%s]}]', lit,
                                         paste(format(shape, scientific = FALSE), collapse = ", ")),
                id, dtype))
}

test_that("repeat_interleave counts whose int64 sum wraps are refused at the call", {
  skip_if_no_torch()
  big <- "4611686018427387904"
  path <- attack_tb(c(
    attack_literal("[0.0, 0.0, 0.0, 0.0]", 1, "float32"),
    attack_literal(sprintf("[%s]", paste(rep(big, 4), collapse = ", ")), 2, "int64"),
    attack_node("repeat_interleave", '[{"ref": 1}, {"ref": 2}]', 3)
  ), 3)
  expect_silent(jit_inspect(path, quiet = TRUE))
  model <- jit_load(path)
  expect_error(model(torch_ones(3)), paste0("a repeat count of ", big),
               class = "tracebridge_error")
})

test_that("results larger than what their operands hold are refused at load", {
  skip_if_no_torch()
  diag <- attack_tb(c(attack_wide(65536, 1, 2), attack_node("diag", '[{"ref": 2}]', 3)), 3)
  expect_silent(jit_inspect(diag, quiet = TRUE))
  expect_error(jit_load(diag), "diag makes a tensor of shape \\[65536, 65536\\]",
               class = "tracebridge_artifact_error")
  flat <- attack_tb(c(attack_wide(2^28, 1, 2, "float64"),
                      attack_node("cumsum", '[{"ref": 2}, 0]', 3, "float64")), 3)
  expect_error(jit_load(flat), "cumsum makes a tensor of shape \\[268435456\\] \\(2147483648 bytes",
               class = "tracebridge_artifact_error")
})

test_that("a view larger than its input and a broadcast selection are bounded at the call", {
  skip_if_no_torch()
  strided <- attack_tb(c(
    '{"op": "prim.size", "args": [{"ref": 0}, 0], "kwargs": {}, "outputs": [{"id": 1, "kind": "int"}], "out_spec": {"t": "leaf"}}',
    '{"op": "scalar.mul", "args": [{"ref": 1}, 1099511627776], "kwargs": {}, "outputs": [{"id": 2, "kind": "int"}], "out_spec": {"t": "leaf"}}',
    attack_node("as_strided", '[{"ref": 0}, {"tuple": [{"ref": 2}]}, {"tuple": [0]}, 0]', 3),
    attack_node("sum", '[{"ref": 3}]', 4)
  ), 4)
  model <- jit_load(strided)
  expect_error(model(torch_ones(3)), "more than the limit of 1073741824 bytes",
               class = "tracebridge_error")
  selected <- attack_tb(c(attack_wide(c(65536, 1), 1, 2),
                          attack_wide(c(1, 65536), 3, 4, "bool", "true"),
                          attack_node("masked_select", '[{"ref": 2}, {"ref": 4}]', 5)), 5)
  model <- jit_load(selected)
  expect_error(model(torch_ones(3)), "masked_select would allocate", class = "tracebridge_error")
})

test_that("sizes PyTorch refuses are refused at load, read through R as through Python", {
  # prober18 F12: a bool for a size passed the load checks, a dim past the rank failed
  # inside the checked implementation, a size of -2 reached the kernel. jit_inspect()
  # applies the document rules (these files keep them); jit_load() runs every rule.
  skip_if_no_torch()
  cases <- list(
    list(attack_node("as_strided", '[{"ref": 0}, {"tuple": [true, 3]}, {"tuple": [3, 1]}]', 1),
         "as_strided's size is \\[true, 3\\]: a bool where an integer is expected"),
    list(attack_node("repeat_interleave", '[{"ref": 0}, true]', 1),
         "repeat_interleave's repeats is true: a bool"),
    list(attack_node("repeat_interleave", '[{"ref": 0}, 2]', 1, kwargs = '{"dim": 7}'),
         "repeat_interleave dim 7 is out of range for its input of rank 1 \\(dims -1..0\\)"),
    list(attack_node("broadcast_to", '[{"ref": 0}, [-2, 3]]', 1),
         "broadcast_to size -2 \\(at position 0 of the sizes\\) is negative")
  )
  for (case in cases) {
    path <- attack_tb(case[[1]], 1)
    expect_silent(jit_inspect(path, quiet = TRUE))
    expect_error(jit_load(path), case[[2]], class = "tracebridge_artifact_error")
  }
  # A dim computed at the call: refused before the kernel, naming the op and the argument.
  computed <- attack_tb(c(
    '{"op": "prim.size", "args": [{"ref": 0}, 0], "kwargs": {}, "outputs": [{"id": 1, "kind": "int"}], "out_spec": {"t": "leaf"}}',
    attack_node("repeat_interleave", '[{"ref": 0}, 2]', 2, kwargs = '{"dim": {"ref": 1}}')
  ), 2)
  model <- jit_load(computed)
  expect_error(model(torch_ones(3)), "repeat_interleave: dim 3 is out of range for an input of rank 1",
               class = "tracebridge_error")
})
