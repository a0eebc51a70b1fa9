# jit_inspect() reads artifacts with base R and jsonlite only. The tests without Python
# use a hand-written artifact; the others compare the graph text with Python's printer on
# artifacts made here (from R and from Python) and on the golden vectors.

insp_write_safetensors <- function(path, tensors) {
  offset <- 0
  header <- list()
  for (name in names(tensors)) {
    n <- 4 * length(tensors[[name]]$values)
    header[[name]] <- list(dtype = "F32", shape = as.list(tensors[[name]]$shape),
                           data_offsets = c(offset, offset + n))
    offset <- offset + n
  }
  head <- as.character(jsonlite::toJSON(header, auto_unbox = TRUE))
  head <- paste0(head, strrep(" ", (8 - nchar(head) %% 8) %% 8))
  con <- file(path, "wb")
  on.exit(close(con))
  writeBin(c(nchar(head), 0L), con, size = 4, endian = "little")
  writeBin(charToRaw(head), con)
  for (t in tensors) writeBin(as.double(t$values), con, size = 4, endian = "little")
}

# A stored ZIP of the given members (name -> text or path to a file).
insp_zip <- function(members) {
  skip_if(!nzchar(Sys.which(Sys.getenv("R_ZIPCMD", "zip"))), "no zip program")
  dir <- tempfile("members")
  dir.create(dir)
  for (name in names(members)) {
    target <- file.path(dir, name)
    if (file.exists(members[[name]])) file.copy(members[[name]], target) else
      writeLines(members[[name]], target, useBytes = TRUE)
  }
  path <- tempfile(fileext = ".tb")
  old <- setwd(dir)
  on.exit(setwd(old))
  utils::zip(path, names(members), flags = "-0 -q -X")
  path
}

insp_program <- '{"format": "tracebridge", "format_version": 1, "opset_version": 1,
 "producer": {"name": "tracebridge", "version": "0.1.0", "language": "r", "torch": "2.13.0"},
 "kind": "module", "training": false,
 "module_classes": {"": "Net", "fc": "Linear"},
 "methods": {"forward": {
  "arg_names": ["x"],
  "inputs": [{"id": 0, "kind": "Tensor", "dtype": "float32", "shape": ["s0", "s1"], "name": "x"}],
  "in_spec": {"t": "tuple", "c": [{"t": "tuple", "c": [{"t": "leaf"}]},
                                  {"t": "dict", "keys": [], "c": []}]},
  "nodes": [
   {"op": "prim.state", "args": ["fc.weight"], "kwargs": {},
    "outputs": [{"id": 1, "kind": "Tensor", "dtype": "float32", "shape": [2, 3],
                 "name": "fc.weight"}],
    "out_spec": {"t": "leaf"}, "loc": null},
   {"op": "linear", "args": [{"ref": 0}, {"ref": 1}], "kwargs": {"bias": null},
    "outputs": [{"id": 2, "kind": "Tensor", "dtype": "float32", "shape": [4, 2]}],
    "out_spec": {"t": "leaf"}, "loc": "/home/u/model.R:12"},
   {"op": "prim.size", "args": [{"ref": 0}, 0], "kwargs": {},
    "outputs": [{"id": 3, "kind": "int"}], "out_spec": {"t": "leaf"}, "loc": "/home/u/model.R:13"},
   {"op": "prim.guard", "args": [{"ref": 3}],
    "kwargs": {"expect": 4, "what": "x.size(0)", "kind": "value"},
    "outputs": [], "out_spec": null, "loc": "/home/u/model.R:13"},
   {"op": "getitem",
    "args": [{"ref": 2}, {"tuple": [{"slice": [null, null, 2]}, {"ellipsis": true},
                                    9223372036854775807]}],
    "kwargs": {"eps": 1e-07, "big": 1e16, "neg": -0.0, "dt": {"dtype": "int64"},
               "dev": {"device": "cpu"}, "inf": {"float": "-inf"}, "s": "it\'s",
               "c": {"complex": [1.0, -2.0]}, "d": {"dict": [["k", [1, 2.5, true]]]},
               "one": {"tuple": [3]}},
    "outputs": [{"id": 4, "kind": "Tensor", "dtype": "bool", "shape": [4, "s1"]}],
    "out_spec": {"t": "tuple", "c": [{"t": "leaf"}, {"t": "none"}]}, "loc": "model.R:14"}
  ],
  "outputs": [{"ref": 2}, {"ref": 4}],
  "out_spec": {"t": "tuple", "c": [{"t": "leaf"}, {"t": "leaf"}, {"t": "const", "v": 0.5}]}}},
 "state": {"fc.weight": {"kind": "parameter", "dtype": "float32", "shape": [2, 3],
                         "requires_grad": true}},
 "tensors": {"count": 1}}'

