# The container as R reads it: the same strict rules as Python (every hostile case refused
# by both, with the same words), ranges instead of whole members (files over 2 and 4 GiB),
# ZIP64, and jit_load(path, weights =) for programs traced on the meta device.

art_cases_module <- function() {
  dir <- normalizePath(".", mustWork = FALSE)
  repeat {
    candidate <- file.path(dir, "tests", "python", "artifact_cases.py")
    if (file.exists(candidate)) {
      return(reticulate::import_from_path("artifact_cases", path = dirname(candidate)))
    }
    parent <- dirname(dir)
    if (identical(parent, dir)) return(NULL)
    dir <- parent
  }
}

art_cases <- function() {
  skip_if_no_torch()
  cases <- art_cases_module()
  skip_if(is.null(cases), "tests/python/artifact_cases.py not found (not in the package)")
  cases
}

test_that("every hostile container is refused by jit_inspect and jit_load, as in Python", {
  cases <- art_cases()
  dir <- tempfile("cases")
  cases$main(dir)
  manifest <- jsonlite::read_json(file.path(dir, "cases.json"))
  expect_gte(length(manifest), 16)
  for (name in names(manifest)) {
    path <- file.path(dir, paste0(name, ".tb"))
    expect_error(jit_inspect(path, quiet = TRUE), manifest[[name]],
                 class = "tracebridge_artifact_error", label = name)
    expect_error(jit_load(path), manifest[[name]], class = "tracebridge_artifact_error",
                 label = name)
  }
})

test_that("the parser differential is closed: a duplicated member or key is refused", {
  cases <- art_cases()
  dir <- tempfile("diff")
  dir.create(dir)
  for (name in c("duplicate_member", "duplicate_json_key")) {
    path <- file.path(dir, paste0(name, ".tb"))
    cases$HOSTILE[[name]](reticulate::import("pathlib")$Path(path))
    expect_error(jit_inspect(path, quiet = TRUE), "appears twice",
                 class = "tracebridge_artifact_error")
  }
})

test_that("the range reader gives the same bytes in chunks of any size", {
  path <- tempfile()
  bytes <- as.raw(sample(0:255, 1000, replace = TRUE))
  writeBin(bytes, path)
  con <- file(path, "rb")
  on.exit(close(con))
  for (chunk in c(1, 7, 64, 999, 1000, 4096)) {
    expect_identical(tracebridge:::read_range(con, 0, 1000, chunk = chunk), bytes)
    expect_identical(tracebridge:::read_range(con, 13, 500, chunk = chunk), bytes[14:513])
  }
  expect_error(tracebridge:::read_range(con, 990, 20, chunk = 7), "truncated")
  expect_error(tracebridge:::read_range(con, 0, 2^31), "too large to read into R",
               class = "tracebridge_artifact_error")
})

test_that("jit_inspect reads an artifact the same with a tiny read chunk", {
  skip_if_no_torch()
  f <- jit_trace(function(x) torch_relu(x) * 2, torch_ones(3))
  path <- tempfile(fileext = ".tb")
  jit_save(f, path)
  whole <- jit_inspect(path, quiet = TRUE)
  old <- options(tracebridge.read_chunk = 7)
  on.exit(options(old))
  chunked <- jit_inspect(path, quiet = TRUE)
  expect_identical(chunked, whole)
})

test_that("ZIP64 artifacts and artifacts over 4 GiB are read by ranges", {
  cases <- art_cases()
  path <- tempfile(fileext = ".tb")
  x <- cases$sparse_big(reticulate::import("pathlib")$Path(path))
  expect_gt(file.size(path), 5 * 2^30)
  info <- jit_inspect(path, quiet = TRUE)
  expect_equal(info$state$name, "w")
  expect_equal(info$state$bytes, 5 * 2^30)
  expect_equal(info$state$shape[[1]], c(2, 671088640))
  loaded <- jit_load(path)
  values <- unlist(x$tolist())
  expect_equal(as.numeric(as_array(loaded(torch_tensor(values)))), values, tolerance = 1e-6)
  unlink(path)

  small <- tempfile(fileext = ".tb")
  torch <- reticulate::import("torch")
  tb <- reticulate::import("tracebridge")
  traced <- tb$trace(torch$nn$Linear(3L, 2L), torch$ones(1L, 3L))
  reticulate::import("tracebridge.artifact")$write(traced$`_program_for_saving`(), small,
                                                   zip64 = TRUE)
  info <- jit_inspect(small, quiet = TRUE)
  expect_setequal(info$state$name, c("weight", "bias"))
  expect_true(all(info$state$stored))
})

test_that("jit_load binds the weights of a program traced on the meta device", {
  cases <- art_cases()
  dir <- tempfile("meta")
  dir.create(dir)
  made <- cases$meta_with_weights(dir)
  info <- jit_inspect(made$program, quiet = TRUE)
  expect_false(any(info$state$stored))
  expect_error(jit_load(made$program), "weights=", class = "tracebridge_artifact_error")
  f <- jit_load(made$program, weights = made$weights)
  x <- torch_tensor(do.call(rbind, made$x))
  expect_equal(as_array(f(x)), do.call(rbind, made$y), tolerance = 1e-6)
  expect_error(jit_load(made$program, weights = made$partial), "missing \\(3\\)",
               class = "tracebridge_artifact_error")
  expect_error(jit_load(made$program, weights = 3), "`weights` must be",
               class = "tracebridge_artifact_error")
})

test_that("jit_load refuses shards of an index that are not regular files in its folder", {
  skip_on_os("windows")  # no FIFOs
  cases <- art_cases()
  dir <- tempfile("meta")
  dir.create(dir)
  made <- cases$meta_with_weights(dir)
  index <- file.path(dir, "model.safetensors.index.json")
  write_index <- function(shard) writeLines(sprintf('{"weight_map": {"0.weight": "%s"}}', shard),
                                            index)
  # A FIFO would block the open forever; it is refused before anything opens it.
  expect_equal(system2("mkfifo", file.path(dir, "fifo.safetensors")), 0L)
  write_index("fifo.safetensors")
  expect_error(jit_load(made$program, weights = index), "is a FIFO, not a regular file",
               class = "tracebridge_artifact_error")
  outside <- tempfile("outside")
  dir.create(outside)
  file.copy(made$weights, file.path(outside, "real.safetensors"))
  file.symlink(file.path(outside, "real.safetensors"), file.path(dir, "linked.safetensors"))
  write_index("linked.safetensors")
  expect_error(jit_load(made$program, weights = index), "leads out of the index's folder",
               class = "tracebridge_artifact_error")
  dir.create(file.path(dir, "sub"))
  write_index("sub")
  expect_error(jit_load(made$program, weights = index), "is a directory",
               class = "tracebridge_artifact_error")
})
