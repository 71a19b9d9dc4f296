#!/usr/bin/env bash
# One device call (benchmarks/README.md): the GPU test group, the training-throughput table at the
# paper's three microbatches (graph step, with a profile per arm), and the dout-policy loss curves.
#   bash benchmarks/train_throughput/run_on_device.sh [tests|bench|dout|all] COMMIT   (logs + JSON under $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>/dev/null
what=${1:-all}; commit=${2:-}
if [[ $what == tests || $what == all ]]; then
  python3 -m pytest -v -n 4 -m gpu tests/gpu tests/test_kernels_model.py -p no:cacheprovider \
    > "$OUT/gpu_tests.log" 2>&1
  grep -E "passed|failed|error" "$OUT/gpu_tests.log" | tail -8
fi
if [[ $what == bench || $what == all ]]; then
  python3 benchmarks/train_throughput/train_throughput.py --presets 100m 350m 1b --methods baseline mhar \
    --rounds 8 --profile --commit "$commit" --out "$OUT/h100.json" 2>&1 | grep -v "Warn\|warn"
fi
if [[ $what == dout || $what == all ]]; then
  MHAR_CACHE_DIR=/tmp/mhar-cache python3 benchmarks/kernels/dout_policy.py --commit "$commit" \
    --out "$OUT/dout_policy_h100.json" 2>&1 | grep -v "Warn\|warn" | tail -5
fi
