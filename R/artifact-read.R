# Reading an artifact with base R: the ZIP container, program.json and the safetensors
# header. Nothing in the file runs; the weights are never read.
#
# Note: one reader's rules in two languages. The container is read here by the same strict
# rules as python/tracebridge/artifact/container.py (SPEC section 1), so that R and Python
# can never see two different programs in one file (a duplicated member or JSON key once
# made R show `relu` where Python ran `neg`): exactly the members the spec names, each
# once; no directories or links; stored, unencrypted, without data descriptors; local
# headers that agree with the central directory; members, central directory and end record
# tiling the file; ZIP64 records where 32 bits do not reach. The file is read by ranges
# (seek + readBin, in chunks of `getOption("tracebridge.read_chunk")` bytes), never whole:
# base R raw vectors stop at 2^31 - 1 bytes and artifacts of large models are bigger.

# compiled.pt2 (optional): an AOTInductor package, native code that only Python's
# load_compiled(trust_compiled_code = TRUE) opens; R never reads it (SPEC section 1).
artifact_members <- c("program.json", "tensors.safetensors", "compiled.pt2")
artifact_max_program_bytes <- 64 * 1024^2  # LIMITS['program_bytes'] of check/program.py
artifact_max_header_bytes <- 1e8
artifact_filler_prefix <- "#pad"
artifact_generator_prefix <- "#generator."
zip_methods <- c(`0` = "stored", `8` = "deflate", `9` = "deflate64", `12` = "bzip2",
                 `14` = "lzma", `93` = "zstd")

inspect_abort <- function(message) {
  # Messages quote names and text from the file: escaped to print, as everything else that
  # shows file text (printable(), R/graph-print.R).
  stop(structure(
    class = c("tracebridge_artifact_error", "tracebridge_error", "error", "condition"),
    list(message = printable(message), call = NULL)
  ))
}

# --- byte ranges -------------------------------------------------------------------------

read_chunk_size <- function() {
  chunk <- getOption("tracebridge.read_chunk", 2^27)
  max(1, min(floor(chunk), .Machine$integer.max))
}

# `n` bytes of the open connection `con` from byte `offset` (0-based), read in chunks.
read_range <- function(con, offset, n, chunk = read_chunk_size()) {
  if (n > .Machine$integer.max) {
    inspect_abort(sprintf("a range of %s bytes is too large to read into R.", format_int(n)))
  }
  if (n == 0) return(raw(0))
  seek(con, where = offset, origin = "start")
  parts <- list()
  got <- 0
  while (got < n) {
    want <- min(chunk, n - got)
    part <- readBin(con, "raw", n = want)
    if (length(part) != want) inspect_abort(sprintf("truncated at byte %s", format_int(offset + got)))
    parts[[length(parts) + 1L]] <- part
    got <- got + want
  }
  if (length(parts) == 1L) parts[[1L]] else do.call(c, parts)
}

# Little-endian unsigned integers of `size` bytes at 1-based position `pos` of `bytes`
# (exact as doubles up to 2^53).
le_uint <- function(bytes, pos, size) {
  sum(as.numeric(bytes[pos:(pos + size - 1L)]) * 256^(0:(size - 1L)))
}

zip_signatures <- list(
  local = c(3, 4), central = c(1, 2), end = c(5, 6), end64 = c(6, 6), locator64 = c(6, 7)
)

sig_is <- function(bytes, pos, kind) {
  identical(bytes[pos:(pos + 3L)], as.raw(c(0x50, 0x4b, zip_signatures[[kind]])))
}

# --- the container -----------------------------------------------------------------------

zip_abort <- function(file, what) inspect_abort(sprintf("%s: %s.", file, what))

