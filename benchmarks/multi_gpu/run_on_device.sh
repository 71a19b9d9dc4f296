#!/usr/bin/env bash
# One device call on a machine with 2 GPUs (issue 36), under 9 minutes in all:
#   bash benchmarks/multi_gpu/run_on_device.sh [tests|bench|all] [PRESETS]        (default: all, "100m 350m")
#   bash benchmarks/multi_gpu/run_on_device.sh tests ["1 2 3"]                     (the GPU tests, or some, by number)
#   bash benchmarks/multi_gpu/run_on_device.sh cpu                                 (the logic, on CPU with gloo)
#   bash benchmarks/multi_gpu/run_on_device.sh midtrain [PRESET]                   (the mid-training run, 100m)
# 1. tests: the DDP / FSDP2 GPU tests (tests/gpu/test_distributed_gpu.py: each test launches torchrun
#    --nproc_per_node 2 itself), one pytest process per test, in the order of TESTS below, each under
#    `timeout` and within TESTS_S (235) seconds in all; a test that no longer fits is skipped and said so.
#    Every run a test starts stops itself after RUN_S (60; RUN_S_COMPILED, 100, where it compiles
#    sublayers) seconds and the test then fails with each rank's Python stacks and stderr tail (pytest
#    prints them; the log is $OUT/gpu_test_<N>.log). The reference runs (eager and graph-stepped DDP)
#    and the corpus / tokenizer are built once, in /tmp/gpu_runs, and shared by the tests.
#    Prints per test `## gpu test N NAME: exit RC after S s`, pytest's result line, and on failure
#    the end of its report (the stacks).
# 2. bench: tokens/s per GPU and peak memory per GPU at 1 GPU (no DDP: the one-GPU trainer's step) and
#    at 2 GPUs (DDP), baseline and MHAR (H=8), graph step and eager step, arms interleaved
#    -> $OUT/ddp_<preset>_<N>gpu.json; each prints one line per arm as it finishes. 350m only
#    while at least BENCH_S_350M (150) seconds of the budget (BUDGET_S, 530) are left.
# 3. the scaling table of every JSON written (efficiency = tokens/s per GPU at N / at 1 GPU), last.
# midtrain: benchmarks/multi_gpu/midtrain.sh on NPROC (2) GPUs within BUDGET_S (540) seconds: a
#    PRETRAIN_STEPS (400) baseline on the whole embedded corpus, converted, continued CPT_STEPS (200) as
#    MHAR and as the control (graph step under DDP), evaluated; logs and midtrain.json -> $OUT.
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

# the GPU tests in the order they run: (number, runs launched, compiles sublayers, pytest id)
TESTS=(
  "1 2 no test_ddp_graph_step_follows_the_eager_ddp_curve[False]"
  "2 2 no test_ddp_graph_run_resumes_on_one_gpu_with_the_same_metrics"
  "3 1 no test_fsdp_refuses_cuda_graphs_with_the_reason"
  "4 1 yes test_ddp_graph_step_follows_the_eager_ddp_curve[True]"
  "5 1 yes test_fsdp_with_compiled_sublayers_follows_the_eager_ddp_curve"
)
gpu_tests() {  # gpu_tests [NUMBERS]: one pytest per test, each under `timeout`, TESTS_S in all
  local pick=" ${1:-1 2 3 4 5} " t0=$SECONDS total=${TESTS_S:-235} entry n launches compiles id run_s secs rc remaining
  rm -rf /tmp/gpu_runs  # (a fresh machine has none; a warm one must not reuse another tree's runs)
  for entry in "${TESTS[@]}"; do
    read -r n launches compiles id <<< "$entry"
    [[ $pick == *" $n "* ]] || continue
    run_s=${RUN_S:-60}; [[ $compiles == yes ]] && run_s=${RUN_S_COMPILED:-100}
    # each run's own limit, plus 20 s per run for the launcher's grace, plus pytest's start (and,
    # first, the corpus and reference runs a later test may need: the eager reference is one more run)
    secs=$(( launches * (run_s + 20) + 40 ))
    (( n != 1 && n != 3 )) && secs=$(( secs + run_s + 20 ))
    remaining=$(( total - (SECONDS - t0) ))
    if (( remaining < 45 )); then echo "## gpu test $n $id: skipped, $remaining s of TESTS_S=$total left"; continue; fi
    (( secs > remaining )) && secs=$remaining
    step "gpu_test_$n" $secs python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs --durations=0 \
      "tests/gpu/test_distributed_gpu.py::$id" --gpu-runs /tmp/gpu_runs --gpu-run-timeout "$run_s"
    rc=$?
    echo "##   ($id)"
    grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|[0-9]+ (passed|failed|error)" "$OUT/gpu_test_$n.log" | tail -3
    if (( rc != 0 )); then  # the report: the command, how each run ended, each rank's stderr (stacks)
      grep "^E " "$OUT/gpu_test_$n.log" | cut -c1-300 | tail -150
    fi
  done
  echo "## gpu tests: $((SECONDS - t0)) s in all"
}

if [[ $what == midtrain ]]; then
  bash benchmarks/multi_gpu/midtrain.sh "${NPROC:-2}" "${2:-100m}" "${PRETRAIN_STEPS:-400}" "${CPT_STEPS:-200}" \
    /tmp/midtrain --budget "${BUDGET_S:-540}" --corpus-max-bytes 0 --eval-limit "${EVAL_LIMIT:-200}" \
    --train-args "${TRAIN_ARGS---cuda-graphs}" --cpt-args "${CPT_ARGS---cuda-graphs}"
  rc=$?
  cp /tmp/midtrain/*.log /tmp/midtrain/midtrain.json "$OUT"/ 2>/dev/null
  exit $rc
fi

if [[ $what == tests ]]; then
  gpu_tests "${2:-}"
  exit 0
fi
if [[ $what == all ]]; then
  TESTS_S=${TESTS_S:-240} gpu_tests "1 2 3"
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
