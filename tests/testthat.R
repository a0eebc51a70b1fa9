library(testthat)
library(tracebridge)

test_check("tracebridge")