# The members of the archive at `file`, checked: a named list of
# list(name, header_offset, data_offset, size, crc).
read_members <- function(file) {
  if (!file.exists(file) || dir.exists(file)) {
    inspect_abort(sprintf("%s: no such file.", file))
  }
  size <- file.size(file)
  con <- file(file, open = "rb")
  on.exit(close(con))
  magic <- readBin(con, "raw", n = 2L)
  if (size < 22 || !identical(magic, as.raw(c(0x50, 0x4b)))) {
    zip_abort(file, paste("not a tracebridge artifact (not a ZIP archive; tracebridge files",
                          "are ZIP archives holding program.json)"))
  }
  end <- read_range(con, size - 22, 22)
  if (!sig_is(end, 1L, "end")) {
    zip_abort(file, paste("no ZIP end record at the end of the file (not a ZIP archive, or",
                          "data or an archive comment after it; artifacts have neither)"))
  }
  count <- le_uint(end, 11L, 2L)
  if (le_uint(end, 21L, 2L) != 0 || le_uint(end, 5L, 2L) != 0 || le_uint(end, 7L, 2L) != 0 ||
      le_uint(end, 9L, 2L) != count) {
    zip_abort(file, "the ZIP end record has a comment or spans disks; artifacts do not")
  }
  cd_size <- le_uint(end, 13L, 4L)
  cd_offset <- le_uint(end, 17L, 4L)
  end_at <- size - 22
  if (size >= 42) {
    loc <- read_range(con, size - 42, 20)
    if (sig_is(loc, 1L, "locator64")) {
      end64 <- le_uint(loc, 9L, 8L)
      if (le_uint(loc, 5L, 4L) != 0 || le_uint(loc, 17L, 4L) != 1 || end64 + 56 != size - 42) {
        zip_abort(file, "the ZIP64 locator does not point just before it")
      }
      rec <- read_range(con, end64, 56)
      if (!sig_is(rec, 1L, "end64") || le_uint(rec, 17L, 4L) != 0 || le_uint(rec, 21L, 4L) != 0 ||
          le_uint(rec, 25L, 8L) != le_uint(rec, 33L, 8L)) {
        zip_abort(file, "the ZIP64 end record is corrupt")
      }
      count <- le_uint(rec, 33L, 8L)
      cd_size <- le_uint(rec, 41L, 8L)
      cd_offset <- le_uint(rec, 49L, 8L)
      end_at <- end64
    }
  }
  if (cd_offset + cd_size != end_at) {
    zip_abort(file, paste("the central directory does not end where the end record begins",
                          "(data between them, or a corrupt archive)"))
  }
  if (count > 16) {
    zip_abort(file, sprintf("the archive has %s members; an artifact has only %s",
                            format_int(count), paste(artifact_members, collapse = " and ")))
  }
  rows <- central_entries(file, read_range(con, cd_offset, cd_size), count)
  if (!"program.json" %in% vapply(rows, `[[`, "", "name")) {
    zip_abort(file, "not a tracebridge artifact (no program.json)")
  }
  members <- list()
  for (row in rows) {
    check_entry(file, row)
    if (!is.null(members[[row$name]])) {
      zip_abort(file, sprintf(paste("member '%s' appears twice in the archive; an artifact",
                                    "holds each member once (a reader could take either copy)"),
                              row$name))
    }
    members[[row$name]] <- check_local(file, con, row)
  }
  check_tiling(file, members, cd_offset)
  members
}

zip64_values <- function(file, extra, wanted, name) {
  pos <- 1L
  while (pos + 3L <= length(extra)) {
    tag <- le_uint(extra, pos, 2L)
    len <- le_uint(extra, pos + 2L, 2L)
    if (tag == 1 && len >= 8 * length(wanted) && pos + 3L + len <= length(extra)) {
      vals <- vapply(seq_along(wanted), function(i) le_uint(extra, pos + 4L + 8L * (i - 1L), 8L),
                     numeric(1))
      names(vals) <- wanted
      return(vals)
    }
    pos <- pos + 4L + len
  }
  zip_abort(file, sprintf(paste("member '%s': a 32-bit field says ZIP64 but there is no ZIP64",
                                "extra field"), name))
}

