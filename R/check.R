# The checks that R applies to a parsed program.json before anything uses it.

check_program <- function(doc, file) {
  if (!is.list(doc) || !identical(doc$format, "tracebridge")) {
    inspect_abort(sprintf("%s: not a tracebridge artifact (format field missing).", file))
  }
  version <- doc$format_version
  if (!is.numeric(version) || length(version) != 1L || version < 1 || version %% 1 != 0) {
    inspect_abort(sprintf("%s: invalid format_version %s.", file, deparse(version)))
  }
  if (version > inspect_format_version) {
    inspect_abort(sprintf(paste(
      "%s: format version %d is newer than this tracebridge reads (up to %d); upgrade the",
      "tracebridge R package to read it."
    ), file, as.integer(version), inspect_format_version))
  }
  opset <- doc$opset_version
  if (is.numeric(opset) && length(opset) == 1L && opset > inspect_opset_version) {
    inspect_abort(sprintf(paste(
      "%s: op-set version %d is newer than this tracebridge knows (%d); upgrade the",
      "tracebridge R package to read it."
    ), file, as.integer(opset), inspect_opset_version))
  }
  for (field in c("producer", "kind", "methods", "state")) {
    if (is.null(doc[[field]])) {
      inspect_abort(sprintf("%s: program.json has no '%s' field.", file, field))
    }
  }
  if (!length(doc$methods) || is.null(names(doc$methods))) {
    inspect_abort(sprintf("%s: program.json has no methods.", file))
  }
  invisible()
}

