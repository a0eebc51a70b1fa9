# The R half of the golden vectors: R functions and nn_modules traced with jit_trace() /
# jit_trace_module(), saved with jit_save(). Inputs and expected outputs are written in
# safetensors layout with base R only (expected outputs come from the eager R model, never
# from the trace). The layout, naming and manifest are those of generate.py, which
# documents them; this script rewrites only the manifest entries whose producer is "r".
#
# Note: compatibility. The committed files are format version 1 and must keep loading in
# every later version; add new vectors rather than regenerating these.
#
# Run from the repository root (after `make setup`):
#   R_LIBS=.Rlib Rscript shared_ir/vectors/generate.R

suppressPackageStartupMessages(library(tracebridge))

args <- commandArgs(trailingOnly = FALSE)
script <- sub("^--file=", "", args[grepl("^--file=", args)])
here <- if (length(script)) dirname(normalizePath(script)) else "shared_ir/vectors"
tolerance <- list(rtol = 1e-4, atol = 1e-5)

# --- safetensors, written with base R ---------------------------------------------------

tensor_bytes <- function(t) {
  dtype <- attr(t$dtype, "name")
  a <- as_array(t)
  # R arrays are column-major; safetensors is row-major: reverse the dimensions first.
  v <- if (length(dim(t)) > 1) as.vector(aperm(a)) else as.vector(a)
  con <- rawConnection(raw(0), "wb")
  on.exit(close(con))
  switch(dtype,
    float32 = writeBin(as.double(v), con, size = 4, endian = "little"),
    float64 = writeBin(as.double(v), con, size = 8, endian = "little"),
    int32 = writeBin(as.integer(v), con, size = 4, endian = "little"),
    # int64 as (low, high) 32-bit words; R integers fit in the low word
    int64 = writeBin(as.integer(rbind(v, ifelse(v < 0, -1L, 0L))), con, size = 4,
                     endian = "little"),
    bool = writeBin(as.raw(as.logical(v)), con),
    stop("tensor_bytes(): no safetensors code for dtype ", dtype)
  )
  list(dtype = c(float32 = "F32", float64 = "F64", int32 = "I32", int64 = "I64",
                 bool = "BOOL")[[dtype]],
       shape = dim(t), raw = rawConnectionValue(con))
}

write_safetensors <- function(path, tensors) {
  entries <- character(0)
  chunks <- list()
  offset <- 0
  for (nm in names(tensors)) {
    b <- tensor_bytes(tensors[[nm]])
    end <- offset + length(b$raw)
    entries <- c(entries, sprintf('"%s":{"dtype":"%s","shape":[%s],"data_offsets":[%s,%s]}',
                                  nm, b$dtype, paste(b$shape, collapse = ","),
                                  format(offset, scientific = FALSE),
                                  format(end, scientific = FALSE)))
    chunks[[length(chunks) + 1]] <- b$raw
    offset <- end
  }
  head <- charToRaw(paste0("{", paste(entries, collapse = ","), "}"))
  head <- c(head, rep(charToRaw(" "), (8 - length(head) %% 8) %% 8))
  con <- file(path, "wb")
  on.exit(close(con))
  writeBin(c(length(head), 0L), con, size = 4, endian = "little")
  writeBin(head, con)
  for (chunk in chunks) writeBin(chunk, con)
}

# Tensors in flattened order: nested lists (tuples, dicts) are walked depth first.
flat <- function(x) {
  if (inherits(x, "torch_tensor")) return(list(x))
  do.call(c, lapply(unname(x), flat))
}

named <- function(prefix, values, method = NULL) {
  leaves <- flat(values)
  head <- if (is.null(method)) "" else paste0(method, ".")
  names(leaves) <- paste0(head, prefix, seq_along(leaves) - 1L)
  leaves
}

# --- one vector ---------------------------------------------------------------------------

new_vector <- function(name, description, covers) {
  v <- new.env()
  v$name <- name
  v$description <- description
  v$covers <- covers
  v$cases <- list()
  v
}

save_traced <- function(v, traced) {
  path <- file.path(here, paste0(v$name, ".tb"))
  jit_save(traced, path)
  doc <- jsonlite::fromJSON(unz(path, "program.json"), simplifyVector = FALSE)
  v$methods <- names(doc$methods)
  v$kind <- doc$kind
  v$format_version <- doc$format_version
}

