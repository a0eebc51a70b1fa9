# Data: dataset(), tensor_dataset(), dataloader() with mlverse's interface, in R (as in
# mlverse, data loading is R code; only the tensors live in torch).

#' Datasets
#'
#' `dataset()` defines a dataset class: `initialize` sets it up, `.getitem(i)` returns
#' item `i` (1-based), `.length()` the number of items; optionally `.getbatch(indices)`
#' returns a whole batch at once. `tensor_dataset()` makes a dataset of the rows of
#' tensors that share their first dimension.
#'
#' @param name The class name.
#' @param ... For `dataset()`: methods (`initialize`, `.getitem`, `.length`, ...). For
#'   `tensor_dataset()`: tensors (optionally named).
#' @param parent_env The environment the methods see beyond `self`.
#' @return `dataset()`: a generator. `tensor_dataset()`: a dataset.
#' @name dataset
#' @examples
#' if (torch_is_installed()) {
#'   ds <- tensor_dataset(x = torch_randn(10, 3), y = torch_arange(1, 10))
#'   length(ds)
#'   ds[2]$y
#'   Squares <- dataset("Squares",
#'     initialize = function(n) self$n <- n,
#'     .getitem = function(i) list(x = torch_tensor(i), y = torch_tensor(i^2)),
#'     .length = function() self$n
#'   )
#'   length(Squares(5))
#' }
NULL

#' @rdname dataset
#' @export
dataset <- function(name = NULL, ..., parent_env = parent.frame()) {
  force(parent_env)
  methods <- list(...)
  if (length(methods) && (is.null(names(methods)) || any(!nzchar(names(methods))))) {
    tracebridge_abort("dataset(): methods in `...` must be named.", "value_error")
  }
  name <- name %||% "dataset"
  generator <- function(...) {
    self <- new.env(parent = emptyenv())
    env <- new.env(parent = parent_env)
    assign("self", self, envir = env)
    for (nm in names(methods)) {
      f <- methods[[nm]]
      if (is.function(f)) environment(f) <- env
      assign(nm, f, envir = self)
    }
    class(self) <- c(name, "dataset")
    init <- get0("initialize", envir = self, inherits = FALSE)
    if (is.function(init)) init(...)
    self
  }
  structure(generator, class = "dataset_generator")
}

#' @rdname dataset
#' @export
tensor_dataset <- function(...) {
  tensors <- list(...)
  if (!length(tensors) || !all(vapply(tensors, inherits, logical(1), "torch_tensor"))) {
    tracebridge_abort("tensor_dataset(): give one or more tensors.", "type_error")
  }
  n <- vapply(tensors, function(t) dim(t)[[1]], integer(1))
  if (length(unique(n)) != 1) {
    tracebridge_abort(sprintf(
      "tensor_dataset(): the tensors' first dimensions differ (%s).",
      paste(n, collapse = ", ")), "value_error")
  }
  gen <- dataset("tensor_dataset",
    initialize = function() self$tensors <- tensors,
    .getitem = function(i) lapply(self$tensors, function(t) t$select(1, i)),
    .getbatch = function(i) {
      idx <- torch_tensor(as.integer(i), dtype = torch_long())
      lapply(self$tensors, function(t) surface_fn("torch_index_select")(t, 1, idx))
    },
    .length = function() n[[1]]
  )
  gen()
}

#' Subset of a dataset
#'
#' `dataset_subset()` is the dataset of the items `indices` (1-based) of `dataset`, in
#' that order, as in mlverse torch: item `i` of the subset is item `indices[i]` of
#' `dataset`.
#'
#' @param dataset A dataset.
#' @param indices Whole numbers from 1 to `length(dataset)`.
#' @return A dataset.
#' @examples
#' if (torch_is_installed()) {
#'   ds <- tensor_dataset(torch_arange(1, 10))
#'   s <- dataset_subset(ds, c(2, 5))
#'   length(s)
#'   s[2][[1]]
#' }
#' @export
dataset_subset <- function(dataset, indices) {
  if (!inherits(dataset, "dataset")) {
    type_error(sprintf("dataset_subset(): `dataset` must be a dataset, not %s.",
                       describe_value(dataset)))
  }
  check_whole(indices, "indices")
  n <- length(dataset)
  bad <- indices[indices < 1 | indices > n]
  if (length(bad)) {
    tracebridge_abort(sprintf(
      "dataset_subset(): `indices` must be 1 to %d (the dataset's length, 1-based); got %s.",
      n, paste(format(utils::head(bad, 3)), collapse = ", ")), "index_error")
  }
  indices <- as.integer(indices)
  parent <- dataset
  methods <- list(
    initialize = function() {
      self$dataset <- parent
      self$indices <- indices
    },
    .getitem = function(i) self$dataset[self$indices[[i]]],
    .length = function() length(self$indices)
  )
  if (is.function(parent$.getbatch)) {
    methods$.getbatch <- function(i) self$dataset$.getbatch(self$indices[i])
  }
  # `dataset` is the argument here; the generator is the function of that name.
  make <- get("dataset", mode = "function")
  do.call(make, c(list("dataset_subset"), methods))()
}

