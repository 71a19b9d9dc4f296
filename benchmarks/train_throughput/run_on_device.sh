#!/usr/bin/env bash
# One device call (see benchmarks/README.md): the GPU tests of the training step, then the
# throughput table at the paper's three microbatches, graph step and eager step.
#   bash benchmarks/train_throughput/run_on_device.sh [tests|bench|all]   (logs and JSON under $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>/dev/null
what=${1:-all}
if [[ $what == tests || $what == all ]]; then
  python3 -m pytest -q -n 4 -m gpu tests/gpu tests/test_kernels_model.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
fi
if [[ $what == bench || $what == all ]]; then
  python3 benchmarks/train_throughput/train_throughput.py --presets 100m 350m 1b --methods baseline mhar \
    --rounds 8 --profile --out "$OUT/train_throughput_graph.json" 2>&1 | tee "$OUT/bench_graph.log" | grep -v Warning
  python3 benchmarks/train_throughput/train_throughput.py --presets 100m 1b --methods baseline mhar \
    --step eager --rounds 6 --out "$OUT/train_throughput_eager.json" 2>&1 | tee "$OUT/bench_eager.log" | grep -v Warning
fi