central_entries <- function(file, dir, count) {
  rows <- list()
  pos <- 1L
  for (index in seq_len(count)) {
    if (pos + 45L > length(dir) || !sig_is(dir, pos, "central")) {
      zip_abort(file, sprintf("central directory entry %d is corrupt", index - 1L))
    }
    n_name <- le_uint(dir, pos + 28L, 2L)
    n_extra <- le_uint(dir, pos + 30L, 2L)
    n_comment <- le_uint(dir, pos + 32L, 2L)
    raw_name <- dir[seq_len(n_name) + pos + 45L]
    extra <- dir[seq_len(n_extra) + pos + 45L + n_name]
    name <- rawToChar(raw_name[raw_name != as.raw(0)])
    vals <- c(usize = le_uint(dir, pos + 24L, 4L), csize = le_uint(dir, pos + 20L, 4L),
              offset = le_uint(dir, pos + 42L, 4L))
    wanted <- names(vals)[vals == 0xFFFFFFFF]
    if (length(wanted)) vals[wanted] <- zip64_values(file, extra, wanted, name)
    rows[[index]] <- list(
      name = name, raw_name = raw_name, made_by = le_uint(dir, pos + 4L, 2L),
      flags = le_uint(dir, pos + 8L, 2L), method = le_uint(dir, pos + 10L, 2L),
      crc = le_uint(dir, pos + 16L, 4L), csize = vals[["csize"]], usize = vals[["usize"]],
      disk = le_uint(dir, pos + 34L, 2L), attr = le_uint(dir, pos + 38L, 4L),
      offset = vals[["offset"]]
    )
    pos <- pos + 46L + n_name + n_extra + n_comment
  }
  if (pos != length(dir) + 1L) zip_abort(file, "the central directory has bytes after its last entry")
  rows
}

check_entry <- function(file, row) {
  where <- sprintf("member '%s'", row$name)
  flags <- row$flags
  has <- function(bit) bitwAnd(flags, bit) != 0
  if (has(0x0001) || has(0x0040) || has(0x2000)) {
    zip_abort(file, sprintf(paste("%s is marked encrypted (general-purpose flag 0x%04x);",
                                  "artifacts are never encrypted"), where, flags))
  }
  unix <- floor(row$made_by / 256) == 3
  type <- bitwAnd(floor(row$attr / 65536), 0xF000)
  if (endsWith(row$name, "/") || (unix && type == 0x4000)) {
    zip_abort(file, sprintf("%s is a directory; an artifact holds only files", where))
  }
  if (unix && !type %in% c(0, 0x8000)) {
    zip_abort(file, sprintf("%s is a link or a special file; an artifact holds only files",
                            where))
  }
  if (!row$name %in% artifact_members ||
      !identical(row$raw_name, charToRaw(row$name))) {
    zip_abort(file, sprintf(paste("%s is not part of the format (an artifact holds only %s);",
                                  "remove it or re-save the model with tracebridge"),
                            where, paste(artifact_members, collapse = " and ")))
  }
  if (row$method != 0) {
    kind <- zip_methods[as.character(row$method)]
    if (is.na(kind)) kind <- sprintf("method %d", row$method)
    zip_abort(file, sprintf(paste("%s is compressed (%s); artifact members are stored",
                                  "uncompressed (ZIP method 0) so that they can be",
                                  "memory-mapped; re-save it with tracebridge (nothing was",
                                  "decompressed)"), where, kind))
  }
  if (has(0x0008)) {
    zip_abort(file, sprintf("%s uses a data descriptor; artifacts give sizes in the local header",
                            where))
  }
  if (row$csize != row$usize) zip_abort(file, sprintf("%s: stored sizes differ", where))
  if (row$disk != 0) zip_abort(file, sprintf("%s is on another disk of a split archive", where))
}

check_local <- function(file, con, row) {
  where <- sprintf("member '%s'", row$name)
  head <- tryCatch(read_range(con, row$offset, 30), error = function(e) raw(0))
  if (length(head) != 30L || !sig_is(head, 1L, "local")) {
    zip_abort(file, sprintf("%s: no local header at byte %s", where, format_int(row$offset)))
  }
  n_name <- le_uint(head, 27L, 2L)
  n_extra <- le_uint(head, 29L, 2L)
  rest <- read_range(con, row$offset + 30, n_name + n_extra)
  if (!identical(rest[seq_len(n_name)], row$raw_name) || le_uint(head, 9L, 2L) != 0 ||
      le_uint(head, 7L, 2L) != row$flags) {
    zip_abort(file, sprintf("%s: the local header disagrees with the central directory", where))
  }
  sizes <- c(usize = le_uint(head, 23L, 4L), csize = le_uint(head, 19L, 4L))
  if (any(sizes == 0xFFFFFFFF)) {
    sizes <- zip64_values(file, rest[seq_len(n_extra) + n_name], c("usize", "csize"), row$name)
  }
  if (le_uint(head, 15L, 4L) != row$crc || any(sizes != row$usize)) {
    zip_abort(file, sprintf(paste("%s: the local header's CRC or sizes disagree with the",
                                  "central directory"), where))
  }
  list(name = row$name, header_offset = row$offset, data_offset = row$offset + 30 + n_name +
         n_extra, size = row$usize, crc = row$crc)
}

