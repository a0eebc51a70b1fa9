# Golden vectors (shared_ir/vectors/, made by generate.py and generate.R): every artifact,
# Python-made or R-made, loads with jit_load() and reproduces its expected outputs; the
# guard case fails with a tracebridge_guard_error; parameters match the tensors in the
# archive, read with base R only. These files are format version 1 and must keep loading.

find_vectors <- function() {
  env <- Sys.getenv("TRACEBRIDGE_VECTORS", "")
  if (nzchar(env)) return(env)
  dir <- normalizePath(getwd(), mustWork = FALSE)
  repeat {
    candidate <- file.path(dir, "shared_ir", "vectors")
    if (file.exists(file.path(candidate, "manifest.json"))) return(candidate)
    parent <- dirname(dir)
    if (identical(parent, dir)) return(NULL)
    dir <- parent
  }
}

skip_if_no_vectors <- function() {
  skip_if_no_torch()
  skip_if_not_installed("jsonlite")
  if (is.null(find_vectors())) skip("shared_ir/vectors not found (not in the R build)")
}

# safetensors with base R: row-major on disk, column-major in R.
vec_read_safetensors <- function(path) {
  con <- file(path, "rb")
  on.exit(close(con))
  n <- readBin(con, "integer", 2, size = 4, endian = "little")[1]
  header <- jsonlite::fromJSON(rawToChar(readBin(con, "raw", n)), simplifyVector = FALSE)
  data <- readBin(con, "raw", file.size(path) - 8 - n)
  header <- header[names(header) != "__metadata__"]
  dtypes <- c(F32 = "float32", F64 = "float64", I64 = "int64", I32 = "int32", BOOL = "bool")
  lapply(header, function(h) {
    offsets <- unlist(h$data_offsets)
    bytes <- data[seq.int(offsets[1] + 1, length.out = offsets[2] - offsets[1])]
    shape <- unlist(h$shape)
    v <- switch(h$dtype,
      F32 = readBin(bytes, "double", length(bytes) / 4, size = 4, endian = "little"),
      F64 = readBin(bytes, "double", length(bytes) / 8, size = 8, endian = "little"),
      I32 = readBin(bytes, "integer", length(bytes) / 4, size = 4, endian = "little"),
      I64 = readBin(bytes, "integer", length(bytes) / 4, size = 4,
                    endian = "little")[c(TRUE, FALSE)],
      BOOL = as.logical(as.integer(bytes)),
      stop("no reader for dtype ", h$dtype)
    )
    arr <- if (length(shape) > 1) aperm(array(v, rev(shape))) else v
    torch_tensor(arr, dtype = get(paste0("torch_", dtypes[[h$dtype]]))())
  })
}

# input0, input1, ... or method.input0: a list of argument lists by method
vec_by_method <- function(tensors, prefix) {
  keys <- names(tensors)
  method <- ifelse(grepl(".", keys, fixed = TRUE), sub("\\.[^.]*$", "", keys), "forward")
  index <- as.integer(sub(paste0("^.*", prefix), "", keys))
  out <- list()
  for (m in unique(method)) {
    sel <- which(method == m)
    out[[m]] <- unname(tensors[sel][order(index[sel])])
  }
  out
}

vec_flat <- function(x) {
  if (inherits(x, "torch_tensor")) return(list(x))
  do.call(c, lapply(unname(x), vec_flat))
}

vec_call <- function(m, method, args) {
  fn <- if (method == "forward") m else do.call("$", list(m, method))
  do.call(fn, args)
}

vec_manifest <- function() {
  jsonlite::fromJSON(file.path(find_vectors(), "manifest.json"), simplifyVector = FALSE)
}

test_that("the manifest has Python-made and R-made vectors", {
  skip_if_no_vectors()
  producers <- vapply(vec_manifest()$vectors, `[[`, "", "producer")
  expect_gte(length(producers), 12)
  expect_gte(sum(producers == "python"), 6)
  expect_gte(sum(producers == "r"), 6)
})