# What Python's printer writes for insp_program (checked against it below).
insp_graph <- paste(
  "graph forward(%x: f32[s0, s1]) {",
  "  %fc.weight: f32[2, 3] = prim.state('fc.weight')",
  "  %0: f32[4, 2] = linear(%x, %fc.weight, bias=None)  # model.R:12",
  "  %1: int = prim.size(%x, 0)  # model.R:13",
  "  guard %1 == 4  # x.size(0), at model.R:13",
  paste0(
    "  (%2: b8[4, s1], _) = getitem(%0, (::2, ..., 9223372036854775807), eps=1e-07, ",
    "big=1e+16, neg=-0.0, dt=int64, dev=device('cpu'), inf=-inf, s=\"it's\", c=(1-2j), ",
    "d={'k': [1, 2.5, True]}, one=(3,))  # model.R:14"
  ),
  "  return (%0, %2, 0.5)",
  "}",
  sep = "\n"
)

# The literals above exercise the printer (every literal tag); the load-time checker refuses
# them on `getitem` (it takes no such keywords), so the files that jit_inspect() reads use
# the same program without them, and the printer is tested on the parsed document directly.
insp_literal_program <- insp_program
insp_literal_graph <- insp_graph
insp_kwargs <- regmatches(insp_program, regexpr('"kwargs": \\{"eps".*?"one": \\{"tuple": \\[3\\]\\}\\}',
                                                 insp_program))
insp_program <- sub(insp_kwargs, '"kwargs": {}', insp_program, fixed = TRUE)
insp_graph <- sub(paste0(", eps=1e-07, big=1e+16, neg=-0.0, dt=int64, dev=device('cpu'), ",
                         "inf=-inf, s=\"it's\", c=(1-2j), d={'k': [1, 2.5, True]}, one=(3,))"),
                  ")", insp_graph, fixed = TRUE)

test_that("R's printer writes every literal kind as Python's printer does", {
  doc <- jsonlite::fromJSON(tracebridge:::tag_big_ints(insp_literal_program),
                            simplifyVector = FALSE)
  expect_equal(tracebridge:::render_graph(doc$methods$forward, "forward"), insp_literal_graph)
})

insp_hand_artifact <- function(program = insp_program, shape = c(2, 3)) {
  st <- tempfile(fileext = ".safetensors")
  insp_write_safetensors(st, list(fc.weight = list(shape = shape, values = seq_len(prod(shape)))))
  insp_zip(list(program.json = program, tensors.safetensors = st))
}

