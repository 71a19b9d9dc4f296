#!/usr/bin/env bash
# One device call (benchmarks/README.md): the GPU test group, the training-throughput table at the
# paper's three microbatches (graph step, with a profile per arm), and the dout-policy loss curves.
#   bash benchmarks/train_throughput/run_on_device.sh [tests|fusedtests|bench|storage|variants|attnres|hyper|fold|dout|all] COMMIT [PRESETS]
# (logs + JSON under $OUT). `bench` measures the training defaults; `variants` the same presets
# once per step variant (loss kernel x compiled sublayers), one process each; `storage` the
# defaults with --routing-douts storage (bf16 upstream gradients in the routing backward);
# `attnres` the defaults for baseline against single-head AttnRes (H = 1); `hyper` the study's shape
# (100m, 32x2048, 8,192 words) for baseline against hyper-connections compiled three ways (issue 33).
# `fold` the issue-35 table: one process per configuration (100m with 8,192 words, then PRESETS), baseline
# against MHAR under BACKWARDS (default: fold, the default backward; `fold gather` adds the gather
# backward), 6 rounds and one profiled step per arm, each process under FOLD_TIMEOUT (110) seconds, so a
# slow configuration costs only itself -> $OUT/${TAG}_fold_<config>.json.
# VARIANTS (one KernelConfig spec, e.g. forward=lookahead) adds that MHAR arm to each `fold` process
# (train_throughput.py --variant), interleaved with the others.
# WITH_8K=0 leaves out `fold`'s first configuration (100m with 8,192 words), so that a call can give
# its whole time to the larger presets; an empty PRESETS ("") runs that configuration alone (PRESETS
# left out: all three presets).
# TAG (default h100) names the JSON files: TAG=h200 on an H200. The warning filters are line-buffered,
# so that a call cut by its time limit still shows each line printed before the cut.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>/dev/null
what=${1:-all}; commit=${2:-}; presets=${3-100m 350m 1b}; tag=${TAG:-h100}
configs=("100m --vocab 8192" $presets); [[ ${WITH_8K:-1} == 0 ]] && configs=($presets)
bench() {  # bench NAME ARGS...: one process, its table on stdout, JSON as $OUT/NAME.json (METHODS: the arms)
  local name=$1; shift
  python3 benchmarks/train_throughput/train_throughput.py --presets $presets --methods ${METHODS:-baseline mhar} \
    --rounds 8 --commit "$commit" --out "$OUT/$name.json" "$@" 2>&1 | grep --line-buffered -v "Warn\|warn"
}
if [[ $what == tests || $what == all ]]; then
  python3 -m pytest -v -n 4 -m gpu tests/gpu tests/test_kernels_model.py \
    -p no:cacheprovider > "$OUT/gpu_tests.log" 2>&1
  grep -E "passed|failed|error" "$OUT/gpu_tests.log" | tail -8
  # unmarked tests that run on the GPU when there is one (the CPU runs them in Triton's interpreter)
  python3 -m pytest -v tests/test_cross_entropy_kernel.py tests/test_loss.py -p no:cacheprovider \
    >> "$OUT/gpu_tests.log" 2>&1
  grep -E "passed|failed|error" "$OUT/gpu_tests.log" | tail -4
fi
if [[ $what == fusedtests ]]; then
  python3 -m pytest -v tests/gpu/test_fused_step.py tests/test_cross_entropy_kernel.py tests/test_loss.py \
    -p no:cacheprovider > "$OUT/fused_tests.log" 2>&1
  grep -E "passed|failed|error|Error" "$OUT/fused_tests.log" | tail -12
fi
if [[ $what == bench || $what == all ]]; then
  bench $tag --profile
fi
if [[ $what == storage ]]; then
  bench ${tag}_storage_douts --routing-douts storage
fi
if [[ $what == attnres ]]; then
  METHODS="baseline attnres" bench ${tag}_attnres
fi
if [[ $what == hyper ]]; then
  python3 benchmarks/train_throughput/train_throughput.py --presets 100m --batch 32 --seq 2048 --vocab 8192 \
    --methods baseline hyper --hyper-compile region region-pointwise sublayers --rounds 3 --warmup 1 --profile \
    --commit "$commit" --out "$OUT/${tag}_hyper_100m.json" 2>&1 | grep --line-buffered -v "Warn\|warn"
fi
if [[ $what == fold ]]; then
  for config in "${configs[@]}"; do
    name=${tag}_fold_${config// --vocab /_vocab}; t0=$SECONDS
    timeout --kill-after=10 ${FOLD_TIMEOUT:-110} python3 benchmarks/train_throughput/train_throughput.py --presets $config \
      --methods baseline mhar --routing-backward ${BACKWARDS:-fold} ${VARIANTS:+--variant $VARIANTS} --rounds 6 \
      --profile --commit "$commit" --out "$OUT/$name.json" 2>&1 | grep --line-buffered -v "Warn\|warn"
    echo "## $config: exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s"
  done
fi
if [[ $what == variants ]]; then
  for v in "fused compiled:--loss-kernel fused --compile-sublayers --profile" \
           "fused:--loss-kernel fused --no-compile-sublayers --profile" \
           "torch:--loss-kernel torch --no-compile-sublayers"; do
    name=${v%%:*}; flags=${v#*:}
    echo "## variant: $name ($flags)"; t0=$SECONDS
    bench "${tag}_${name// /_}" $flags
    echo "## $name took $((SECONDS - t0)) s"
  done
fi
if [[ $what == dout || $what == all ]]; then
  MHAR_CACHE_DIR=/tmp/mhar-cache python3 benchmarks/kernels/dout_policy.py --commit "$commit" \
    --out "$OUT/dout_policy_$tag.json" 2>&1 | grep --line-buffered -v "Warn\|warn" | tail -5
fi