check_tiling <- function(file, members, cd_offset) {
  at <- 0
  for (m in members[order(vapply(members, `[[`, 0, "header_offset"))]) {
    if (m$header_offset != at) {
      zip_abort(file, sprintf(paste("member '%s' starts at byte %s, not %s: artifacts have no",
                                    "data before, between or over their members"),
                              m$name, format_int(m$header_offset), format_int(at)))
    }
    at <- m$data_offset + m$size
  }
  if (at != cd_offset) {
    zip_abort(file, sprintf("%s bytes lie between the last member and the central directory",
                            format_int(cd_offset - at)))
  }
}

# Bytes of a member (or a part of it), by range.
read_member_range <- function(file, member, offset = 0, n = member$size) {
  con <- file(file, open = "rb")
  on.exit(close(con))
  read_range(con, member$data_offset + offset, n)
}

# The CRC-32 of `bytes` (ZIP's), from base R: a gzip stream ends with the CRC-32 of its
# data, and zlib computes it (20 MB in a fifth of a second) where an R loop would take
# minutes. Written uncompressed (level 0), so the cost is one copy to a temporary file.
crc32_raw <- function(bytes) {
  tmp <- tempfile(fileext = ".gz")
  on.exit(unlink(tmp))
  con <- gzfile(tmp, "wb", compression = 0)
  writeBin(bytes, con)
  close(con)
  con <- file(tmp, "rb")
  on.exit(close(con), add = TRUE)
  le_uint(read_range(con, file.size(tmp) - 8, 4), 1L, 4L)
}

# --- JSON, as strictly as Python reads it ------------------------------------------------

# JSON text from raw bytes, refused where Python's reader would refuse it or read it
# otherwise: not UTF-8, a byte-order mark, comments (which the R parser allows), duplicate
# keys (R keeps the first, Python the last), NaN and Infinity (Python allows them).
parse_json_strict <- function(bytes, where) {
  if (length(bytes) >= 3L && identical(bytes[1:3], as.raw(c(0xef, 0xbb, 0xbf)))) {
    inspect_abort(sprintf("%s starts with a byte-order mark; write plain UTF-8.", where))
  }
  # One linear pass (src/jsonscan.c), before jsonlite: control bytes, comments, the nesting
  # depth, the escapes R cannot read as Python does, and the integers past 32 bits, tagged.
  tagged <- json_scan(bytes, where)
  text <- rawToChar(bytes)
  Encoding(text) <- "UTF-8"
  if (!validUTF8(text)) inspect_abort(sprintf("%s is not UTF-8 text.", where))
  if (!is.null(tagged)) text <- tagged
  # parse_json() only parses: unlike fromJSON(), it never takes the text for a file name or
  # a URL, which matters for a file from anywhere.
  doc <- tryCatch(
    jsonlite::parse_json(text, simplifyVector = FALSE),
    error = function(e) {
      inspect_abort(sprintf("%s is not valid JSON (%s).", where, conditionMessage(e)))
    }
  )
  check_unique_keys(doc, where)
  doc
}

# NULL, or the text of `bytes` tagged, after the pass of src/jsonscan.c, which refuses what Python's
# reader refuses or reads otherwise and R's would not see: a control byte, a '/' outside strings (a
# comment, which jsonlite allows), nesting past the format's depth (checked before
# jsonlite and the recursive walks read it: 20,000 levels gave R's C-stack error, prober21c
# F5), an integer of more than 4300 digits (jsonstrict.MAX_INT_DIGITS), \u0000 (R strings
# cannot hold it: two keys differing after it would be one key here), \u001f (the mark of
# an integer past 32 bits here: a string holding it could pass for one) and lone surrogate
# escapes (no character; R reads two different ones as one). Whole numbers past a 32-bit
# integer are kept as tagged text (tag_big_ints()). The pass is linear in the text: the
# regular expressions it replaces cost ~1 s per MB and failed with only a warning on a
# long string, skipping the tagging (prober21c F6, F7).
json_scan <- function(bytes, where) {
  limit <- tb_tables()[["ops"]][["limits"]][["depth"]]
  out <- .Call(tb_json_scan, bytes, as.integer(limit))
  if (is.null(out) || is.character(out)) return(out)
  at <- format_int(out[[2]])
  inspect_abort(switch(
    out[[1]],
    sprintf("%s is not valid JSON (a comment or a stray '/', at byte %s).", where, at),
    sprintf(paste("%s: JSON nested more than %d levels deep (at byte %s) [rule: resource",
                  "limits]; the file is corrupt or was edited by hand."), where, limit, at),
    sprintf(paste("%s is not valid JSON for tracebridge (an integer of %s digits;",
                  "at most 4300 digits are read)."), where, format_int(out[[3]])),
    sprintf(paste("%s is not valid JSON for tracebridge (a string holds U+0000,",
                  "written \\u0000, which R strings cannot hold)."), where),
    sprintf(paste("%s is not valid JSON for tracebridge (a string holds U+001F,",
                  "written \\u001f, which R's reader uses to mark integers past",
                  "32 bits)."), where),
    sprintf(paste("%s is not valid JSON for tracebridge (a string holds a lone",
                  "surrogate escape such as \\ud800, which is no character)."), where),
    sprintf(paste("%s is not valid JSON (control character 0x%02x at byte %s; JSON allows",
                  "only space, tab, LF and CR between tokens)."), where,
            as.integer(out[[3]]), at)
  ))
}