test_that("jit_inspect reads a hand-written artifact with base R only", {
  info <- jit_inspect(insp_hand_artifact(), quiet = TRUE)
  expect_s3_class(info, "tracebridge_inspection")
  expect_equal(info$format_version, 1L)
  expect_equal(info$opset_version, 1L)
  expect_equal(info$producer,
               list(name = "tracebridge", version = "0.1.0", language = "r", torch = "2.13.0"))
  expect_equal(info$kind, "module")
  expect_equal(info$class, "Net")
  expect_false(info$training)
  expect_equal(info$methods, "forward")
  expect_equal(info$graphs[["forward"]], insp_graph)
  expect_equal(info$inputs$forward, data.frame(name = "x", type = "f32[s0, s1]"))
  expect_equal(info$state$name, "fc.weight")
  expect_equal(info$state$kind, "parameter")
  expect_equal(info$state$dtype, "float32")
  expect_equal(info$state$shape[[1]], c(2, 3))
  expect_equal(info$state$type, "f32[2, 3]")
  expect_equal(info$state$bytes, 24)
  expect_true(info$state$requires_grad)
  expect_equal(nrow(info$guards), 1)
  expect_equal(info$guards$value, "%1")
  expect_equal(info$guards$expect, "4")
  expect_equal(info$guards$text, "x.size(0) == 4")
  expect_equal(info$guards$loc, "model.R:13")
  expect_equal(info$ops$forward, c(getitem = 1L, linear = 1L, prim.guard = 1L,
                                    prim.size = 1L, prim.state = 1L))

  out <- capture_output(res <- print(info))
  expect_identical(res, info)
  expect_match(out, "format:     tracebridge format 1, op set 1", fixed = TRUE)  # a format-1 file
  expect_match(out, "producer:   tracebridge 0.1.0 (r, torch 2.13.0)", fixed = TRUE)
  expect_match(out, "kind:       module (Net)", fixed = TRUE)
  expect_match(out, "state: 1 tensor, 24 bytes\n  parameter  fc.weight  f32[2, 3]\n",
               fixed = TRUE)
  expect_match(out, "forward: x.size(0) == 4  (value guard, at model.R:13)", fixed = TRUE)
  expect_match(out, insp_graph, fixed = TRUE)
  expect_false(grepl("graph forward", capture_output(print(info, graphs = FALSE))))
  # jit_inspect() prints the report and returns invisibly.
  expect_output(res <- expect_invisible(jit_inspect(insp_hand_artifact())), insp_graph,
                fixed = TRUE)
  expect_s3_class(res, "tracebridge_inspection")
})

test_that("literals print as Python's repr() prints them", {
  cases <- c(
    "0.1" = 0.1, "1e-05" = 1e-05, "0.0001" = 1e-04, "0.00012" = 1.2e-04, "1e+16" = 1e16,
    "1000000000000000.0" = 1e15, "-2.5e-07" = -2.5e-07, "0.3333333333333333" = 1 / 3,
    "9007199254740992.0" = 2^53, "1.7976931348623157e+308" = .Machine$double.xmax,
    "5e-324" = 4.9406564584124654e-324, "2.0" = 2, "-0.0" = -0, "123.456" = 123.456,
    "inf" = Inf, "-inf" = -Inf, "nan" = NaN, "1.5e+300" = 1.5e300
  )
  expect_equal(vapply(cases, py_float_repr, character(1)), names(cases),
               ignore_attr = TRUE)
  expect_equal(py_str_repr("abc"), "'abc'")
  expect_equal(py_str_repr("it's"), "\"it's\"")
  expect_equal(py_str_repr("say \"hi\""), "'say \"hi\"'")
  expect_equal(py_str_repr("a'b\""), "'a\\'b\"'")
  expect_equal(py_str_repr("a\\b\nc\td\001"), "'a\\\\b\\nc\\td\\x01'")
  expect_equal(py_complex_repr(0, 2), "2j")
  expect_equal(py_complex_repr(1.5, -0.5), "(1.5-0.5j)")
  expect_equal(short_loc("/a/b/model.py:12"), "model.py:12")
  expect_equal(short_loc(NULL), "?")
  expect_equal(short_loc("nocolon"), ":nocolon")
})

