#!/usr/bin/env bash
# One device call on a machine with 2 GPUs (issue 36), under 9 minutes in all:
#   bash benchmarks/multi_gpu/run_on_device.sh [tests|bench|all] [PRESETS]        (default: all, "100m 350m")
#   bash benchmarks/multi_gpu/run_on_device.sh cpu                                 (the logic, on CPU with gloo)
# 1. tests: the DDP / FSDP2 GPU tests (tests/gpu/test_distributed_gpu.py: each test launches torchrun
#    --nproc_per_node 2 itself) -> $OUT/gpu_tests_distributed.log; prints pytest's summary lines.
# 2. bench: tokens/s per GPU and peak memory per GPU at 1 GPU (no DDP: the one-GPU trainer's step) and
#    at 2 GPUs (DDP), baseline and MHAR (H=8), graph step and eager step, arms interleaved
#    -> $OUT/ddp_<preset>_<N>gpu.json; each prints one line per arm as it finishes. 350m only
#    while at least BENCH_S_350M (150) seconds of the budget (BUDGET_S, 530) are left.
# 3. the scaling table of every JSON written (efficiency = tokens/s per GPU at N / at 1 GPU), last.
# Every step has its own `timeout`; a failed or timed-out step leaves the others' results and says so.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>/dev/null
what=${1:-all}; presets=${2:-100m 350m}
budget=${BUDGET_S:-530}
step() {  # step NAME SECONDS CMD...: run CMD under `timeout`, log to $OUT/NAME.log, report how it ended
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$secs" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "## $name: exit $rc after $((SECONDS - t0)) s$( ((rc == 124 || rc == 137)) && echo " (TIMED OUT at $secs s)")"
  return $rc
}
left() { echo $((budget - SECONDS)); }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/## GPU: /'
python3 -c "import torch; print('## torch', torch.__version__, 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None)"

if [[ $what == cpu ]]; then  # what can be checked without GPUs: 2 gloo processes, eager step, tiny model
  step cpu_bench 300 python3 -m torch.distributed.run --nproc_per_node 2 --master_port 29561 \
    benchmarks/multi_gpu/ddp_throughput.py --cpu --presets tiny --batch 2 --seq 32 --vocab 512 \
    --warmup 1 --rounds 2 --out "$OUT/ddp_tiny_2cpu.json"
  grep -v "Warn\|warn" "$OUT/cpu_bench.log" | tail -4
  step cpu_bench1 300 python3 benchmarks/multi_gpu/ddp_throughput.py --cpu --presets tiny --batch 2 --seq 32 \
    --vocab 512 --warmup 1 --rounds 2 --out "$OUT/ddp_tiny_1cpu.json"
  python3 benchmarks/multi_gpu/ddp_throughput.py --table "$OUT"/ddp_tiny_*cpu.json
  exit 0
fi

if [[ $what == tests || $what == all ]]; then
  step gpu_tests_distributed 240 python3 -m pytest -v -m gpu tests/gpu/test_distributed_gpu.py -p no:cacheprovider
  grep -E "PASSED|FAILED|ERROR|passed|failed|error" "$OUT/gpu_tests_distributed.log" | tail -12
fi

if [[ $what == bench || $what == all ]]; then
  for preset in $presets; do
    if [[ $preset != 100m ]] && (( $(left) < ${BENCH_S_350M:-150} )); then
      echo "## skipped $preset: $(left) s of the budget left"; continue
    fi
    # one GPU first (no DDP), then two (DDP); each its own process and timeout
    secs=$(( $(left) / 2 < 200 ? $(left) / 2 : 200 )); (( secs < 90 )) && secs=90
    step "bench_${preset}_1gpu" $secs python3 benchmarks/multi_gpu/ddp_throughput.py --presets $preset \
      --out "$OUT/ddp_${preset}_1gpu.json"
    grep "tok/s/GPU\|Error" "$OUT/bench_${preset}_1gpu.log" | tail -4
    secs=$(( $(left) < 240 ? $(left) : 240 )); (( secs < 90 )) && secs=90
    step "bench_${preset}_2gpu" $secs python3 -m torch.distributed.run --nproc_per_node 2 --master_port 29562 \
      benchmarks/multi_gpu/ddp_throughput.py --presets $preset --out "$OUT/ddp_${preset}_2gpu.json"
    grep "tok/s/GPU\|Error" "$OUT/bench_${preset}_2gpu.log" | tail -4
  done
fi

shopt -s nullglob
jsons=("$OUT"/ddp_*gpu.json)
if (( ${#jsons[@]} )); then
  echo "## scaling (per-GPU batch fixed at the paper's microbatch; efficiency vs 1 GPU, same arm)"
  python3 benchmarks/multi_gpu/ddp_throughput.py --table "${jsons[@]}"
else
  echo "## no throughput JSON was written (see $OUT/bench_*.log)"
fi