#' @export
`$.dataset` <- function(x, name) get0(name, envir = x, inherits = FALSE)

#' @export
`$<-.dataset` <- function(x, name, value) {
  assign(name, value, envir = x)
  x
}

#' @export
`[.dataset` <- function(x, i) {
  if (length(i) > 1 && is.function(x$.getbatch)) return(x$.getbatch(i))
  if (!is.function(x$.getitem) && is.function(x$.getbatch)) return(x$.getbatch(i))
  dataset_method(x, ".getitem", "function(i) list(x = ..., y = ...)")(i)
}

#' @export
length.dataset <- function(x) as.integer(dataset_method(x, ".length", "function() n")())

# A method that dataset() was given, or an error that says how to give it.
dataset_method <- function(x, name, example) {
  f <- x[[name]]
  if (is.function(f)) return(f)
  tracebridge_abort(sprintf(
    "The dataset <%s> has no `%s()` method; define it in dataset(..., %s = %s).",
    class(x)[[1]], name, name, example), "value_error")
}

#' Data loaders
#'
#' A data loader draws batches from a dataset: `batch_size` items at a time, in a new
#' random order each pass if `shuffle` (drawn from torch's generator, as in mlverse:
#' [torch_manual_seed()] makes it reproducible), collated by stacking the items' tensors (and
#' numbers) along a new first dimension, list element by list element.
#' `dataloader_make_iter()` starts a pass; `dataloader_next()` returns the next batch, or
#' `completed` after the last. As in mlverse, `dl$.iter()` starts a pass too, and the
#' iterator's `$.next()` returns the next batch or signals a `stop_iteration_error` after
#' the last; [enumerate()] gives the batches for a `for` loop.
#'
#' @param dataset A dataset.
#' @param batch_size Items per batch.
#' @param shuffle Draw the items in random order.
#' @param drop_last Drop a last, incomplete batch.
#' @param collate_fn A function from a list of items to a batch; the default stacks.
#' @param sampler,batch_sampler Not supported (an error unless `NULL`).
#' @param num_workers,pin_memory,timeout,worker_init_fn Accepted so that mlverse code
#'   runs; batches are always loaded in this R process, so the results are the same.
#' @param dataloader A data loader (for `dataloader_make_iter()`).
#' @param iter An iterator from `dataloader_make_iter()`.
#' @param completed What `dataloader_next()` returns when the pass is over.
#' @param x A data loader.
#' @return `dataloader()`: a data loader; `length()`: its number of batches.
#' @name dataloader
#' @examples
#' if (torch_is_installed()) {
#'   ds <- tensor_dataset(torch_randn(10, 3), torch_randn(10))
#'   dl <- dataloader(ds, batch_size = 4)
#'   length(dl)
#'   it <- dataloader_make_iter(dl)
#'   b <- dataloader_next(it)
#'   dim(b[[1]])
#'   it <- dl$.iter()
#'   while (it$.has_next()) print(dim(it$.next()[[1]]))
#' }
NULL

#' @rdname dataloader
#' @export
dataloader <- function(dataset, batch_size = 1, shuffle = FALSE, sampler = NULL,
                       batch_sampler = NULL, num_workers = 0, collate_fn = NULL,
                       pin_memory = FALSE, drop_last = FALSE, timeout = -1,
                       worker_init_fn = NULL) {
  if (!inherits(dataset, "dataset")) {
    tracebridge_abort("dataloader(): `dataset` must be a dataset.", "type_error")
  }
  if (!is.null(sampler) || !is.null(batch_sampler)) {
    tracebridge_abort(paste(
      "dataloader(): `sampler` and `batch_sampler` are not supported;",
      "use `shuffle = TRUE`, or a dataset that returns the items in the order you want."),
      "not_implemented_error")
  }
  if (!is.numeric(batch_size) || length(batch_size) != 1 || is.na(batch_size) ||
      batch_size < 1 || batch_size != round(batch_size)) {
    tracebridge_abort("dataloader(): `batch_size` must be a positive whole number.",
                      "value_error")
  }
  # An environment, as in mlverse: `for (b in dl)` is an error (R can not loop over an
  # environment) instead of a silent loop over the loader's settings.
  dl <- list2env(list(dataset = dataset, batch_size = as.integer(batch_size),
                      shuffle = isTRUE(shuffle), drop_last = isTRUE(drop_last),
                      collate_fn = collate_fn %||% default_collate),
                 parent = emptyenv())
  class(dl) <- "dataloader"
  dl
}

#' @export
`$.dataloader` <- function(x, name) {
  # mlverse's methods: `dl$.iter()` starts a pass, `dl$.length()` counts the batches.
  switch(name,
    .iter = function() dataloader_make_iter(x),
    .length = function() length(x),
    get0(name, envir = x, inherits = FALSE)
  )
}

