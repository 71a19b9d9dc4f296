#!/usr/bin/env bash
# One device call on a machine with 2 or more GPUs (issue 36), under 9 minutes in all:
#   bash benchmarks/multi_gpu/run_on_device.sh [tests|bench|all] [PRESETS]        (default: all, "100m 350m")
#   bash benchmarks/multi_gpu/run_on_device.sh tests ["1 2 3"]                     (the GPU tests, or some, by number)
#   bash benchmarks/multi_gpu/run_on_device.sh cpu                                 (the logic, on CPU with gloo)
#   bash benchmarks/multi_gpu/run_on_device.sh midtrain [PRESET]                   (the mid-training run, 100m)
# NPROC: the most processes (GPUs) a bench or midtrain run uses; default: the GPUs `nvidia-smi -L`
# lists (2 in the cpu mode). bench measures at every world size 1, 2, 4, ... up to NPROC, or at SIZES
# alone (e.g. SIZES="1 2", then SIZES=4 in a second call: the 1b preset's three sizes at their 240 s
# floor do not fit one call; `ddp_throughput.py --table` joins the JSON files of both calls).
# 1. tests: the DDP / FSDP2 GPU tests (tests/gpu/test_distributed_gpu.py: each test launches torchrun
#    --nproc_per_node 2 itself), one pytest process per test, in the order of TESTS below, each under
#    `timeout` and within TESTS_S (235) seconds in all; a test that no longer fits is skipped and said so.
#    Test 6, last (the 4 -> 2 GPU resume: a 4-GPU reference, a 4-GPU run cut after 4 steps, its 2-GPU
#    resume), needs 4 GPUs: NPROC, or else the GPUs `nvidia-smi -L` lists. With fewer (a 2-GPU
#    machine) it is reported skipped without starting pytest. After tests 1-5 the budget is spent
#    (1-4 took 196 s of 235 on 2x H200), so on 4 GPUs give it its own call: tests "6".
#    Every run a test starts stops itself after RUN_S (60; RUN_S_COMPILED, 100, where it compiles
#    sublayers) seconds and the test then fails with each rank's Python stacks and stderr tail (pytest
#    prints them; the log is $OUT/gpu_test_<N>.log). The reference runs (eager and graph-stepped DDP)
#    and the corpus / tokenizer are built once, in /tmp/gpu_runs, and shared by the tests.
#    Prints per test `## gpu test N NAME: exit RC after S s`, pytest's result line, and on failure
#    the end of its report (the stacks).
# 2. bench: tokens/s per GPU and peak memory per GPU at 1 GPU (no DDP: the one-GPU trainer's step) and
#    at 2, 4, ... NPROC GPUs (DDP), baseline and MHAR (H=8), graph step and eager step, arms
#    interleaved -> $OUT/ddp_<preset>_<N>gpu.json; each prints one line per arm as it finishes.
#    Each world size is its own process under its own `timeout` of min(240 s, what is left of the
#    budget BUDGET_S, 530), never below the preset's floor (STEP_S_<preset>: 100m 120 s, 350m 180 s,
#    1b 240 s; a 350m run at 2 GPUs took 90 s, and a 90 s limit killed it). A preset after the
#    first runs only while the budget has room for all its world sizes at NEED_S_<preset> (350m 100 s,
#    1b 150 s) each.
# 3. the scaling table of every JSON written (efficiency = tokens/s per GPU at N / at 1 GPU), last.
# midtrain: benchmarks/multi_gpu/midtrain.sh on NPROC GPUs within BUDGET_S (540) seconds: a
#    PRETRAIN_STEPS (400) baseline on the whole embedded corpus, converted, continued CPT_STEPS (200) as
#    MHAR and as the control (the default GPU step under DDP: CUDA graphs, compiled sublayers),
#    evaluated; TRAIN_ARGS / CPT_ARGS add flags to the phases; logs and midtrain.json -> $OUT.
# Every step has its own `timeout`; a failed or timed-out step leaves the others' results and says so.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# the device tool brings back only a few files a call: on exit every log goes into one tarball
# ($OUT/logs_<time>.tgz, one per invocation), the JSON results stay loose
pack_logs() {
  local logs=() f
  for f in "$OUT"/*.log; do [[ -f $f ]] && logs+=("$(basename "$f")"); done
  (( ${#logs[@]} )) && tar -czf "$OUT/logs_$(date +%s%N).tgz" -C "$OUT" "${logs[@]}" && (cd "$OUT" && rm -f "${logs[@]}")
  return 0
}
trap pack_logs EXIT
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
unit=gpu  # what the logs and JSON files name a process by: gpu, or cpu in the cpu mode
ngpu() { nvidia-smi -L 2>/dev/null | grep -c "^GPU"; }
world_sizes() {  # world_sizes MAX: 1 2 4 ... up to MAX, and MAX itself (e.g. 1 2 3 for 3)
  local n=1 out=""
  while (( n < $1 )); do out+="$n "; n=$(( n * 2 )); done
  echo "$out$1"
}
bench_preset() {  # bench_preset PRESET FLOOR_S NPROC [ddp_throughput.py flags]: one run per world size
  local preset=$1 floor=$2 nmax=$3 n secs; shift 3
  for n in ${SIZES:-$(world_sizes "$nmax")}; do
    # a size above the processes allowed would only fail later, inside torchrun
    [[ $n =~ ^[1-9][0-9]*$ ]] && (( n <= nmax )) || { echo "run_on_device.sh: SIZES wants whole numbers 1..$nmax, got '$SIZES'"; exit 2; }
    secs=$(left); (( secs > 240 )) && secs=240; (( secs < floor )) && secs=$floor
    if (( n == 1 )); then  # one process, no DDP: the one-GPU trainer's step
      step "bench_${preset}_1${unit}" $secs python3 benchmarks/multi_gpu/ddp_throughput.py --presets "$preset" \
        --out "$OUT/ddp_${preset}_1${unit}.json" "$@"
    else
      step "bench_${preset}_${n}${unit}" $secs python3 -m torch.distributed.run --nproc_per_node "$n" \
        --master_port 29562 benchmarks/multi_gpu/ddp_throughput.py --presets "$preset" \
        --out "$OUT/ddp_${preset}_${n}${unit}.json" "$@"
    fi
    grep "tok/s/GPU\|Error" "$OUT/bench_${preset}_${n}${unit}.log" | tail -4
  done
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/## GPU: /'
python3 -c "import torch; print('## torch', torch.__version__, 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None)"

if [[ $what == cpu ]]; then  # what can be checked without GPUs: gloo processes, eager step, tiny model
  unit=cpu bench_preset tiny 300 "${NPROC:-2}" --cpu --batch 2 --seq 32 --vocab 512 --warmup 1 --rounds 2
  python3 benchmarks/multi_gpu/ddp_throughput.py --table "$OUT"/ddp_tiny_*cpu.json
  exit 0
fi
nproc=${NPROC:-$(ngpu)}; (( nproc >= 1 )) || nproc=1
echo "## NPROC $nproc"

# the GPU tests in the order they run: (number, runs launched, compiles sublayers, pytest id)
TESTS=(
  "1 2 no test_ddp_graph_step_follows_the_eager_ddp_curve[False]"
  "2 2 no test_ddp_graph_run_resumes_on_one_gpu_with_the_same_metrics"
  "3 1 no test_fsdp_refuses_cuda_graphs_with_the_reason"
  "4 1 yes test_ddp_graph_step_follows_the_eager_ddp_curve[True]"
  "5 1 yes test_fsdp_with_compiled_sublayers_follows_the_eager_ddp_curve"
  "6 3 no test_ddp_graph_run_saved_on_four_gpus_resumes_on_two_with_the_same_metrics"
)
NEEDS_4_GPUS=" 6 "  # tests that launch torchrun --nproc_per_node 4
gpu_tests() {  # gpu_tests [NUMBERS]: one pytest per test, each under `timeout`, TESTS_S in all
  local pick=" ${1:-1 2 3 4 5 6} " t0=$SECONDS total=${TESTS_S:-235} entry n launches compiles id run_s secs rc remaining
  rm -rf /tmp/gpu_runs  # (a fresh machine has none; a warm one must not reuse another tree's runs)
  for entry in "${TESTS[@]}"; do
    read -r n launches compiles id <<< "$entry"
    [[ $pick == *" $n "* ]] || continue
    if [[ $NEEDS_4_GPUS == *" $n "* ]] && (( nproc < 4 )); then
      echo "## gpu test $n $id: skipped, needs 4 GPUs (NPROC $nproc)"; continue
    fi
    run_s=${RUN_S:-60}; [[ $compiles == yes ]] && run_s=${RUN_S_COMPILED:-100}
    # each run's own limit, plus 20 s per run for the launcher's grace, plus pytest's start (and,
    # first, the corpus and reference runs a later test may need: the eager reference is one more run;
    # test 6 counts its own 4-GPU reference among its launches)
    secs=$(( launches * (run_s + 20) + 40 ))
    (( n != 1 && n != 3 && n != 6 )) && secs=$(( secs + run_s + 20 ))
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
  bash benchmarks/multi_gpu/midtrain.sh "$nproc" "${2:-100m}" "${PRETRAIN_STEPS:-400}" "${CPT_STEPS:-200}" \
    /tmp/midtrain --budget "${BUDGET_S:-540}" --corpus-max-bytes 0 --eval-limit "${EVAL_LIMIT:-200}" \
    --train-args="${TRAIN_ARGS-}" --cpt-args="${CPT_ARGS-}"  # (with =: a lone flag is a value)
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
  first=1
  for preset in $presets; do
    floor_var=STEP_S_$preset need_var=NEED_S_$preset
    case $preset in 100m) floor=120 need=60;; 350m) floor=180 need=100;; *) floor=240 need=150;; esac
    floor=${!floor_var:-$floor} need=${!need_var:-$need}
    nsizes=$(echo ${SIZES:-$(world_sizes "$nproc")} | wc -w)
    if (( ! first )) && (( $(left) < need * nsizes )); then
      echo "## skipped $preset: $(left) s of the budget left, $((need * nsizes)) s needed"; continue
    fi
    first=0
    bench_preset "$preset" "$floor" "$nproc"
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
