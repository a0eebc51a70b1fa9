# The R half of `make demo` (scripts/demo.py runs it as `Rscript scripts/demo.R OUT`).
#
#   1. jit_load() the CNN that Python traced into OUT/python_cnn.tb, run it on the input
#      Python wrote, and write R's result for Python to compare.
#   2. Define an nn_module in R, trace it with jit_trace(), jit_save() it to OUT/r_mlp.tb,
#      and write its input and the eager R result for Python to compare.
#
# Tensors cross in safetensors files, read and written here with base R (readBin and
# writeBin): row-major on disk, column-major in R, so dimensions are reversed on the way.

suppressPackageStartupMessages(library(tracebridge))

out <- commandArgs(trailingOnly = TRUE)[1]
if (is.na(out) || !dir.exists(out)) stop("usage: Rscript scripts/demo.R OUT_DIR")

codes <- c(F32 = "float32", F64 = "float64", I64 = "int64", I32 = "int32")

read_safetensors <- function(path) {
  con <- file(path, "rb")
  on.exit(close(con))
  n <- readBin(con, "integer", 2, size = 4, endian = "little")[1]
  header <- jsonlite::fromJSON(rawToChar(readBin(con, "raw", n)), simplifyVector = FALSE)
  data <- readBin(con, "raw", file.size(path) - 8 - n)
  header <- header[names(header) != "__metadata__"]
  lapply(header, function(h) {
    offsets <- unlist(h$data_offsets)
    bytes <- data[seq.int(offsets[1] + 1, length.out = offsets[2] - offsets[1])]
    shape <- unlist(h$shape)
    v <- switch(h$dtype,
      F32 = readBin(bytes, "double", length(bytes) / 4, size = 4, endian = "little"),
      F64 = readBin(bytes, "double", length(bytes) / 8, size = 8, endian = "little"),
      I32 = readBin(bytes, "integer", length(bytes) / 4, size = 4, endian = "little"),
      # int64 as (low, high) words; the ids here fit in the low word
      I64 = readBin(bytes, "integer", length(bytes) / 4, size = 4,
                    endian = "little")[c(TRUE, FALSE)],
      stop("read_safetensors(): no code for dtype ", h$dtype)
    )
    arr <- if (length(shape) > 1) aperm(array(v, rev(shape))) else v
    torch_tensor(arr, dtype = get(paste0("torch_", codes[[h$dtype]]))())
  })
}

write_safetensors <- function(path, tensors) {
  entries <- character(0)
  chunks <- list()
  offset <- 0
  for (nm in names(tensors)) {
    t <- tensors[[nm]]
    if (attr(t$dtype, "name") != "float32") stop("write_safetensors(): float32 only here")
    a <- as_array(t)
    v <- if (length(dim(t)) > 1) as.vector(aperm(a)) else as.vector(a)
    con <- rawConnection(raw(0), "wb")
    writeBin(as.double(v), con, size = 4, endian = "little")
    raw <- rawConnectionValue(con)
    close(con)
    entries <- c(entries, sprintf('"%s":{"dtype":"F32","shape":[%s],"data_offsets":[%d,%d]}',
                                  nm, paste(dim(t), collapse = ","), as.integer(offset),
                                  as.integer(offset + length(raw))))
    chunks[[length(chunks) + 1]] <- raw
    offset <- offset + length(raw)
  }
  head <- charToRaw(paste0("{", paste(entries, collapse = ","), "}"))
  head <- c(head, rep(charToRaw(" "), (8 - length(head) %% 8) %% 8))
  con <- file(path, "wb")
  on.exit(close(con))
  writeBin(c(length(head), 0L), con, size = 4, endian = "little")
  writeBin(head, con)
  for (chunk in chunks) writeBin(chunk, con)
}

rule <- function(title) cat("\n[R] ", title, "\n", strrep("-", 72), "\n", sep = "")

# --- 1. the Python model, in R -------------------------------------------------------------

rule("jit_load('python_cnn.tb'): the CNN traced in Python")
cnn <- jit_load(file.path(out, "python_cnn.tb"))
print(cnn)
x <- read_safetensors(file.path(out, "python_cnn.input.safetensors"))$input0
cat("input from Python: dim(x) =", dim(x), "(the same order as Python's x.shape)\n")
y <- cnn(x)
cat("R runs it: dim(y) =", dim(y), "\n")
write_safetensors(file.path(out, "python_cnn.r_output.safetensors"), list(output0 = y))

# --- 2. an R module, traced in R --------------------------------------------------------

rule("jit_trace() of an nn_module defined in R")
torch_manual_seed(42)
Classifier <- nn_module("Classifier",
  initialize = function(d_in, hidden, n_class) {
    self$fc1 <- nn_linear(d_in, hidden)
    self$drop <- nn_dropout(0.5)
    self$fc2 <- nn_linear(hidden, n_class)
  },
  forward = function(x) {
    logits <- self$fc2(self$drop(torch_relu(self$fc1(x))))
    list(logits, torch_softmax(logits, dim = 2))
  }
)
net <- Classifier(6, 16, 3)
net$eval()
example <- torch_randn(4, 6)
traced <- jit_trace(net, example)  # respect_mode = TRUE: training and evaluation graphs
print(traced)
cat("\nThe graph R recorded (", paste(traced$methods, collapse = " / "),
    "; forward follows $train() and $eval()):\n", sep = "")
cat(traced$graph, "\n")
jit_save(traced, file.path(out, "r_mlp.tb"))

x2 <- torch_randn(5, 6)  # another batch size than the example: the batch is symbolic
eager <- net(x2)
write_safetensors(file.path(out, "r_mlp.input.safetensors"), list(input0 = x2))
write_safetensors(file.path(out, "r_mlp.r_output.safetensors"),
                  list(output0 = eager[[1]], output1 = eager[[2]]))
cat("saved r_mlp.tb and its input and eager R outputs (batch 5) for Python\n")
