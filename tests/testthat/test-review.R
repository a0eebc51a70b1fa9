# Findings of the review of the eleventh round's changes (each with the case that showed
# it, compared with Python torch or mlverse torch's documented defaults).

test_that("nnf_grid_sample's align_corners defaults to FALSE, as in mlverse (no warning)", {
  input <- torch_tensor(array(as.numeric(1:16), c(1, 1, 4, 4)))
  grid <- torch_tensor(array(c(-0.5, 0.25, 0.5, -1, 0.75, 0, -0.25, 1), c(1, 2, 2, 2)))
  expect_no_warning(got <- nnf_grid_sample(input, grid))
  want <- tracebridge:::py_torch()$nn$functional$grid_sample(input$py, grid$py,
                                                             align_corners = FALSE)
  expect_equal(as_array(got), as_array(tracebridge:::wrap_tensor(want)))
})
