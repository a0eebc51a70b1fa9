# torch_save() / torch_load(): tensors, lists of tensors and module state in the project's
# own safe format, never pickle. The file is a ZIP archive (stored, not compressed) of
# `torch_save.json` (the structure) and `tensors.safetensors` (the data, in the
# safetensors layout the artifact uses), so any language can read it and loading runs no
# code.

save_format <- "tracebridge.torch_save"

# dtype name -> safetensors code, from the one dtype table (R/inspect.R).
st_dtypes <- function() dtype_column("safetensors")

#' Save and load tensors, lists and module state
#'
#' `torch_save()` writes a tensor, a (nested, possibly named) list of tensors and R
#' values, or a module's state (`state_dict()`), to one file in tracebridge's safe
#' format (a ZIP of JSON and safetensors; no pickle, nothing executed on load).
#' `torch_load()` reads it back. Unlike mlverse torch, a module is saved as its state:
#' `torch_load()` returns the named list of tensors, for `model$load_state_dict()`.
#' Optimizer and scheduler states (`opt$state_dict()`, `sched$state_dict()`) are lists
#' too, so one file can hold everything needed to resume training. Numbers come back
#' exactly (doubles to the last bit) and tensors that required gradients still do.
#'
#' @param obj A tensor, a list, or an `nn_module`.
#' @param path A file path.
#' @param device Where to put the loaded tensors (`NULL`: the CPU).
#' @return `torch_save()`: `path`, invisibly. `torch_load()`: the object.
#' @name torch_save
#' @examples
#' if (torch_is_installed()) {
#'   path <- tempfile(fileext = ".pt")
#'   torch_save(list(w = torch_ones(2, 2), step = 3L), path)
#'   torch_load(path)$w
#' }
NULL

#' @rdname torch_save
#' @export
torch_save <- function(obj, path) {
  tensors <- list()
  describe <- function(x) {
    if (inherits(x, "nn_module")) {
      return(list(type = "module", state = describe(x$state_dict())))
    }
    if (inherits(x, "torch_tensor")) {
      key <- sprintf("t%d", length(tensors))
      tensors[[key]] <<- x
      # As in mlverse, a tensor that requires grad comes back requiring grad.
      if (isTRUE(x$requires_grad)) return(list(type = "tensor", key = key, requires_grad = TRUE))
      return(list(type = "tensor", key = key))
    }
    if (is.null(x)) return(list(type = "null"))
    if (is.list(x)) {
      return(list(type = "list", names = names(x) %||% character(),
                  items = unname(lapply(x, describe))))
    }
    if (is.atomic(x)) {
      # JSON numbers would keep only 15 digits; a resumed run needs the exact doubles
      # (learning rates, a scheduler's best metric), so they are written as text.
      value <- if (is.double(x)) sprintf("%.17g", x) else x
      return(list(type = "value", class = typeof(x), value = value, dim = dim(x)))
    }
    tracebridge_abort(sprintf("torch_save(): can not save %s.", describe_value(x)),
                      "type_error")
  }
  structure <- describe(obj)
  doc <- list(format = save_format, version = 1L, object = structure)
  json <- jsonlite::toJSON(doc, auto_unbox = TRUE, null = "null", digits = NA)
  blob <- safetensors_raw(tensors)
  zipfile <- reticulate::import("zipfile", convert = FALSE)
  archive <- zipfile$ZipFile(path.expand(path), "w", zipfile$ZIP_STORED)
  on.exit(archive$close())
  archive$writestr("torch_save.json", as.character(json))
  archive$writestr("tensors.safetensors", reticulate::r_to_py(blob))
  invisible(path)
}

safetensors_raw <- function(tensors) {
  header <- list()
  chunks <- list()
  offset <- 0
  for (key in names(tensors)) {
    py <- tensor_py(tensors[[key]])$detach()$cpu()$contiguous()
    dtype <- sub("torch.", "", reticulate::py_str(py$dtype), fixed = TRUE)
    if (!dtype %in% names(st_dtypes())) {
      tracebridge_abort(sprintf("torch_save(): tensors of dtype %s can not be saved.", dtype),
                        "type_error")
    }
    flat <- py$reshape(-1L)$view(py_torch()$uint8)
    bytes <- if (reticulate::py_to_r(flat$numel()) == 0L) raw() else
      as.raw(reticulate::py_to_r(flat$to(py_torch()$int32)$numpy()))
    header[[key]] <- list(dtype = st_dtypes()[[dtype]], shape = as.list(dim(tensors[[key]])),
                          data_offsets = c(offset, offset + length(bytes)))
    chunks[[key]] <- bytes
    offset <- offset + length(bytes)
  }
  head <- if (length(header)) as.character(jsonlite::toJSON(header, auto_unbox = TRUE))
    else "{}"
  head <- charToRaw(head)
  head <- c(head, rep(charToRaw(" "), (8 - length(head) %% 8) %% 8))
  len <- packBits(intToBits(length(head)), "raw")
  c(len, raw(4), head, unlist(chunks, use.names = FALSE))
}

