#!/usr/bin/env bash
# One device call: GPU tests, routing benchmark (launch-config sweep judged by device time,
# then the kernel table), and the end-to-end 100M training benchmark per routing backend.
# Usage (GPU machine, repo root): bash benchmarks/kernels/device_run.sh [sweep] [bench] [train]
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1 MHAR_GPU_RESULTS=$OUT/gpu_results.jsonl TRITON_DEFAULT_FP_FUSION=1
SWEEP=${1:-}; BENCH=${2:-triton}; TRAIN=${3:-triton}
python -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
timeout 120 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu tests/test_kernels_model.py 2>&1 \
  | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -12
timeout 130 python benchmarks/kernels/bench_routing.py --out "$OUT/bench.json" --backends "$BENCH" \
  --repeat 10 --no-delta ${SWEEP:+--sweep $SWEEP} > "$OUT/bench.log" 2>&1
grep "^SWEEP\|GPU-busy\|Error" "$OUT/bench.log"; tail -7 "$OUT/bench.log"
[ -f "$OUT/bench_tuned.json" ] && export MHAR_KERNEL_CONFIG=$OUT/bench_tuned.json
for be in ${TRAIN//,/ }; do
  lim=70; [ "$be" = eager ] && lim=80; [ "$be" = compile ] && lim=120
  timeout $lim python benchmarks/train_throughput.py --preset 100m --batch 8 --seq 2048 --vocab 151936 \
    --methods baseline mhar --backend "$be" --warmup 2 --steps 6 --out "$OUT/train_$be.json" 2>&1 | tail -4
done
