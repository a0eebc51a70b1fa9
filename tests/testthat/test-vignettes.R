# Each vignette's code runs on its own (knitr::purl, then source), as a reader would.

vignette_sources <- function() {
  here <- normalizePath(file.path("..", "..", "vignettes"), mustWork = FALSE)
  rmd <- list.files(here, pattern = "\\.Rmd$", full.names = TRUE)
  if (length(rmd)) {
    return(vapply(rmd, function(f) {
      knitr::purl(f, output = tempfile(fileext = ".R"), quiet = TRUE)
    }, character(1)))
  }
  # Under R CMD check the vignettes' code is installed (purled) with the package.
  list.files(system.file("doc", package = "tracebridge"), pattern = "\\.R$", full.names = TRUE)
}

test_that("every vignette's code runs standalone", {
  files <- vignette_sources()
  expect_gte(length(files), 4)
  for (f in files) {
    env <- new.env(parent = globalenv())
    old <- setwd(tempdir())
    ok <- tryCatch({
      utils::capture.output(suppressWarnings(sys.source(f, envir = env)))
      TRUE
    }, error = function(e) conditionMessage(e))
    setwd(old)
    expect_true(isTRUE(ok), label = sprintf("%s: %s", basename(f), ok))
  }
})
