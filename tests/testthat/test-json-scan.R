# R's pass over program.json before jsonlite (src/jsonscan.c, json_scan() in
# R/artifact-read.R): one linear scan that refuses what Python's reader refuses and R's
# would read otherwise, and tags the integers past 32 bits (prober21c F5, F6, F7).

scan_tb <- function(extra) {
  program <- sprintf('{"format": "tracebridge", "format_version": 1, "opset_version": 2,
 "producer": {"name": "tracebridge", "version": "0.1.0", "language": "python"},
 "kind": "function", "methods": {"forward": {
  "arg_names": ["x"],
  "inputs": [{"id": 0, "kind": "Tensor", "dtype": "float32", "shape": ["s0"], "name": "x"}],
  "in_spec": {"t": "tuple", "c": [{"t": "tuple", "c": [{"t": "leaf"}]},
                                  {"t": "dict", "keys": [], "c": []}]},
  "nodes": [{"op": "relu", "args": [{"ref": 0}], "kwargs": {},
   "outputs": [{"id": 1, "kind": "Tensor", "dtype": "float32", "shape": [3]}],
   "out_spec": {"t": "leaf"}, "loc": "m.py:1"}],
  "outputs": [{"ref": 1}], "out_spec": {"t": "leaf"}}},
 "state": {}, %s, "tensors": {"count": 0}}', extra)
  write_tb(program)
}

read_extra <- function(extra) tracebridge:::read_program(scan_tb(extra))[["zzy"]]

test_that("nesting past 64 levels is refused before jsonlite reads it, at any depth", {
  for (n in c(65L, 100L, 20000L, 199000L)) {
    deep <- paste0('"zzy": ', strrep("[", n), strrep("]", n))
    expect_error(jit_inspect(scan_tb(deep), quiet = TRUE),
                 "nested more than 64 levels deep .*rule: resource limits",
                 class = "tracebridge_artifact_error")
  }
  # 64 levels in all (the document is one) pass the reader
  expect_type(read_extra(paste0('"zzy": ', strrep("[", 63), strrep("]", 63))), "list")
  # brackets inside strings are no nesting
  expect_equal(read_extra(sprintf('"zzy": "%s"', strrep("[{", 5000))), strrep("[{", 5000))
})

test_that("integers past 32 bits are read exactly after a long string, without a warning", {
  long <- strrep("a", 40e6)
  expect_no_warning(got <- read_extra(sprintf('"yy": "%s", "zzy": 9007199254740993', long)))
  expect_identical(got, "\037tbint:9007199254740993")
  expect_error(jit_inspect(scan_tb(sprintf('"yy": "%s", "zzy": 1 /* c */', long)), quiet = TRUE),
               "a comment or a stray '/'", class = "tracebridge_artifact_error")
})

test_that("integers are tagged from 2^31 on, in either sign, and only integers", {
  got <- read_extra(paste('"zzy": [2147483647, 2147483648, -2147483648, -2147483647,',
                          '12345678901.5, 1e10, -0, "12345678901", 9223372036854775807]'))
  expect_identical(got[[1]], 2147483647L)
  expect_identical(got[[2]], "\037tbint:2147483648")
  expect_identical(got[[3]], "\037tbint:-2147483648")
  expect_identical(got[[4]], -2147483647L)
  expect_equal(got[[5]], 12345678901.5)
  expect_equal(got[[6]], 1e10)
  expect_identical(got[[7]], 0L)
  expect_identical(got[[8]], "12345678901")
  expect_identical(got[[9]], "\037tbint:9223372036854775807")
  expect_error(read_extra(paste0('"zzy": ', strrep("9", 4301))), "an integer of 4,301 digits",
               class = "tracebridge_artifact_error")
  expect_identical(read_extra(paste0('"zzy": ', strrep("9", 4300))),
                   paste0("\037tbint:", strrep("9", 4300)))
})

test_that("escapes R cannot read as Python does are refused, in strings only", {
  for (case in list(c('"a\\u0000b"', "U\\+0000"), c('"\\u001F"', "U\\+001F"),
                    c('"\\ud800"', "lone surrogate"), c('"\\udc00\\ud800"', "lone surrogate"),
                    c('"\\ud800x\\udc00"', "lone surrogate"))) {
    expect_error(read_extra(paste0('"zzy": ', case[[1]])), case[[2]],
                 class = "tracebridge_artifact_error")
  }
  expect_identical(read_extra('"zzy": "\\ud83d\\ude00"'), "\U0001F600")
  # an escaped backslash before "u0000" is a backslash and text
  expect_identical(read_extra('"zzy": "\\\\u0000 a/b // c"'), "\\u0000 a/b // c")
})

test_that("a control byte is refused, in a string or between tokens", {
  expect_error(read_extra('"zzy": "a\tb"'), "control character 0x09 at byte",
               class = "tracebridge_artifact_error")
  expect_error(read_extra('"zzy":\001 1'), "control character 0x01 at byte",
               class = "tracebridge_artifact_error")
  expect_identical(read_extra('"zzy":\t\r\n 1'), 1L)
})