add_case <- function(v, label, inputs, expected = NULL, mode = NULL, note = NULL) {
  stem <- if (identical(label, "")) v$name else paste0(v$name, ".", label)
  entry <- list(label = if (identical(label, "")) "default" else label,
                inputs = paste0(stem, ".inputs.safetensors"))
  write_safetensors(file.path(here, entry$inputs), inputs)
  if (!is.null(expected)) {
    entry$expected <- paste0(stem, ".expected.safetensors")
    write_safetensors(file.path(here, entry$expected), expected)
  }
  if (!is.null(mode)) entry$mode <- mode
  if (!is.null(note)) entry$note <- note
  v$cases[[length(v$cases) + 1]] <- entry
}

manifest_entry <- function(v) {
  list(name = v$name, producer = "r", artifact = paste0(v$name, ".tb"), kind = v$kind,
       methods = as.list(v$methods), description = v$description,
       covers = as.list(v$covers), tolerance = tolerance, cases = v$cases,
       format_version = v$format_version)
}

# --- the vectors --------------------------------------------------------------------------

r_function <- function() {
  v <- new_vector("r_function", "An R function of two tensors: tanh, matmul, softmax over dim 2.",
                  "function")
  attend <- function(x, w) torch_softmax(torch_matmul(torch_tanh(x), w), dim = 2)
  torch_manual_seed(101)
  tr <- jit_trace(attend, torch_randn(3, 4), torch_randn(4, 5))
  save_traced(v, tr)
  x <- torch_randn(6, 4)
  w <- torch_randn(4, 5)
  add_case(v, "", named("input", list(x, w)), named("output", list(attend(x, w))))
  v
}

r_mlp <- function() {
  v <- new_vector("r_mlp", "An R nn_module MLP: nn_linear(6, 16) + ReLU + nn_linear(16, 3).",
                  "mlp")
  MLP <- nn_module("MLP",
    initialize = function() {
      self$fc1 <- nn_linear(6, 16)
      self$fc2 <- nn_linear(16, 3)
    },
    forward = function(x) self$fc2(torch_relu(self$fc1(x)))
  )
  torch_manual_seed(102)
  m <- MLP()
  m$eval()
  save_traced(v, jit_trace(m, torch_randn(2, 6), respect_mode = FALSE))
  x <- torch_randn(4, 6)
  add_case(v, "", named("input", list(x)), named("output", list(m(x))))
  v
}

r_residual <- function() {
  v <- new_vector("r_residual", paste(
    "An R residual block: conv-bn-relu-conv-bn plus the input, then ReLU; running",
    "statistics from two training batches, traced in eval mode."), c("residual", "cnn",
                                                                       "batchnorm"))
  Block <- nn_module("Block",
    initialize = function(ch) {
      self$conv1 <- nn_conv2d(ch, ch, 3, padding = 1, bias = FALSE)
      self$bn1 <- nn_batch_norm2d(ch)
      self$conv2 <- nn_conv2d(ch, ch, 3, padding = 1, bias = FALSE)
      self$bn2 <- nn_batch_norm2d(ch)
    },
    forward = function(x) {
      y <- torch_relu(self$bn1(self$conv1(x)))
      torch_relu(self$bn2(self$conv2(y)) + x)
    }
  )
  torch_manual_seed(103)
  m <- Block(3)
  for (i in 1:2) m(torch_randn(4, 3, 6, 6) * 1.5 + 0.3)
  m$eval()
  save_traced(v, jit_trace(m, torch_randn(2, 3, 6, 6), respect_mode = FALSE))
  x <- torch_randn(2, 3, 6, 6)
  add_case(v, "", named("input", list(x)), named("output", list(m(x))))
  v
}

r_attention <- function() {
  v <- new_vector("r_attention", paste(
    "An R single-head self-attention with a causal mask (a buffer: 0 on and below the",
    "diagonal, -1e9 above); sequence length 5, width 8."), "attention")
  Attention <- nn_module("CausalAttention",
    initialize = function(d, len) {
      self$q <- nn_linear(d, d)
      self$k <- nn_linear(d, d)
      self$v <- nn_linear(d, d)
      mask <- matrix(0, len, len)
      mask[upper.tri(mask)] <- -1e9
      self$mask <- nn_buffer(torch_tensor(mask))
      self$scale <- 1 / sqrt(d)
    },
    forward = function(x) {
      scores <- torch_matmul(self$q(x), self$k(x)$transpose(2, 3)) * self$scale
      weights <- torch_softmax(scores + self$mask, dim = 3)
      torch_matmul(weights, self$v(x))
    }
  )
  torch_manual_seed(104)
  m <- Attention(8, 5)
  m$eval()
  save_traced(v, jit_trace(m, torch_randn(2, 5, 8), respect_mode = FALSE))
  x <- torch_randn(3, 5, 8)
  add_case(v, "", named("input", list(x)), named("output", list(m(x))))
  v
}