#' @export
print.dataloader <- function(x, ...) {
  cat(sprintf("<dataloader> %d batches of %d from a dataset of %d items%s%s\n", length(x),
              x$batch_size, length(x$dataset), if (x$shuffle) ", shuffled" else "",
              if (x$drop_last) ", the last incomplete batch dropped" else ""))
  cat("Loop over it with `for (b in enumerate(dl))`, or dataloader_make_iter() and",
      "dataloader_next().\n")
  invisible(x)
}

#' @export
print.dataset <- function(x, ...) {
  n <- if (is.function(x$.length)) sprintf("%d items", length(x)) else "no .length()"
  cat(sprintf("<dataset: %s> %s\n", class(x)[[1]], n))
  invisible(x)
}

#' @rdname dataloader
#' @export
length.dataloader <- function(x) {
  n <- length(x$dataset)
  as.integer(if (x$drop_last) n %/% x$batch_size else ceiling(n / x$batch_size))
}

#' @rdname dataloader
#' @export
dataloader_make_iter <- function(dataloader) {
  n <- length(dataloader$dataset)
  # As in mlverse, the order comes from torch's generator, so torch_manual_seed() makes a
  # shuffled pass reproducible.
  order <- if (dataloader$shuffle) {
    as.integer(as_array(surface_fn("torch_randperm")(n))) + 1L
  } else {
    seq_len(n)
  }
  it <- new.env(parent = emptyenv())
  it$loader <- dataloader
  it$order <- order
  it$batch <- 0L
  it$batches <- length(dataloader)
  # mlverse's iterator method: the next batch, or a `stop_iteration_error` after the last.
  it$.next <- function() {
    if (it$batch >= it$batches) {
      stop_iteration_error(sprintf(paste(
        "The data loader's iterator is exhausted: all %d batches were read.",
        "Start a new pass with `dl$.iter()` or `dataloader_make_iter(dl)`."), it$batches))
    }
    dataloader_next(it)
  }
  it$.has_next <- function() it$batch < it$batches
  class(it) <- "dataloader_iterator"
  it
}

#' @rdname dataloader
#' @export
dataloader_next <- function(iter, completed = NULL) {
  if (iter$batch >= iter$batches) return(completed)
  dl <- iter$loader
  from <- iter$batch * dl$batch_size + 1L
  idx <- iter$order[from:min(from + dl$batch_size - 1L, length(iter$order))]
  iter$batch <- iter$batch + 1L
  ds <- dl$dataset
  if (is.function(ds$.getbatch) && identical(dl$collate_fn, default_collate)) {
    return(ds$.getbatch(idx))
  }
  getitem <- if (is.function(ds$.getitem)) ds$.getitem else
    dataset_method(ds, ".getitem", "function(i) list(x = ..., y = ...)")
  dl$collate_fn(lapply(idx, getitem))
}

default_collate <- function(items) {
  first <- items[[1]]
  if (inherits(first, "torch_tensor")) return(surface_fn("torch_stack")(items))
  if (is.numeric(first) || is.logical(first)) {
    return(torch_tensor(if (length(first) == 1) unlist(items) else do.call(rbind, items)))
  }
  if (is.list(first)) {
    out <- lapply(seq_along(first), function(k) default_collate(lapply(items, `[[`, k)))
    names(out) <- names(first)
    return(out)
  }
  items
}

#' Enumerate the batches of a data loader
#'
#' mlverse torch's loop over a data loader: `for (b in enumerate(dl)) { ... }`. As in
#' mlverse, `enumerate()` runs one pass over the loader and returns the list of its
#' batches, each the batch itself (a named list of tensors, as the dataset's `.getitem()`
#' gives them), so `b` is used as any batch: `b$x`, `b[[1]]`, `names(b)`, `length(b)`.
#' A pass reads every batch before the loop starts, and holds them all; for a loader too
#' large for that, loop with [dataloader_next()] or `dl$.iter()`, which read one batch at
#' a time. mlverse's `coro::loop(for (b in dl))` needs coro; those loops are its
#' equivalent.
#'
#' @param x A data loader.
#' @param max_len The most batches to read.
#' @param ... Unused.
#' @return A list with one batch per element.
#' @examples
#' if (torch_is_installed()) {
#'   dl <- dataloader(tensor_dataset(x = torch_arange(1, 5)), batch_size = 2)
#'   for (b in enumerate(dl)) print(b$x)
#' }
#' @export
enumerate <- function(x, ...) UseMethod("enumerate")

#' @rdname enumerate
#' @export
enumerate.dataloader <- function(x, max_len = 1e6, ...) {
  if (!is.numeric(max_len) || length(max_len) != 1 || is.na(max_len) || max_len < 0) {
    value_error(sprintf("enumerate(): `max_len` must be one number of 0 or more, not %s.",
                        describe_value(max_len)))
  }
  iter <- dataloader_make_iter(x)
  lapply(seq_len(min(length(x), max_len)), function(i) iter$.next())
}

#' @rdname enumerate
#' @export
enumerate.default <- function(x, ...) {
  type_error(sprintf("enumerate(): `x` must be a data loader (from dataloader()), not %s.",
                     describe_value(x)))
}