test_that("every golden vector loads in R and reproduces its outputs", {
  skip_if_no_vectors()
  dir <- find_vectors()
  for (entry in vec_manifest()$vectors) {
    for (case in entry$cases) {
      what <- sprintf("%s [%s]", entry$name, case$label)
      m <- jit_load(file.path(dir, entry$artifact))
      if (!is.null(case$mode)) {
        if (case$mode == "train") m$train() else m$eval()
      }
      inputs <- vec_by_method(vec_read_safetensors(file.path(dir, case$inputs)), "input")
      if (!is.null(case$raises)) {
        expect_equal(case$raises, "GuardError", label = what)
        expect_error(vec_call(m, names(inputs)[1], inputs[[1]]),
                     class = "tracebridge_guard_error", label = what)
        next
      }
      expected <- vec_by_method(vec_read_safetensors(file.path(dir, case$expected)),
                                "output")
      expect_setequal(names(expected), names(inputs))
      for (method in names(inputs)) {
        got <- vec_flat(vec_call(m, method, inputs[[method]]))
        want <- expected[[method]]
        expect_length(got, length(want))
        for (i in seq_along(want)) {
          label <- sprintf("%s %s output%d", what, method, i - 1)
          expect_identical(attr(got[[i]]$dtype, "name"), attr(want[[i]]$dtype, "name"),
                           label = label)
          expect_identical(dim(got[[i]]), dim(want[[i]]), label = label)
          a <- as_array(got[[i]])
          b <- as_array(want[[i]])
          bound <- entry$tolerance$atol + entry$tolerance$rtol * abs(b)
          expect_true(all(abs(a - b) <= bound), label = label)
        }
      }
    }
  }
})

test_that("parameters of Python-made vectors match the archive, read with base R", {
  skip_if_no_vectors()
  dir <- find_vectors()
  checked <- 0
  for (entry in vec_manifest()$vectors) {
    if (entry$producer != "python" || entry$kind != "module") next
    path <- file.path(dir, entry$artifact)
    tmp <- tempfile()
    utils::unzip(path, files = "tensors.safetensors", exdir = tmp)
    stored <- vec_read_safetensors(file.path(tmp, "tensors.safetensors"))
    params <- jit_load(path)$parameters
    expect_true(length(params) > 0, label = entry$name)
    expect_true(all(names(params) %in% names(stored)), label = entry$name)
    for (nm in names(params)) {
      expect_identical(dim(params[[nm]]), dim(stored[[nm]]), label = nm)
      expect_equal(as_array(params[[nm]]), as_array(stored[[nm]]), tolerance = 0,
                   label = paste(entry$name, nm))
    }
    checked <- checked + 1
    unlink(tmp, recursive = TRUE)
  }
  expect_gte(checked, 4)
})

test_that("the symbolic batch vector runs at batch sizes it was not traced at", {
  skip_if_no_vectors()
  m <- jit_load(file.path(find_vectors(), "r_symbolic_batch.tb"))
  for (b in c(1, 3, 11)) expect_equal(dim(m(torch_randn(b, 3, 4))), c(b, 3))
})

test_that("an artifact traced in R says so", {
  skip_if_no_torch()
  path <- tempfile(fileext = ".tb")
  jit_save(jit_trace(function(x) x * 2, torch_ones(2)), path)
  expect_identical(jit_inspect(path, quiet = TRUE)$producer$language, "r")
})

test_that("R's printer writes the stored golden graph text of every vector", {
  # The same files hold Python's printer to account (tests/python/test_vectors.py), so the
  # two printers agree through stored text, not by comparing one with the other.
  skip_if_not_installed("jsonlite")
  if (is.null(find_vectors())) skip("shared_ir/vectors not found (not in the R build)")
  dir <- find_vectors()
  for (entry in vec_manifest()$vectors) {
    info <- jit_inspect(file.path(dir, entry$artifact), quiet = TRUE)
    text <- paste0(paste(unlist(info$graphs), collapse = "\n\n"), "\n")
    golden <- file.path(dir, paste0(entry$name, ".graph"))
    expected <- readChar(golden, file.size(golden), useBytes = TRUE)
    expect_identical(text, expected, label = entry$name)
  }
})
