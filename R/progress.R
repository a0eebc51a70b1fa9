# Progress on jit_save() and jit_load() of large files, through cli.
#
# Note: why a step, not a bar. The work happens inside one Python call, during which R
# cannot run, so nothing in R can redraw a bar; cli's step says what is being done when it
# starts and how long it took when it ends ("v Loading 'model.tb' [13s]"). It shows for
# files of at least `tracebridge.progress_bytes` bytes (64 MiB), and only where a person
# looks: `progress = TRUE/FALSE` wins, then `options(tracebridge.progress = )`, then
# TRACEBRIDGE_PROGRESS ("0" off, "1" on, as in Python), then an interactive session or a
# terminal on stderr.

progress_wanted <- function(progress = NULL) {
  if (!is.null(progress)) return(isTRUE(progress))
  opt <- getOption("tracebridge.progress")
  if (!is.null(opt)) return(isTRUE(opt))
  env <- tolower(Sys.getenv("TRACEBRIDGE_PROGRESS", ""))
  if (env %in% c("0", "false", "no", "off")) return(FALSE)
  if (env %in% c("1", "true", "yes", "on")) return(TRUE)
  interactive() || isatty(stderr())
}

# Run `expr` as a cli step ("Saving 'file' (1.0 GiB)") when `bytes` is large enough and
# progress is wanted; the step ends, with its time, when this function returns.
with_progress_step <- function(verb, file, bytes, expr, progress = NULL) {
  threshold <- getOption("tracebridge.progress_bytes", 64 * 2^20)
  if (!progress_wanted(progress) || is.na(bytes) || bytes < threshold) return(expr)
  size <- format_bytes(bytes)
  cli::cli_progress_step("{verb} {.file {file}} ({size})")
  expr
}

format_bytes <- function(bytes) {
  units <- c("B", "KiB", "MiB", "GiB", "TiB")
  power <- max(0L, min(length(units) - 1L, floor(log(max(bytes, 1), 1024))))
  if (power == 0L) return(sprintf("%d B", as.integer(bytes)))
  sprintf("%.1f %s", bytes / 1024^power, units[[power + 1L]])
}