test_that("bad files signal tracebridge_artifact_error with a clear message", {
  expect_error(jit_inspect(file.path(tempdir(), "no-such.tb")), "no such file",
               class = "tracebridge_artifact_error")
  text <- tempfile()
  writeLines("not an artifact", text)
  expect_error(jit_inspect(text), "not a ZIP archive", class = "tracebridge_artifact_error")
  expect_error(jit_inspect(insp_zip(list(other.txt = "hello"))), "no program.json",
               class = "tracebridge_artifact_error")
  expect_error(jit_inspect(insp_zip(list(program.json = "{not json"))), "not valid JSON",
               class = "tracebridge_artifact_error")
  expect_error(jit_inspect(insp_zip(list(program.json = '{"format": "other"}'))),
               "format field missing", class = "tracebridge_artifact_error")
  newer <- sub('"format_version": 1', '"format_version": 3', insp_program, fixed = TRUE)
  err <- expect_error(jit_inspect(insp_hand_artifact(newer)),
                      class = "tracebridge_artifact_error")
  expect_match(conditionMessage(err), "format version 3 is newer than this tracebridge reads")
  expect_match(conditionMessage(err), "upgrade")
  expect_s3_class(err, "tracebridge_error")
  # a version far past any op set (not the next one, which a later session adds)
  newer_ops <- sub('"opset_version": 1', '"opset_version": 99', insp_program, fixed = TRUE)
  expect_error(jit_inspect(insp_hand_artifact(newer_ops)), "op-set version 99 is newer",
               class = "tracebridge_artifact_error")
  # The JSON and the safetensors header must describe the same tensors.
  expect_error(jit_inspect(insp_hand_artifact(shape = c(3, 2))),
               "state 'fc.weight': program.json says shape \\[2, 3\\]",
               class = "tracebridge_artifact_error")
  renamed <- gsub('"fc.weight": {"kind"', '"fc.bias": {"kind"', insp_program, fixed = TRUE)
  expect_error(jit_inspect(insp_hand_artifact(renamed)),
               "state 'fc.bias' has no tensor in tensors.safetensors",
               class = "tracebridge_artifact_error")
  broken <- sub('"out_spec": {"t": "tuple", "c": [{"t": "leaf"}, {"t": "none"}]}',
                '"out_spec": {"t": "tuple", "c": [{"t": "leaf"}, {"t": "leaf"}]}',
                insp_program, fixed = TRUE)
  # Spec arities are an execution rule (Python's checker, which jit_load runs); a graph
  # jit_inspect cannot draw is refused as malformed.
  expect_error(jit_inspect(insp_hand_artifact(broken)), "method 'forward': the graph is malformed",
               class = "tracebridge_artifact_error")
  expect_error(jit_inspect(c("a", "b")), "one file path", class = "tracebridge_artifact_error")
})

# --- against Python ---------------------------------------------------------------------

insp_py_text <- function(path) {
  art <- reticulate::import("tracebridge.artifact")
  printer <- reticulate::import("tracebridge.ir.printer")
  program <- art$read(path)
  methods <- names(program$methods)
  texts <- vapply(methods, function(m) printer$graph_text(program$methods[[m]], m),
                  character(1))
  texts
}

test_that("the hand-written program prints as Python's printer prints it", {
  skip_if_no_torch()
  ir <- reticulate::import("tracebridge.ir", convert = FALSE)
  printer <- reticulate::import("tracebridge.ir.printer", convert = FALSE)
  doc <- reticulate::import("json", convert = FALSE)$loads(insp_literal_program)
  graph <- ir$graph_from_json(reticulate::py_get_item(reticulate::py_get_item(doc, "methods"),
                                                      "forward"))
  expect_equal(reticulate::py_to_r(printer$graph_text(graph, "forward")), insp_literal_graph)
})