r_embedding <- function() {
  v <- new_vector("r_embedding", paste(
    "An R embedding model: nn_embedding(12, 4) on 1-based token ids (the shift to",
    "0-based is in the graph), mean over the sequence, nn_linear(4, 2). Inputs are",
    "int64 tokens in 1..12."), "embedding")
  Embed <- nn_module("EmbedMean",
    initialize = function() {
      self$emb <- nn_embedding(12, 4)
      self$fc <- nn_linear(4, 2)
    },
    forward = function(tokens) self$fc(torch_mean(self$emb(tokens), dim = 2))
  )
  torch_manual_seed(105)
  m <- Embed()
  m$eval()
  set.seed(105)
  example <- torch_tensor(matrix(sample.int(12, 10, replace = TRUE), 2, 5))
  save_traced(v, jit_trace(m, example, respect_mode = FALSE))
  tokens <- torch_tensor(matrix(c(1L, 12L, sample.int(12, 10, replace = TRUE)), 3, 4))
  add_case(v, "", named("input", list(tokens)), named("output", list(m(tokens))),
           note = "token ids include 1 and 12, the first and last rows of the table")
  v
}

r_two_methods <- function() {
  v <- new_vector("r_two_methods", paste(
    "jit_trace_module() of an R nn_module with two methods: forward (encode then",
    "decode) and encode; expected outputs for both, names prefixed by the method."),
    "trace_module")
  AE <- nn_module("AutoEncoder",
    initialize = function() {
      self$enc <- nn_linear(6, 3)
      self$dec <- nn_linear(3, 6)
    },
    forward = function(x) self$dec(torch_tanh(self$enc(x))),
    encode = function(x) torch_tanh(self$enc(x))
  )
  torch_manual_seed(106)
  m <- AE()
  m$eval()
  tm <- jit_trace_module(m, forward = list(torch_randn(2, 6)), encode = list(torch_randn(2, 6)))
  save_traced(v, tm)
  x <- torch_randn(3, 6)
  y <- torch_randn(5, 6)
  add_case(v, "", c(named("input", list(x), "forward"), named("input", list(y), "encode")),
           c(named("output", list(m(x)), "forward"),
             named("output", list(m$encode(y)), "encode")))
  v
}

r_symbolic_batch <- function() {
  v <- new_vector("r_symbolic_batch", paste(
    "An R module that flattens with x$view(c(x$size(1), -1)) before nn_linear(12, 3):",
    "the batch size stays symbolic. Traced at batch 2, checked at batch 1 and 7."),
    "symbolic_batch")
  Flat <- nn_module("FlattenLinear",
    initialize = function() self$fc <- nn_linear(12, 3),
    forward = function(x) torch_sigmoid(self$fc(x$view(c(x$size(1), -1))))
  )
  torch_manual_seed(107)
  m <- Flat()
  m$eval()
  save_traced(v, jit_trace(m, torch_randn(2, 3, 4), respect_mode = FALSE))
  for (b in c(1, 7)) {
    x <- torch_randn(b, 3, 4)
    add_case(v, paste0("batch", b), named("input", list(x)), named("output", list(m(x))))
  }
  v
}

vectors <- list(r_function, r_mlp, r_residual, r_attention, r_embedding, r_two_methods,
                r_symbolic_batch)

entries <- lapply(vectors, function(make) {
  v <- make()
  cat(sprintf("wrote %s: %s; %d case(s)\n", v$name, paste(v$methods, collapse = ", "),
              length(v$cases)))
  manifest_entry(v)
})

# --- merge the manifest -------------------------------------------------------------------

manifest_path <- file.path(here, "manifest.json")
doc <- if (file.exists(manifest_path)) {
  jsonlite::fromJSON(manifest_path, simplifyVector = FALSE)
} else {
  list(format = "tracebridge-golden-vectors", manifest_version = 1L, vectors = list())
}
kept <- Filter(function(e) !identical(e$producer, "r"), doc$vectors)
all_entries <- c(kept, entries)
doc$vectors <- all_entries[order(vapply(all_entries, `[[`, "", "name"))]
writeLines(jsonlite::toJSON(doc, auto_unbox = TRUE, pretty = TRUE, digits = NA),
           manifest_path)
