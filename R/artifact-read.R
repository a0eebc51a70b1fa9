# Reading an artifact with base R: the ZIP container, program.json and the safetensors
# header. Nothing in the file runs; the weights are read only when asked for.

# --- reading ----------------------------------------------------------------------------

inspect_abort <- function(message) {
  stop(structure(
    class = c("tracebridge_artifact_error", "tracebridge_error", "error", "condition"),
    list(message = message, call = NULL)
  ))
}

archive_members <- function(file) {
  if (!file.exists(file) || dir.exists(file)) {
    inspect_abort(sprintf("%s: no such file.", file))
  }
  magic <- readBin(file, "raw", n = 4L)
  is_zip <- length(magic) == 4L && identical(magic[1:2], as.raw(c(0x50, 0x4b)))
  listing <- if (is_zip) {
    tryCatch(utils::unzip(file, list = TRUE), error = function(e) NULL,
             warning = function(w) NULL)
  }
  if (is.null(listing)) {
    inspect_abort(sprintf(paste(
      "%s: not a tracebridge artifact (not a ZIP archive; tracebridge files are ZIP",
      "archives holding program.json)."
    ), file))
  }
  members <- listing$Length
  names(members) <- listing$Name
  members
}

read_member <- function(file, member, n) {
  con <- unz(file, member, open = "rb")
  on.exit(close(con))
  readBin(con, "raw", n = n)
}

read_program <- function(file) {
  members <- archive_members(file)
  if (!"program.json" %in% names(members)) {
    inspect_abort(sprintf("%s: not a tracebridge artifact (no program.json).", file))
  }
  raw <- tryCatch(read_member(file, "program.json", members[["program.json"]]),
                  error = function(e) {
                    inspect_abort(sprintf("%s: corrupt or truncated archive (%s).", file,
                                          conditionMessage(e)))
                  })
  text <- rawToChar(raw)
  Encoding(text) <- "UTF-8"
  # parse_json() only parses: unlike fromJSON(), it never takes the text for a file name or
  # a URL, which matters for a file from anywhere.
  doc <- tryCatch(
    jsonlite::parse_json(tag_big_ints(text), simplifyVector = FALSE),
    error = function(e) {
      inspect_abort(sprintf("%s: program.json is not valid JSON (%s).", file,
                            conditionMessage(e)))
    }
  )
  check_program(doc, file)
  doc$.members <- members
  doc
}

