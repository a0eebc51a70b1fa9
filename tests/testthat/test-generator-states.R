# A generator's saved state is checked field by field by R's reader too (prober21c F9: a
# CPU state with left = next = 624 passed torch's set_state, and each draw read past the
# generator's memory): jit_inspect refuses what Python's reader refuses.

test_that("jit_inspect and jit_load refuse a CPU state whose draws would read past it", {
  skip_if_no_torch()
  dir <- tempfile("gen")
  dir.create(dir)
  main <- reticulate::py_run_string(sprintf(paste(
    "import hashlib, json, struct, zipfile, torch, tracebridge, warnings",
    "from tracebridge.artifact.archive import safetensors_bytes",
    "class Noisy(torch.nn.Module):",
    "    def __init__(s):",
    "        super().__init__()",
    "        s.g = torch.Generator().manual_seed(3)",
    "    def forward(s, x):",
    "        return x + torch.rand(x.shape, generator=s.g)",
    "base = r'%s/base.tb'",
    "with warnings.catch_warnings():",
    "    warnings.simplefilter('ignore')",
    "    tracebridge.save(tracebridge.trace(Noisy(), torch.zeros(2)), base)",
    "doc = json.loads(zipfile.ZipFile(base).read('program.json'))",
    "g = torch.Generator().manual_seed(3)",
    "torch.rand(10, generator=g)",
    "good = bytearray(g.get_state().numpy().tobytes())",
    "def write(name, data):",
    "    blob, _ = safetensors_bytes({'#generator.g': torch.frombuffer(bytearray(data), dtype=torch.uint8)})",
    "    doc['tensors'] = {'sha256': hashlib.sha256(blob).hexdigest(), 'count': 0}",
    "    with zipfile.ZipFile(r'%s/' + name, 'w', zipfile.ZIP_STORED) as z:",
    "        z.writestr('program.json', json.dumps(doc))",
    "        z.writestr('tensors.safetensors', blob)",
    "write('good.tb', good)",
    "bad = bytearray(good); struct.pack_into('<iiQ', bad, 8, 624, 1, 624); write('bad.tb', bad)",
    "wide = bytearray(good); struct.pack_into('<Q', wide, 24 + 8 * 7, 2**32); write('wide.tb', wide)",
    "flag = bytearray(good); flag[5052] = 2; write('flag.tb', flag)",
    "write('short.tb', good[:5048])",
    sep = "\n"), dir, dir), convert = TRUE)
  expect_silent(jit_inspect(file.path(dir, "good.tb"), quiet = TRUE))
  for (case in list(c("bad.tb", "left=624, next=624"), c("wide.tb", "does not fit 32 bits"),
                    c("flag.tb", "neither 0 nor 1"), c("short.tb", "5,048 bytes"))) {
    expect_error(jit_inspect(file.path(dir, case[[1]]), quiet = TRUE), case[[2]],
                 class = "tracebridge_artifact_error")
  }
  expect_error(jit_load(file.path(dir, "bad.tb")), "left=624, next=624",
               class = "tracebridge_artifact_error")
})

test_that("the R check passes real states and bounds CUDA ones", {
  skip_if_no_torch()
  states <- reticulate::py_run_string(paste(
    "import torch",
    "g = torch.Generator().manual_seed(7)",
    "out = [g.get_state().tolist()]",
    "for i in range(300):",
    "    torch.rand(i % 650 + 1, generator=g) if i % 3 else torch.randn(i % 4 + 1, generator=g, dtype=torch.float64)",
    "    out.append(g.get_state().tolist())",
    sep = "\n"), convert = TRUE)
  for (s in lapply(states$out, function(x) as.raw(unlist(x)))) {
    expect_null(tracebridge:::generator_state_problem(s, length(s), "cpu"))
  }
  cuda <- function(offset) c(as.raw(1:8), writeBin(as.integer(c(offset, -(offset < 0))), raw(), size = 4,
                                                   endian = "little"))
  expect_null(tracebridge:::generator_state_problem(cuda(8L), 16, "cuda:0"))
  expect_match(tracebridge:::generator_state_problem(cuda(6L), 16, "cuda:0"), "Philox offset")
  expect_match(tracebridge:::generator_state_problem(cuda(-4L), 16, "cuda:0"), "Philox offset")
  expect_match(tracebridge:::generator_state_problem(raw(8), 8, "cuda:0"), "8 bytes")
})