test_that("floats print as Python's repr() on many values", {
  skip_if_no_torch()
  set.seed(1)
  x <- c(stats::rnorm(300) * 10^sample(-30:30, 300, replace = TRUE),
         stats::runif(100), round(stats::runif(50) * 1e6) / 1000, 2^(-20:60))
  py <- reticulate::py_eval(
    sprintf("[repr(v) for v in %s]",
            paste0("[", paste(sprintf("%.17e", x), collapse = ", "), "]")),
    convert = TRUE
  )
  expect_equal(vapply(x, py_float_repr, character(1)), unlist(py))
})

test_that("graphs, state and guards of R-made artifacts match Python", {
  skip_if_no_torch()
  baked <- function(x) x$view(c(as.integer(x$size(1)), -1))
  f <- suppressWarnings(jit_trace(baked, torch_randn(2, 3, 4)))
  f_path <- tempfile(fileext = ".tb")
  jit_save(f, f_path)
  info <- jit_inspect(f_path, quiet = TRUE)
  expect_equal(info$graphs, insp_py_text(f_path))
  # The file carries trace-time sizes; Python labels them with input symbols when it shows
  # a loaded graph (it can run the graph on meta tensors), R's inspect shows the file.
  expect_match(info$graphs[["forward"]], "%1: f32[2, 12] = Tensor.view", fixed = TRUE)
  expect_match(jit_load(f_path)$graph, "%1: f32[2, ?] = Tensor.view", fixed = TRUE)
  expect_equal(nrow(info$guards), 1)
  expect_equal(info$guards$expect, "2")
  expect_equal(length(jit_load(f_path)$guards), 1)
  # $guards speaks R (x$shape[1]); the inspected file keeps the IR's words (x.shape[0])
  expect_match(jit_load(f_path)$guards, r_terms(info$guards$what), fixed = TRUE)
  expect_match(info$graphs[["forward"]], paste0("guard ", info$guards$value, " == 2"),
               fixed = TRUE)

  Net <- nn_module("Net",
    initialize = function() {
      self$fc <- nn_linear(4, 3)
      self$bn <- nn_batch_norm1d(3)
      self$drop <- nn_dropout(0.25)
    },
    forward = function(x) self$drop(torch_relu(self$bn(self$fc(x)))),
    score = function(x) torch_softmax(self$fc(x), dim = 2)
  )
  net <- Net()
  m_path <- tempfile(fileext = ".tb")
  jit_save(jit_trace(net, torch_randn(8, 4)), m_path)
  info <- jit_inspect(m_path, quiet = TRUE)
  expect_setequal(info$methods, c("trainforward", "evalforward"))
  expect_equal(info$dispatch$forward, c(train = "trainforward", eval = "evalforward"))
  expect_equal(info$graphs, insp_py_text(m_path))
  loaded <- jit_load(m_path)
  params <- loaded$parameters
  buffers <- loaded$buffers
  expect_setequal(info$state$name[info$state$kind == "parameter"], names(params))
  expect_setequal(info$state$name[info$state$kind == "buffer"], names(buffers))
  for (name in names(params)) {
    expect_equal(info$state$shape[[match(name, info$state$name)]], as.numeric(dim(params[[name]])))
  }
  expect_equal(info$state$dtype[info$state$name == "bn.num_batches_tracked"], "int64")
  expect_equal(info$state$type[info$state$name == "fc.weight"], "f32[3, 4]")
  # Batch norm in training refuses a batch of one: the trace records that as a guard.
  expect_equal(info$guards$method, "trainforward")
  expect_equal(info$guards$kind, "branch")
  expect_equal(info$guards$expect, "False")
  expect_match(capture_output(print(info)),
               "dispatch:   forward -> trainforward (train) / evalforward (eval)", fixed = TRUE)

  two_path <- tempfile(fileext = ".tb")
  x <- torch_randn(5, 4)
  jit_save(jit_trace_module(Net(), forward = list(x), score = list(x)), two_path)
  info <- jit_inspect(two_path, quiet = TRUE)
  expect_setequal(info$methods, c("forward", "score"))
  expect_equal(info$graphs, insp_py_text(two_path))
})

