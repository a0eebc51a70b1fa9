# The surface table (inst/surface.tsv) against mlverse's exports, NAMESPACE and the docs.

surface_rows <- function() surface_table()

targets <- function() {
  path <- system.file("mlverse-exports.txt", package = "tracebridge")
  lines <- trimws(readLines(path))
  lines <- lines[nzchar(lines) & !startsWith(lines, "#")]
  list(required = sub("^!", "", lines[startsWith(lines, "!")]), all = sub("^!", "", lines))
}

test_that("every required mlverse export exists; the rest still missing are listed", {
  t <- targets()
  exports <- getNamespaceExports("tracebridge")
  missing_required <- setdiff(t$required, exports)
  expect_equal(missing_required, character())
  missing <- setdiff(t$all, exports)
  message(sprintf("surface: %d of %d targeted mlverse exports present; still missing: %s",
                  length(t$all) - length(missing), length(t$all),
                  paste(missing, collapse = ", ")))
  expect_gt(length(t$all) - length(missing), 300)
})

test_that("each table function is exported, documented, and built with the table's arguments", {
  tab <- surface_rows()
  fns <- setdiff(tab$r_name, "-")
  expect_equal(anyDuplicated(fns), 0L)
  expect_equal(setdiff(fns, getNamespaceExports("tracebridge")), character())
  rd <- readLines(system.file("help", "AnIndex", package = "tracebridge"))
  documented <- sub("\t.*$", "", rd)
  expect_equal(setdiff(fns, documented), character())
  expect_equal(names(formals(torch_argmax)), c("self", "dim", "keepdim"))
  expect_equal(names(formals(torch_zeros)), c("...", "dtype", "device", "requires_grad"))
  expect_null(formals(torch_sum)$dim)
})

test_that("the table uses only known argument and result kinds", {
  tab <- surface_rows()
  kinds <- c("tensor", "scalar", "tensors", "tensors_splat", "dim", "dims", "index", "index1",
             "class_index", "index_list", "size", "int", "ints", "double", "doubles", "bool",
             "string", "dtype", "device", "params", "optimizer", "module", "any", "long",
             "fn")
  args <- unlist(strsplit(tab$args, ";", fixed = TRUE))
  used <- unique(sub("=.*$", "", sub("^[^:]*:", "", args)))
  used <- sub("...", "", used, fixed = TRUE)
  expect_equal(setdiff(used, kinds), character())
  results <- sub("\\(.*$", "", tab$result)
  expect_equal(setdiff(results, c("tensor", "index", "values_indices", "maybe_values_indices",
                                  "tensors", "named_tensors", "where", "unique", "r", "sizes", "none", "module",
                                  "optimizer", "scheduler")), character())
})

test_that("methods on tensors come from the table and unknown ones fail clearly", {
  x <- torch_tensor(c(1, 9, 3))
  expect_true(all(c("argmax", "view", "index_select", "shape") %in% .DollarNames(x, "")))
  expect_error(x$not_a_method(), class = "tracebridge_no_method_error")
  expect_error(x$not_a_method(), "x\\$py\\$not_a_method")
})