# The state from program.json, cross-checked against the safetensors header.
read_state <- function(file, doc) {
  info <- doc$state
  header <- read_safetensors_header(file, doc$.members)
  declared <- names(info) %||% character(0)
  stored <- setdiff(names(header$tensors) %||% character(0), "__metadata__")
  missing <- setdiff(declared, stored)
  extra <- setdiff(stored, declared)
  if (length(missing)) {
    inspect_abort(sprintf("%s: state %s has no tensor in tensors.safetensors.", file,
                          paste0("'", missing, "'", collapse = ", ")))
  }
  if (length(extra)) {
    inspect_abort(sprintf("%s: tensors.safetensors holds %s, which program.json does not list.",
                          file, paste0("'", extra, "'", collapse = ", ")))
  }
  count <- doc$tensors$count
  if (!is.null(count) && count != length(declared)) {
    inspect_abort(sprintf("%s: tensors.count is %d but the state has %d tensors.", file,
                          as.integer(count), length(declared)))
  }
  rows <- lapply(declared, function(name) {
    entry <- info[[name]]
    tensor <- header$tensors[[name]]
    shape <- as.numeric(unlist(entry$shape))
    st_shape <- as.numeric(unlist(tensor$shape))
    st_dtype <- inspect_st_dtypes[tensor$dtype %||% ""]
    offsets <- as.numeric(unlist(tensor$data_offsets))
    numel <- prod(shape)
    bytes <- numel * (inspect_elt_size[entry$dtype %||% ""] %||% NA)
    mismatch <- function(what) {
      inspect_abort(sprintf("%s: state '%s': %s.", file, name, what))
    }
    if (is.na(st_dtype) || !identical(unname(st_dtype), entry$dtype)) {
      mismatch(sprintf("program.json says dtype %s, tensors.safetensors says %s",
                       entry$dtype %||% "(none)", tensor$dtype %||% "(none)"))
    }
    if (!identical(shape, st_shape)) {
      mismatch(sprintf("program.json says shape [%s], tensors.safetensors says [%s]",
                       paste(shape, collapse = ", "), paste(st_shape, collapse = ", ")))
    }
    if (length(offsets) != 2L || offsets[1] < 0 || offsets[2] < offsets[1] ||
        offsets[2] > header$data_bytes) {
      mismatch("its data offsets in tensors.safetensors are out of range")
    }
    if (offsets[2] - offsets[1] != bytes) {
      mismatch(sprintf("%s bytes in tensors.safetensors do not fit shape [%s] of %s",
                       format_int(offsets[2] - offsets[1]), paste(shape, collapse = ", "),
                       entry$dtype))
    }
    data.frame(
      name = name, kind = entry$kind %||% NA_character_, dtype = entry$dtype,
      shape = I(list(shape)), type = type_str(list(kind = "Tensor", dtype = entry$dtype,
                                                   shape = entry$shape)),
      numel = numel, bytes = unname(bytes),
      requires_grad = isTRUE(entry$requires_grad), stringsAsFactors = FALSE
    )
  })
  state <- do.call(rbind, c(list(empty_state()), rows))
  rownames(state) <- NULL
  state
}

read_safetensors_header <- function(file, members) {
  if (!"tensors.safetensors" %in% names(members)) {
    return(list(tensors = list(), data_bytes = 0))
  }
  size <- members[["tensors.safetensors"]]
  if (size == 0) return(list(tensors = list(), data_bytes = 0))
  con <- unz(file, "tensors.safetensors", open = "rb")
  on.exit(close(con))
  words <- readBin(con, "integer", n = 2L, size = 4L, endian = "little")
  if (length(words) < 2L) inspect_abort(sprintf("%s: tensors.safetensors is truncated.", file))
  low <- if (words[1] < 0) words[1] + 2^32 else words[1]
  head_len <- low + words[2] * 2^32
  if (words[2] != 0L || head_len > size - 8) {
    inspect_abort(sprintf("%s: tensors.safetensors header runs past the end of the data.",
                          file))
  }
  head <- rawToChar(readBin(con, "raw", n = head_len))
  tensors <- tryCatch(
    jsonlite::parse_json(head, simplifyVector = FALSE),
    error = function(e) {
      inspect_abort(sprintf("%s: tensors.safetensors has a corrupt header.", file))
    }
  )
  list(tensors = tensors, data_bytes = size - 8 - head_len)
}

# Whole numbers too large for a 32-bit integer would come back from the JSON parser as
# doubles and lose digits past 2^53 (a slice end of sys.maxsize, say); they are kept as
# text, tagged, and printed as written.
big_int_tag <- "\037tbint:"

tag_big_ints <- function(text) {
  if (!grepl("[0-9]{10}", text)) return(text)
  pattern <- "\"(?:[^\"\\\\]|\\\\.)*\"|-?[0-9]+(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
  m <- gregexpr(pattern, text, perl = TRUE)
  tokens <- regmatches(text, m)[[1]]
  big <- grepl("^-?[0-9]{10,}$", tokens) & abs(suppressWarnings(as.numeric(tokens))) >= 2^31
  if (!any(big)) return(text)
  tokens[big] <- paste0("\"\\u001ftbint:", tokens[big], "\"")
  regmatches(text, m) <- list(tokens)
  text
}

is_big_int <- function(x) is.character(x) && length(x) == 1L && startsWith(x, big_int_tag)

