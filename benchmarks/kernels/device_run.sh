#!/usr/bin/env bash
# The whole routing benchmark on one GPU machine, in two calls of the device tool (10 min each):
#   bash benchmarks/kernels/device_run.sh tests-train    GPU tests + end-to-end training table
#   bash benchmarks/kernels/device_run.sh kernels        kernel table: every backend, 3 shapes, H=1/8
# (FLA's fused_attnres runs when its wheel is installed: pip install --no-deps fla_core-*.whl.)
# Writes everything under $OUT (default /tmp/out).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}. PYTHONUNBUFFERED=1 MHAR_GPU_RESULTS=$OUT/gpu_results.jsonl
python -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
case "${1:-tests-train}" in
  tests-train)
    timeout 200 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu tests/test_kernels_model.py \
      tests/test_convert.py 2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -15
    for preset in 100m:8:2048 350m:4:1024 1b:2:1024; do
      IFS=: read -r p b t <<< "$preset"
      timeout 150 python benchmarks/train_throughput.py --preset "$p" --batch "$b" --seq "$t" --vocab 151936 \
        --methods baseline attnres mhar --backend triton --warmup 2 --steps 6 --out "$OUT/train_$p.json" 2>&1 \
        | grep -v -i warn | tail -5
    done
    timeout 120 python benchmarks/profile_train_step.py --presets 1b --methods baseline mhar --show 6 \
      --out "$OUT/profile_1b.json" 2>&1 | grep -v -i warn ;;
  kernels)
    timeout 560 python -m mhar_probe.bench.routing --out "$OUT/bench.json" \
      --backends triton,fla,compile,eager --repeat 10 2>&1 | grep -v -i warn | tee "$OUT/bench.log" | tail -40 ;;
esac
