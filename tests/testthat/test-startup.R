# library(tracebridge) is quick: it neither loads reticulate nor starts Python (R/python.R,
# .onLoad); the first use does both.

test_that("library() starts nothing, and the first use starts Python", {
  rscript <- file.path(R.home("bin"), "Rscript")
  code <- paste(
    "library(tracebridge)",
    "cat('reticulate loaded:', 'reticulate' %in% loadedNamespaces(), '\\n')",
    "if (torch_is_installed()) {",
    "  x <- torch_relu(torch_tensor(c(-1, 2)))",
    "  cat('python started:', reticulate::py_available(), '\\n')",
    "}",
    sep = "\n"
  )
  script <- tempfile(fileext = ".R")
  writeLines(code, script)
  out <- system2(rscript, script, stdout = TRUE, stderr = TRUE,
                 env = paste0("R_LIBS=", paste(.libPaths(), collapse = .Platform$path.sep)))
  expect_true("reticulate loaded: FALSE " %in% out, label = paste(out, collapse = "\n"))
  if (torch_is_installed()) {
    expect_true("python started: TRUE " %in% out, label = paste(out, collapse = "\n"))
  }
})