check_unique_keys <- function(x, where) {
  if (!is.list(x)) return(invisible())
  keys <- names(x)
  if (!is.null(keys) && anyDuplicated(keys)) {
    key <- keys[anyDuplicated(keys)]
    inspect_abort(sprintf(paste("%s: the key '%s' appears twice in one object (readers could",
                                "take either value); the file was edited or is hostile."),
                          where, key))
  }
  for (item in x) if (is.list(item)) check_unique_keys(item, where)
  invisible()
}

# --- program.json and the tensors header -------------------------------------------------

read_program <- function(file) {
  members <- read_members(file)
  program <- members[["program.json"]]
  if (program$size > artifact_max_program_bytes) {
    inspect_abort(sprintf("%s: program.json is %s bytes, over the %s-byte limit (not read).",
                          file, format_int(program$size), format_int(artifact_max_program_bytes)))
  }
  bytes <- read_member_range(file, program)
  if (crc32_raw(bytes) != program$crc) {
    inspect_abort(sprintf("%s: program.json fails its CRC-32 (corrupt).", file))
  }
  # Before parsing: parse cost grows with JSON objects and arrays (limits of ops.json).
  containers <- sum(bytes == as.raw(0x7b)) + sum(bytes == as.raw(0x5b))
  limit <- tb_tables()[["ops"]][["limits"]][["containers"]]
  if (containers > limit) {
    inspect_abort(sprintf(paste(
      "%s: program.json holds %s JSON objects and arrays, more than the limit of %s",
      "[rule: resource limits]; the file is not a program tracebridge wrote"),
      file, format_int(containers), format_int(limit)))
  }
  doc <- parse_json_strict(bytes, sprintf("%s: program.json", file))
  check_program(doc, file)
  doc$.members <- members
  doc
}

big_number <- function(x) {
  if (is_big_int(x)) as.numeric(substring(x, nchar(big_int_tag) + 1L)) else as.numeric(x)
}