#' @rdname torch_save
#' @export
torch_load <- function(path, device = NULL) {
  path <- path.expand(path)
  if (!file.exists(path)) {
    tracebridge_abort(sprintf("torch_load(): no file at '%s'.", path),
                      "tracebridge_artifact_error")
  }
  zipfile <- reticulate::import("zipfile", convert = FALSE)
  archive <- tryCatch(zipfile$ZipFile(path, "r"), error = function(e) {
    tracebridge_abort(sprintf("torch_load(): '%s' is not a file written by torch_save().",
                              path), "tracebridge_artifact_error")
  })
  on.exit(archive$close())
  doc <- tryCatch(
    jsonlite::fromJSON(reticulate::py_to_r(archive$read("torch_save.json")$decode("utf-8")),
                       simplifyVector = FALSE),
    error = function(e) NULL)
  if (is.null(doc) || !identical(doc$format, save_format)) {
    tracebridge_abort(sprintf("torch_load(): '%s' is not a file written by torch_save().",
                              path), "tracebridge_artifact_error")
  }
  if (!identical(as.integer(doc$version), 1L)) {
    tracebridge_abort(sprintf(
      "torch_load(): '%s' has format version %s; this tracebridge reads version 1.",
      path, doc$version), "tracebridge_artifact_error")
  }
  np <- reticulate::import("numpy", convert = FALSE)
  bytes <- np$frombuffer(archive$read("tensors.safetensors"), dtype = "uint8")
  tensors <- read_safetensors(as.raw(reticulate::py_to_r(bytes)), path)
  build <- function(d) {
    switch(d$type,
      tensor = {
        py <- tensors[[d$key]]
        if (is.null(py)) {
          tracebridge_abort(sprintf("torch_load(): '%s' lacks tensor `%s`.", path, d$key),
                            "tracebridge_artifact_error")
        }
        if (!is.null(device)) py <- py$to(device_py(device))
        if (isTRUE(d$requires_grad)) py$requires_grad_(TRUE)
        wrap_tensor(py)
      },
      null = NULL,
      module = build(d$state),
      list = {
        out <- lapply(d$items, build)
        if (length(d$names)) names(out) <- unlist(d$names)
        out
      },
      value = {
        v <- unlist(d$value)
        v <- switch(d$class, integer = as.integer(v),
                    double = suppressWarnings(as.double(v)),
                    logical = as.logical(v), character = as.character(v), v)
        if (!is.null(d$dim)) dim(v) <- unlist(d$dim)
        v
      },
      tracebridge_abort(sprintf("torch_load(): unknown entry type `%s`.", d$type),
                        "tracebridge_artifact_error")
    )
  }
  build(doc$object)
}

read_safetensors <- function(blob, path) {
  bad <- function(what) {
    tracebridge_abort(sprintf("torch_load(): '%s': tensors.safetensors %s.", path, what),
                      "tracebridge_artifact_error")
  }
  if (length(blob) < 8) bad("is truncated")
  n <- readBin(blob[1:4], "integer", size = 4, endian = "little")
  if (n < 0 || 8 + n > length(blob)) bad("has a header that runs past the end")
  header <- jsonlite::fromJSON(rawToChar(blob[9:(8 + n)]), simplifyVector = FALSE)
  data <- if (length(blob) > 8 + n) blob[(9 + n):length(blob)] else raw()
  from_st <- st_code_names()
  out <- list()
  for (key in setdiff(names(header), "__metadata__")) {
    info <- header[[key]]
    dtype <- from_st[[info$dtype]]
    if (is.null(dtype)) bad(sprintf("gives tensor `%s` an unknown dtype", key))
    offs <- unlist(info$data_offsets)
    shape <- as.integer(unlist(info$shape))
    if (length(offs) != 2 || offs[[1]] < 0 || offs[[2]] > length(data) || offs[[1]] > offs[[2]]) {
      bad(sprintf("gives tensor `%s` bad offsets", key))
    }
    bytes <- if (offs[[2]] > offs[[1]]) data[(offs[[1]] + 1):offs[[2]]] else raw()
    u8 <- torch_tensor(as.integer(bytes), dtype = torch_uint8())
    py <- withCallingHandlers(
      tensor_py(u8)$view(reticulate::py_get_attr(py_torch(), dtype))$reshape(
        reticulate::tuple(as.list(shape), convert = FALSE)),
      error = function(e) bad(sprintf("gives tensor `%s` a shape its bytes do not fit", key)))
    out[[key]] <- py$clone()
  }
  out
}
