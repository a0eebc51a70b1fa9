#!/usr/bin/env bash
# Every check that needs a CUDA GPU, in one run: the CUDA tests, then benchmarks/bench_gpu.py.
# For a machine with PyTorch (2.11 to 2.13) built with CUDA and tracebridge's needs installed;
# nothing is fetched. Results go to $OUT (default /tmp/gpu_check): pytest.log, bench_*.md.
#
#   scripts/gpu_check.sh                       # tests + the trace columns + compile columns
#   GPU_CHECK_STEPS="suite" scripts/gpu_check.sh   # every Python test, on the GPU's torch
#   GPU_CHECK_STEPS="tests" scripts/gpu_check.sh
#   GPU_CHECK_BENCH_MODELS="MLP encoder" GPU_CHECK_MODES="default reduce-overhead" scripts/gpu_check.sh
#
# Each step has its own time limit, so that a slow compile cannot take the whole run.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
STEPS=${GPU_CHECK_STEPS:-"tests trace compile"}
MODELS=${GPU_CHECK_BENCH_MODELS:-"MLP encoder GPT resnet"}
MODES=${GPU_CHECK_MODES:-"default reduce-overhead"}
REPEATS=${GPU_CHECK_REPEATS:-30}

nvidia-smi -L || true
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
      torch.cuda.get_device_name() if torch.cuda.is_available() else "NO CUDA")'

for step in $STEPS; do
  case $step in
    tests)  # the CUDA-only tests, then every test that has a CUDA branch
      timeout "${GPU_CHECK_TEST_S:-200}" "$PY" -m pytest -q -p no:cacheprovider -n 8 \
        --durations=10 tests/python/test_cuda.py \
        tests/python/test_devices.py tests/python/test_autocast.py \
        tests/python/test_models_state.py tests/python/test_device_reads.py \
        tests/python/test_settings_reads.py tests/python/test_review14_ambient.py \
        "tests/python/test_compile.py::test_inductor_on_cuda" \
        "tests/python/test_compile.py::test_inductor_modes_on_cuda" \
        2>&1 | tee "$OUT/pytest.log"
      ;;
    trace)  # the plain trace against torch.jit.trace, eager and CUDA graph replay: no compile
      timeout "${GPU_CHECK_TRACE_S:-120}" "$PY" benchmarks/bench_gpu.py --repeats "$REPEATS" \
        --only eager torch.jit.trace "CUDA graph" "tracebridge trace" \
        2>&1 | tee "$OUT/bench_trace.md"
      ;;
    compile)  # torch.compile and tracebridge.compile per mode, and the AOT artifact
      # shellcheck disable=SC2086  # word splitting of the lists is meant
      timeout "${GPU_CHECK_COMPILE_S:-300}" "$PY" benchmarks/bench_gpu.py --repeats "$REPEATS" \
        --models $MODELS --modes $MODES \
        2>&1 | tee "$OUT/bench_compile.md"
      ;;
    suite)  # every Python test: those with a CUDA branch take it, the rest check torch's version
      timeout "${GPU_CHECK_SUITE_S:-300}" "$PY" -m pytest -q -p no:cacheprovider \
        -n "${GPU_CHECK_WORKERS:-14}" --durations=15 -rfE tests/python \
        2>&1 | tee "$OUT/suite.log"
      ;;
    *) echo "gpu_check: unknown step '$step' (tests, trace, compile, suite)" >&2; exit 2 ;;
  esac
done