test_that("a Python-made artifact with many kinds of literal prints as in Python", {
  skip_if_no_torch()
  path <- tempfile(fileext = ".tb")
  reticulate::py_run_string(paste(sep = "\n",
    "import torch, tracebridge, warnings",
    "import torch.nn.functional as F",
    "class Lits(torch.nn.Module):",
    "    def __init__(self):",
    "        super().__init__()",
    "        self.ln = torch.nn.LayerNorm(4, eps=1e-05)",
    "        self.register_buffer('scale', torch.tensor([0.1, 2.5e-7, 3.0, -1e20]))",
    "    def forward(self, x, y):",
    "        h = self.ln(x[:, 1:, ...]) * self.scale",
    "        h = F.gelu(h, approximate='tanh') + F.leaky_relu(x[:, 1:, ::2].sum(-1, keepdim=True), 0.01)",
    "        z = h.to(torch.float64).clamp(min=float('-inf'), max=3.0) * -0.5 + 1e-8",
    "        w = torch.cat([y, y * 2.0], dim=-1).reshape(y.shape[0], -1)",
    "        return {'h': z, 'pair': (w, x.mean(dim=(1, 2))), 'none': None}",
    "torch.manual_seed(0)",
    "with warnings.catch_warnings():",
    "    warnings.simplefilter('ignore')",
    "    t = tracebridge.trace(Lits(), (torch.randn(2, 5, 4), torch.randn(2, 3)), strict=False)",
    sprintf("t.save(%s)", deparse(path)),
    "lits_graph = t.graph"
  ))
  info <- jit_inspect(path, quiet = TRUE)
  # The file carries trace-time sizes (R shows them); Python labels them when it shows a graph.
  expect_match(info$graphs[["forward"]], "%0: f32[2, 4, 4] = getitem", fixed = TRUE)
  expect_match(reticulate::py_eval("lits_graph"), "%0: f32[s0, s1-1, 4] = getitem", fixed = TRUE)
  expect_equal(info$graphs, insp_py_text(path))
  expect_match(info$graphs[["forward"]], "clamp(%8, min=-inf, max=3.0)", fixed = TRUE)
  expect_match(info$graphs[["forward"]], "return {'h': %11, 'pair': (%15, %16), 'none': None}",
               fixed = TRUE)
  expect_equal(info$producer$language, "python")
  expect_equal(info$state$name, c("ln.weight", "ln.bias", "scale"))
  expect_equal(info$state$kind, c("parameter", "parameter", "buffer"))
  expect_equal(info$state$requires_grad, c(TRUE, TRUE, FALSE))
})

insp_vectors_dir <- function() {
  dir <- normalizePath(".", mustWork = FALSE)
  repeat {
    candidate <- file.path(dir, "shared_ir", "vectors")
    if (file.exists(file.path(candidate, "manifest.json"))) return(candidate)
    parent <- dirname(dir)
    if (identical(parent, dir)) return(NULL)
    dir <- parent
  }
}

test_that("every golden vector reads, and prints as in Python", {
  dir <- insp_vectors_dir()
  skip_if(is.null(dir), "golden vectors not found (shared_ir/ is not in the package)")
  manifest <- jsonlite::read_json(file.path(dir, "manifest.json"))
  for (vector in manifest$vectors) {
    path <- file.path(dir, vector$artifact)
    info <- jit_inspect(path, quiet = TRUE)
    expect_equal(info$kind, vector$kind, label = vector$name)
    expect_true(all(unlist(vector$methods) %in% c(info$methods, names(info$dispatch))),
                label = vector$name)
    expect_equal(info$format_version, as.integer(vector$format_version), label = vector$name)
    if (torch_is_installed()) {
      expect_equal(info$graphs, insp_py_text(path), label = vector$name)
    }
  }
})
