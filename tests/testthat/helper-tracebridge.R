skip_if_no_torch <- function() {
  if (!torch_is_installed()) skip("Python torch and tracebridge are not available")
}

# Values of a tensor as an R array, for comparisons with base R.
arr <- function(x) as_array(x)
