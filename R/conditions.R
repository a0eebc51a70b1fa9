# Error conditions, one constructor per class, as mlverse torch's R/conditions.R has them.
# Each signals an error of class c(<class>, "tracebridge_error", "error", "condition"),
# so that `tryCatch(..., value_error = )` and `expect_error(class = )` work as in mlverse.
# Errors that come from Python get their classes in rethrow_python() (R/python.R).

value_error <- function(message) tracebridge_abort(message, "value_error")

type_error <- function(message) tracebridge_abort(message, "type_error")

index_error <- function(message) tracebridge_abort(message, "index_error")

runtime_error <- function(message) tracebridge_abort(message, "runtime_error")

not_implemented_error <- function(message) tracebridge_abort(message, "not_implemented_error")

# The end of a pass over a data loader (mlverse: `iter$.next()` after the last batch).
stop_iteration_error <- function(message) tracebridge_abort(message, "stop_iteration_error")
