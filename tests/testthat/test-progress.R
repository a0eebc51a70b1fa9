# Progress on jit_save() / jit_load() of large files (R/progress.R): through cli, only where a
# person looks, and never when asked not to.

test_that("progress is wanted on request, by option or variable, else on a terminal", {
  withr_env <- function(value, code) {
    old <- Sys.getenv("TRACEBRIDGE_PROGRESS", NA)
    on.exit(if (is.na(old)) Sys.unsetenv("TRACEBRIDGE_PROGRESS")
            else Sys.setenv(TRACEBRIDGE_PROGRESS = old))
    if (is.na(value)) Sys.unsetenv("TRACEBRIDGE_PROGRESS")
    else Sys.setenv(TRACEBRIDGE_PROGRESS = value)
    code
  }
  expect_true(tracebridge:::progress_wanted(TRUE))
  expect_false(tracebridge:::progress_wanted(FALSE))
  withr_env("0", expect_false(tracebridge:::progress_wanted()))
  withr_env("1", expect_true(tracebridge:::progress_wanted()))
  withr_env(NA, expect_equal(tracebridge:::progress_wanted(),
                             interactive() || isatty(stderr())))
  old <- options(tracebridge.progress = FALSE)
  on.exit(options(old))
  withr_env("1", expect_false(tracebridge:::progress_wanted()))
})

test_that("jit_save and jit_load of a large file say what they do and how long it took", {
  skip_if_not(torch_is_installed())
  old <- options(tracebridge.progress_bytes = 1000)  # "large" for this test
  on.exit(options(old))
  m <- jit_trace(nn_linear(20, 20), torch_ones(2, 20))  # 1680 bytes of state
  path <- tempfile(fileext = ".tb")
  msgs <- character()
  withCallingHandlers(
    {
      jit_save(m, path, progress = TRUE)
      jit_load(path, progress = TRUE)
    },
    message = function(m) {
      msgs <<- c(msgs, conditionMessage(m))
      invokeRestart("muffleMessage")
    }
  )
  text <- paste(msgs, collapse = "")
  expect_match(text, "Saving .*\\.tb.* \\(1\\.6 KiB\\)")
  expect_match(text, "Loading .*\\.tb.* \\(")
  expect_no_message(jit_load(path, progress = FALSE))
  expect_no_message(jit_save(m, path, progress = FALSE))
  options(tracebridge.progress_bytes = 1e9)  # small files never show
  expect_no_message(jit_load(path, progress = TRUE))
})

test_that("sizes are shown in binary units", {
  expect_equal(tracebridge:::format_bytes(512), "512 B")
  expect_equal(tracebridge:::format_bytes(1536), "1.5 KiB")
  expect_equal(tracebridge:::format_bytes(2^30), "1.0 GiB")
})