# The tensors header: entries by name (fillers left out) and the data size, checked by the
# rules of python/tracebridge/artifact/tensors.py.
read_safetensors_header <- function(file, members) {
  member <- members[["tensors.safetensors"]]
  if (is.null(member) || member$size == 0) return(list(tensors = list(), data_bytes = 0))
  where <- sprintf("%s: tensors.safetensors", file)
  if (member$size < 8) inspect_abort(sprintf("%s is truncated (less than 8 bytes).", where))
  head_len <- le_uint(read_member_range(file, member, 0, 8), 1L, 8L)
  if (head_len > artifact_max_header_bytes || head_len > member$size - 8) {
    inspect_abort(sprintf(paste("%s: its header claims %s bytes, past the end of the member",
                                "or the %s-byte limit."),
                          where, format_int(head_len), format_int(artifact_max_header_bytes)))
  }
  raw_head <- read_member_range(file, member, 8, head_len)
  header <- parse_json_strict(raw_head, sprintf("%s header", where))
  if (!length(raw_head) || raw_head[1] != charToRaw("{") || (length(header) && is.null(names(header)))) {
    inspect_abort(sprintf("%s: the header is not a JSON object.", where))
  }
  data_bytes <- member$size - 8 - head_len
  spans <- list()
  tensors <- list()
  for (name in names(header)) {
    info <- header[[name]]
    if (name == "__metadata__") {
      if (!is.list(info) || (length(info) && is.null(names(info))) ||
          !all(vapply(info, is.character, logical(1)))) {
        inspect_abort(sprintf("%s: __metadata__ must map strings to strings.", where))
      }
      next
    }
    entry <- header_entry(where, name, info)
    if (startsWith(name, artifact_filler_prefix) &&
        (entry$dtype != "U8" || length(entry$shape) != 1L)) {
      inspect_abort(sprintf("%s: filler '%s' must be a 1-D U8 entry.", where, name))
    }
    spans[[length(spans) + 1L]] <- entry
    if (!startsWith(name, artifact_filler_prefix)) tensors[[name]] <- entry
  }
  at <- 0
  begins <- vapply(spans, function(e) e$offsets[1], numeric(1))
  ends <- vapply(spans, function(e) e$offsets[2], numeric(1))
  for (i in order(begins, ends)) {
    if (begins[i] != at) {
      inspect_abort(sprintf(paste("%s: tensor '%s' starts at data offset %s, not %s (the data",
                                  "must be contiguous, without holes or overlaps)."),
                            where, spans[[i]]$name, format_int(begins[i]), format_int(at)))
    }
    at <- ends[i]
  }
  if (at != data_bytes) {
    inspect_abort(sprintf(paste("%s has a bad dtype or offsets: its tensors cover %s bytes of",
                                "data but the member holds %s."),
                          where, format_int(at), format_int(data_bytes)))
  }
  list(tensors = tensors, data_bytes = data_bytes, data_base = 8 + head_len)
}

header_entry <- function(where, name, info) {
  what <- sprintf("%s: tensor '%s'", where, name)
  if (!is.list(info) || is.null(names(info)) ||
      !setequal(names(info), c("dtype", "shape", "data_offsets")) || length(info) != 3L) {
    inspect_abort(sprintf("%s must have exactly dtype, shape and data_offsets.", what))
  }
  dtype <- info$dtype
  if (!is.character(dtype) || length(dtype) != 1L || is.na(st_code_names()[dtype])) {
    inspect_abort(sprintf("%s has a dtype which artifacts do not hold.", what))
  }
  # JSON integers only, as Python reads them: 2.0 and 1e1 are numbers with a fraction or an
  # exponent, not integers, in both readers.
  whole <- function(v) {
    ((is.integer(v) && length(v) == 1L && !is.na(v)) || is_big_int(v)) && big_number(v) >= 0
  }
  if (!is.list(info$shape) || !all(vapply(info$shape, whole, logical(1)))) {
    inspect_abort(sprintf("%s has a bad shape (not a list of integers >= 0).", what))
  }
  if (any(vapply(info$shape, function(d) !int_below(d, "9223372036854775808"), logical(1)))) {
    inspect_abort(sprintf("%s has a dimension of 2^63 or more (shape [%s]).", what,
                          paste(vapply(info$shape, exact_int, ""), collapse = ", ")))
  }
  offsets <- info$data_offsets
  if (!is.list(offsets) || length(offsets) != 2L || !all(vapply(offsets, whole, logical(1)))) {
    inspect_abort(sprintf("%s has bad data_offsets (not two integers >= 0).", what))
  }
  exact <- vapply(info$shape, exact_int, "")
  shape <- vapply(info$shape, big_number, numeric(1))
  offsets <- vapply(offsets, big_number, numeric(1))
  size <- dtype_column("itemsize")[[st_code_names()[[dtype]]]]
  if (offsets[2] < offsets[1]) inspect_abort(sprintf("%s has bad data_offsets.", what))
  if (prod(shape) * size != offsets[2] - offsets[1]) {
    inspect_abort(sprintf("%s: %s bytes do not fit shape [%s] of %s.", what,
                          format_int(offsets[2] - offsets[1]), paste(shape, collapse = ", "),
                          dtype))
  }
  list(name = name, dtype = dtype, shape = shape, exact = exact, offsets = offsets)
}

# An integer as JSON wrote it (R integer or tagged big integer), as exact text.
exact_int <- function(x) {
  if (is_big_int(x)) substring(x, nchar(big_int_tag) + 1L) else format(x, scientific = FALSE)
}

