#!/usr/bin/env bash
# One device call (2026-11-23): GPU tests, host overhead, kernel A/B (cached launch, split
# stack) at the three kernel-table shapes, end-to-end A/B at the cost table's microbatches.
#   bash benchmarks/kernels/device_run2.sh [part...]   parts: tests host kernels mixed train
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}. PYTHONUNBUFFERED=1 MHAR_GPU_RESULTS=$OUT/gpu_results.jsonl
python -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
parts=${*:-tests host kernels mixed train}
for part in $parts; do case $part in
  tests)
    timeout 240 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu tests/test_kernels_model.py \
      tests/test_convert.py 2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -12 ;;
  host)
    timeout 90 python benchmarks/kernels/host_overhead.py --shape 100M --heads 8 --out "$OUT/host_100M.json" 2>&1 \
      | tee "$OUT/host.log" | tail -3 ;;
  kernels)
    timeout 300 python -m mhar_probe.bench.routing --out "$OUT/bench.json" --no-delta \
      --backends triton,triton-nofast,compile --repeat 10 2>&1 | grep -v -i warn | tee "$OUT/bench.log" | tail -16 ;;
  mixed)
    timeout 200 python -m mhar_probe.bench.routing --out "$OUT/bench_mixed.json" --no-delta --dtype mixed \
      --shapes 100M-train,350M-train,1B-train --heads 8 --backends triton,triton-promoted,triton-prev --repeat 5 \
      2>&1 | grep -v -i warn | tee "$OUT/bench_mixed.log" | tail -12 ;;
  train)
    for preset in 100m:8:2048 350m:4:1024 1b:2:1024; do
      IFS=: read -r p b t <<< "$preset"
      timeout 200 python benchmarks/train_throughput.py --preset "$p" --batch "$b" --seq "$t" --vocab 151936 \
        --methods baseline mhar mhar/prev baseline --backend triton --warmup 2 --steps 8 --out "$OUT/train_$p.json" 2>&1 \
        | grep -v -i warn | tail -6
    done ;;
esac; done
