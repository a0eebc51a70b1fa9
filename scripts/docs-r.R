# The R half of `make docs`: check that every exported function is documented and that
# each help page matches its function's arguments, then build the pkgdown site (site/r).
# Run from the repository root with the package installed (R_LIBS) and Python reachable
# (TRACEBRIDGE_PYTHON, PYTHONPATH): the articles are the vignettes, run as they are built.

lib <- .libPaths()[[1]]
undocumented <- tools::undoc(package = "tracebridge", lib.loc = lib)
mismatched <- tools::codoc(package = "tracebridge", lib.loc = lib)
exports <- getNamespaceExports("tracebridge")
missing <- unlist(undocumented, use.names = FALSE)
cat(sprintf("docs-r: %d exported objects, %d undocumented, %d help pages that differ from their functions\n",
            length(exports), length(missing), length(mismatched)))
if (length(missing)) {
  print(undocumented)
}
if (length(mismatched)) {
  print(mismatched)
}
if (length(missing) || length(mismatched)) quit(status = 1)

# pkgdown asks CRAN whether the package is published there (a sidebar link), and downlit
# asks CRAN's package list for the web site of each package a page names that is not
# installed; the build runs offline (no network but package registries), so: not there.
utils::assignInNamespace("cran_link", function(...) NULL, "pkgdown")
utils::assignInNamespace("CRAN_urls", function() data.frame(Package = character(),
                                                            URL = character()), "downlit")
# TRACEBRIDGE_DOCS_RUN=0 (`make test`): the site is built and checked without running the R
# code again, which R CMD build and R CMD check run earlier in the same `make test` (every
# example and vignette, results checked). The reference pages show their examples unrun; the
# articles take the path the vignettes have for a machine without Python torch
# (`eval = torch_is_installed()`), through a Python that has none (.venv-docs'), so they show
# their code without output. `make docs` runs all of it.
run <- Sys.getenv("TRACEBRIDGE_DOCS_RUN", "1") != "0"
if (!run) {
  no_torch <- normalizePath(".venv-docs/bin/python", mustWork = TRUE)
  Sys.setenv(TRACEBRIDGE_PYTHON = no_torch, RETICULATE_PYTHON = no_torch)
}
pkgdown::build_site(".", examples = run, install = FALSE, new_process = FALSE,
                    preview = FALSE)