# Whether the integer `x` (R integer or tagged big one, >= 0) is below `limit` (digits).
int_below <- function(x, limit) {
  d <- sub("^0+(?=.)", "", exact_int(x), perl = TRUE)
  nchar(d) < nchar(limit) || (nchar(d) == nchar(limit) && d < limit)
}

# The state from program.json, cross-checked against the safetensors header; tensors
# listed in `tensors.external` (a program traced on the meta device) have no data.
# Why the `n` bytes `data` are no state a generator on `device` can hold, or NULL: what
# python/tracebridge/artifact/generators.py (cpu_state_problem(), cuda_state_problem())
# refuses, so that both readers refuse one file. torch's set_state checks a CPU state's
# Mersenne Twister position (left, next) only field by field: left = next = 624 passes
# it, and each draw then reads past the generator's memory (prober21c F9). A real
# generator holds left + next == 625, or left = 1, next = 0 once seeded.
generator_state_problem <- function(data, n, device) {
  if (!startsWith(device, "cuda")) {
    if (n != 5056) return(sprintf("%s bytes, where a CPU generator's state is 5056", format_int(n)))
    u32 <- function(pos) le_uint(data, pos + 1L, 4L)
    left <- u32(8)
    if (left >= 2^31) left <- left - 2^32
    seeded <- u32(12)
    nxt <- le_uint(data, 17L, 8L)
    if (seeded != 1) return(sprintf("its 'seeded' field is %s, not 1", format_int(seeded)))
    if (!(left >= 1 && left <= 624 && nxt <= 624 &&
          (left + nxt == 625 || (left == 1 && nxt == 0)))) {
      return(sprintf(paste("its Mersenne Twister position (left=%s, next=%s) is none a",
                           "generator holds (left + next == 625, or left=1, next=0 once",
                           "seeded): a draw would read past the generator's words"),
                     format_int(left), format_int(nxt)))
    }
    high <- matrix(data[25:5016], nrow = 8)[5:8, ]
    if (any(high != as.raw(0))) return("a word of its Mersenne Twister state does not fit 32 bits")
    flags <- c(u32(5040), as.integer(data[5053]))
    if (!all(flags %in% c(0, 1))) return("a flag of its cached normal samples is neither 0 nor 1")
    doubles <- readBin(data[5017:5040], "double", n = 3L, size = 8L, endian = "little")
    float <- readBin(data[5049:5052], "double", n = 1L, size = 4L, endian = "little")
    if (!all(is.finite(c(doubles, float)))) return("a cached normal sample is not finite")
    return(NULL)
  }
  if (n != 16) return(sprintf("%s bytes, where a CUDA generator's state is 16", format_int(n)))
  negative <- as.integer(data[16]) >= 128
  if (negative || as.integer(data[9]) %% 4L != 0L) {
    return(sprintf("its Philox offset is none a generator holds (0 or more, a multiple of 4)"))
  }
  NULL
}

read_state <- function(file, doc) {
  info <- doc$state
  header <- read_safetensors_header(file, doc$.members)
  declared <- names(info) %||% character(0)
  external <- unlist(doc$tensors$external) %||% character(0)
  if (!is.character(external) || anyDuplicated(external) || !all(external %in% declared)) {
    inspect_abort(sprintf("%s: tensors.external names a tensor twice or one not in the state.",
                          file))
  }
  stored <- names(header$tensors) %||% character(0)
  # The generators' states (#generator.NAME, 1-D U8) are apart from the state tensors.
  kept <- startsWith(stored, artifact_generator_prefix)
  generators <- names(doc$generators) %||% character(0)
  limit <- tb_tables()[["ops"]][["limits"]][["generator_bytes"]]
  total <- 0
  for (entry in stored[kept]) {
    info <- header$tensors[[entry]]
    if (!substring(entry, nchar(artifact_generator_prefix) + 1L) %in% generators) {
      inspect_abort(sprintf(paste("%s: tensors.safetensors holds '%s', the state of a",
                                  "generator program.json does not list."), file, entry))
    }
    if (info$dtype != "U8" || length(info$shape) != 1L) {
      inspect_abort(sprintf("%s: generator state '%s' must be a 1-D U8 entry.", file, entry))
    }
    total <- total + info$shape[[1]]
    if (total > limit) {
      inspect_abort(sprintf(paste(
        "%s: the generators' states take more than %s bytes in tensors.safetensors, the",
        "limit (a CPU generator's state is 5056 bytes) [rule: resource limits]; the file is",
        "corrupt or hostile."), file, format(limit, scientific = FALSE)))
    }
  }
  for (name in generators) {
    if (!paste0(artifact_generator_prefix, name) %in% stored) {
      inspect_abort(sprintf("%s: generator '%s' has no state in tensors.safetensors.", file,
                            name))
    }
  }
  # Each state, once all are within the limits: one a generator can hold.
  for (entry in stored[kept]) {
    info <- header$tensors[[entry]]
    name <- substring(entry, nchar(artifact_generator_prefix) + 1L)
    device <- doc$generators[[name]]$device %||% ""
    n <- info$offsets[2] - info$offsets[1]
    data <- if (n <= 5056) {
      read_member_range(file, doc$.members[["tensors.safetensors"]],
                        header$data_base + info$offsets[1], n)
    } else raw(0)
    problem <- generator_state_problem(data, n, device)
    if (!is.null(problem)) {
      inspect_abort(sprintf(paste("%s: generator '%s': its saved state does not fit a %s",
                                  "generator (%s); the file is corrupt or hostile: save the",
                                  "model again from the generator it was traced with."),
                            file, name, device, problem))
    }
  }
  stored <- stored[!kept]
  missing <- setdiff(setdiff(declared, external), stored)
  extra <- c(intersect(external, stored), setdiff(stored, declared))
  if (length(missing)) {
    inspect_abort(sprintf("%s: state %s has no tensor in tensors.safetensors.", file,
                          paste0("'", missing, "'", collapse = ", ")))
  }
  if (length(extra)) {
    inspect_abort(sprintf(paste("%s: tensors.safetensors holds %s, which program.json lists as",
                                "external or not at all."),
                          file, paste0("'", extra, "'", collapse = ", ")))
  }
  count <- doc$tensors$count
  if (!is.null(count) && count != length(stored)) {
    inspect_abort(sprintf("%s: tensors.count is %d but tensors.safetensors holds %d tensors.",
                          file, as.integer(count), length(stored)))
  }
  rows <- lapply(declared, function(name) {
    entry <- info[[name]]
    shape <- vapply(entry$shape, big_number, numeric(1))
    numel <- prod(shape)
    bytes <- numel * (dtype_column("itemsize")[entry$dtype %||% ""] %||% NA)
    tensor <- header$tensors[[name]]
    if (!is.null(tensor)) {
      st_dtype <- unname(st_code_names()[tensor$dtype])
      mismatch <- function(what) inspect_abort(sprintf("%s: state '%s': %s.", file, name, what))
      if (!identical(st_dtype, entry$dtype)) {
        mismatch(sprintf("program.json says dtype %s, tensors.safetensors says %s",
                         entry$dtype %||% "(none)", tensor$dtype))
      }
      # Compared as written: doubles are equal past 2^53 where the integers are not.
      if (!identical(unname(vapply(entry$shape, exact_int, "")), unname(tensor$exact))) {
        mismatch(sprintf("program.json says shape [%s], tensors.safetensors says [%s]",
                         paste(vapply(entry$shape, exact_int, ""), collapse = ", "),
                         paste(tensor$exact, collapse = ", ")))
      }
    }
    data.frame(
      name = name, kind = entry$kind %||% NA_character_, dtype = entry$dtype,
      shape = I(list(shape)), type = type_str(list(kind = "Tensor", dtype = entry$dtype,
                                                   shape = entry$shape)),
      numel = numel, bytes = unname(bytes),
      requires_grad = isTRUE(entry$requires_grad), stored = !is.null(tensor),
      stringsAsFactors = FALSE
    )
  })
  none <- empty_state()
  none$stored <- logical(0)
  state <- do.call(rbind, c(list(none), rows))
  rownames(state) <- NULL
  state
}

# Whole numbers too large for a 32-bit integer would come back from the JSON parser as
# doubles and lose digits past 2^53 (a slice end of sys.maxsize, say); they are kept as
# text, tagged, and printed as written.
big_int_tag <- "\037tbint:"

tag_big_ints <- function(text, where = "JSON") {
  json_scan(charToRaw(enc2utf8(text)), where) %||% text
}

is_big_int <- function(x) is.character(x) && length(x) == 1L && startsWith(x, big_int_tag)
