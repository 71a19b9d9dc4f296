#!/usr/bin/env bash
# The whole routing benchmark on one GPU machine, in two calls of the device tool (10 min each):
#   bash benchmarks/kernels/device_run.sh tests-kernels   GPU tests + kernel table (triton, the
#                                                         kernels of 2026-11-22, compile; 3 shapes, H=1/8)
#   bash benchmarks/kernels/device_run.sh host            host time per routing call, Triton's launch
#                                                         path against the direct launches (cProfile)
#   bash benchmarks/kernels/device_run.sh split-host      GPU tests, then 1B A/B of the two-tile heads and
#                                                         the direct launches (kernel + end to end), host
#   OLD=dir bash benchmarks/kernels/device_run.sh host-ab  host time per routing call against an older tree
#   bash benchmarks/kernels/device_run.sh ncu             Nsight Compute counters of the three kernels at
#                                                         the 1B and 100M training shapes (ncu_routing.py)
#   SHAPES=.. KERNELS=.. bash benchmarks/kernels/device_run.sh sweep   launch configs with register caps
#                                                         (DTYPE=mixed, HEADS=8 by default)
#   bash benchmarks/kernels/device_run.sh table           every GPU test, then the kernel table against compile
#                                                         and FLA (H=1; carry .whl with its wheel), graph replay
#   bash benchmarks/kernels/device_run.sh gathermeta      every GPU test, then the gather's one-reader-ahead
#                                                         scalar loads against per-reader loads (training
#                                                         microbatches), then the kernel table with compile
#   bash benchmarks/kernels/device_run.sh sweeps          fp32 GPU tests, then the forward's configs at the
#                                                         kernel-table shapes (bf16, H=1) and the training
#                                                         microbatches (H=8), and pair_e's
#   PRESETS=.. VARIANT=.. bash benchmarks/kernels/device_run.sh train  autocast-layout kernel table at
#                                                         the training microbatches + end-to-end cost table,
#                                                         triton against triton-$VARIANT (default bf16dout)
#   bash benchmarks/kernels/device_run.sh collect         every GPU test (both backwards), then the kernel
#                                                         table at the training microbatches: the default
#                                                         (4-bytes/pair) backward against the earlier one
#   bash benchmarks/kernels/device_run.sh tests           every GPU test, both backwards (no timing)
#   PRESETS=.. METHODS=.. bash benchmarks/kernels/device_run.sh profile   a training step split into host
#                                                         and GPU time per phase and kernel categories
#                                                         (benchmarks/profile_train_step.py)
#   PRESETS=.. METHODS=.. bash benchmarks/kernels/device_run.sh interleave   end-to-end cost table with the
#                                                         arms' steps interleaved round by round
#   bash benchmarks/kernels/device_run.sh twopass         the collect GPU tests with the gather's two-pass
#                                                         loop forced on, then the gather's configs (two-pass
#                                                         and register caps among them) at the training
#                                                         microbatches (H=8) and the kernel-table shapes (H=1)
#   bash benchmarks/kernels/device_run.sh twopasstable    every GPU test, then the kernel table: triton against
#                                                         its gather configs before the two-pass entries
#                                                         (triton-gatherprev) and compile, graph replay
#   PRESETS=.. bash benchmarks/kernels/device_run.sh twopasstrain   the training microbatches' routing
#                                                         kernels (triton, triton-gatherprev), then the
#                                                         interleaved end-to-end table for PRESETS
#   bash benchmarks/kernels/device_run.sh pairewide       the collect GPU tests, then pair_e's configs with
#                                                         its wide column blocks (training microbatches,
#                                                         H=8), then the routing kernels with the best of
#                                                         them against the narrow blocks (triton-enarrow)
#   bash benchmarks/kernels/device_run.sh fwdcuts         GPU tests, then the forward's instruction cuts
#                                                         (fold q*g, lazy rescale) against the forward
#                                                         before them: training microbatches and the
#                                                         kernel-table shapes (graph replay, H=1/8)
#   bash benchmarks/kernels/device_run.sh fwdpipe         GPU tests of the forward's pipelined loop, then its
#                                                         configs (stages) at the training microbatches (H=8)
#                                                         and the kernel-table shapes (bf16, H=1)
#   bash benchmarks/kernels/device_run.sh fla             FLA's fused_attnres against triton, H=1, graph
#                                                         replay (carry .whl with its wheel)
#   bash benchmarks/kernels/device_run.sh typed           the gather's and the forward's configs for pure 16-bit
#                                                         chains (kernel-table shapes, bf16, H = 8; gather 100M H = 1)
#   bash benchmarks/kernels/device_run.sh sameh           GPU tests of the gather's constant-H path, then the
#                                                         gather's configs with it (training shapes, kernel table; H = 8)
#   bash benchmarks/kernels/device_run.sh aligned         the gather's aligned column tiles: their GPU tests and
#                                                         the d = 1280 chains, then the gather's configs at 1B
#                                                         (1B-train autocast, 1B bf16; H = 8) aligned and not
#   bash benchmarks/kernels/device_run.sh gatherprof      the 1B gather aligned against not in one process (training
#                                                         microbatch, kernel table), more configs, Nsight Compute
#   bash benchmarks/kernels/device_run.sh loadsfirst      the gather's configs with its q*g loads issued with the
#                                                         dout (LOADS_FIRST), training microbatches and kernel table
#   VARIANTS=.. METHODS=.. bash benchmarks/kernels/device_run.sh compare   no tests: kernel table and training
#                                                         microbatches (triton against VARIANTS), then end to end
#   KIND=.. JOBS=.. bash benchmarks/kernels/device_run.sh sweepjobs   one kernel's configs over sweep jobs
#   VARIANTS=.. bash benchmarks/kernels/device_run.sh check   every GPU test, then triton against the VARIANTS at
#                                                         the training microbatches (routing kernels, H = 8)
#   bash benchmarks/kernels/device_run.sh splitdot        every GPU test, then the kernel table: pair_e's TF32x3
#                                                         dot for rounded keys against its IEEE dot (triton-eieee)
#   VARIANTS=.. bash benchmarks/kernels/device_run.sh final   the whole kernel table in one run: triton (and
#                                                         the VARIANTS, comma-separated), eager, compile and
#                                                         FLA (H=1; carry .whl with its wheel), graph replay
# (FLA's fused_attnres runs when its wheel is installed: pip install --no-deps fla_core-*.whl, and
# `fla` is added to --backends.) Writes everything under $OUT (default /tmp/out).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}. PYTHONUNBUFFERED=1 MHAR_GPU_RESULTS=$OUT/gpu_results.jsonl
python -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
run_interleaved() {  # the end-to-end table, arms interleaved; $1 presets, $2 methods, $3 timeout (defaults)
  for preset in ${PRESETS:-$1}; do
    IFS=: read -r p b t <<< "$preset"
    timeout ${TRAIN_TIMEOUT:-$3} python benchmarks/train_throughput.py --preset "$p" --batch "$b" --seq "$t" \
      --vocab 151936 --methods ${METHODS:-$2} --backend triton --interleave \
      --warmup 2 --steps ${STEPS:-10} --out "$OUT/train_interleaved_$p.json" 2>&1 | grep -v -i warn | tail -6
  done
}
sweep_jobs() {  # $1 kernel kind, then jobs shapes:dtype:heads:timeout -> $OUT/sweep_<kind>_<dtype>_h<heads>$SWEEP_TAG.*
  local kind=$1 job shapes dtype heads limit
  shift
  for job in "$@"; do
    IFS=: read -r shapes dtype heads limit <<< "$job"
    timeout "$limit" python -m mhar_probe.bench.routing --out "$OUT/sweep_${kind}_${dtype}_h$heads$SWEEP_TAG.json" \
      --no-delta --dtype "$dtype" --heads "$heads" --sweep "$shapes" --sweep-kernels "$kind" --sweep-only \
      --repeat 3 2>&1 | grep -v -i warn | tee "$OUT/sweep_${kind}_${dtype}_h$heads$SWEEP_TAG.log" | grep SWEEP
  done
}
gather_ncu() {  # Nsight Compute on one late 1B-train gather launch per case of NCU_CASES
  # (align:blockp:warps:prefetch:maxnreg; MHAR_GATHER_ALIGN_TILES and a config file per case)
  local case align bp warps pre cap tag
  for case in ${NCU_CASES:-1:1:1:false:0 0:1:1:false:0 1:1:2:false:128}; do
    IFS=: read -r align bp warps pre cap <<< "$case"
    tag=${case//:/_}
    echo "{\"gather_by_dtype\": [[1280, 8, 8, 4, $bp, $warps, $pre, $cap]]}" > "$OUT/cfg_$tag.json"
    MHAR_GATHER_ALIGN_TILES=$align MHAR_KERNEL_CONFIG="$OUT/cfg_$tag.json" timeout 85 ncu --clock-control none \
      --profile-from-start off -k "regex:stack_gather" --launch-skip 40 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio,dram__bytes.sum.per_second,lts__t_bytes.sum.per_second,l1tex__t_bytes.sum.per_second" \
      --csv --page details python benchmarks/kernels/ncu_routing.py --shape 1B-train --heads 8 --dtype mixed \
      > "$OUT/ncu_gather_$tag.csv" 2> "$OUT/ncu_gather_$tag.err"
    echo "ncu $case: rc $? ($(wc -l < "$OUT/ncu_gather_$tag.csv") csv lines)"; tail -2 "$OUT/ncu_gather_$tag.err"
  done
  python benchmarks/kernels/ncu_routing.py --summarise "$OUT"/ncu_gather_*.csv --out "$OUT/ncu_summary.json"
}
fla_setup() {  # FLA's wheel from .whl (carried), unpacked onto PYTHONPATH; sets FLA= or FLA=,fla
  # (a pure-Python wheel imports once unpacked; `pip install` on the GPU machine put it where
  # this python does not look: "No module named 'fla'")
  FLA=
  if ls .whl/fla_core-*.whl >/dev/null 2>&1; then
    python -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall('/tmp/fla_site')" \
      .whl/fla_core-*.whl && export PYTHONPATH=/tmp/fla_site:$PYTHONPATH
    if python -c "import fla.ops.attnres" 2> "$OUT/fla_import.err"; then FLA=,fla
    else echo "FLA's wheel is installed but does not import:"; tail -3 "$OUT/fla_import.err"; fi
  else
    echo "no FLA wheel under .whl/ (carry it): FLA is not timed"
  fi
}
case "${1:-tests-kernels}" in
  tests-kernels)
    timeout 200 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu tests/test_kernels_model.py \
      tests/test_convert.py 2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -12
    timeout 440 python -m mhar_probe.bench.routing --out "$OUT/bench.json" --no-delta \
      --backends triton,triton-prev,compile --repeat 10 --graph 2>&1 | grep -v -i warn | tee "$OUT/bench.log" | tail -22 ;;
  split-host)  # one short call: GPU tests, then the two-tile heads and direct launches A/B at 1B
    timeout 170 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu tests/test_kernels_model.py \
      2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -12
    timeout 100 python -m mhar_probe.bench.routing --out "$OUT/bench_1b.json" --no-delta --dtype mixed \
      --shapes 1B-train --heads 8 --backends triton,triton-padded,triton-jitlaunch --repeat 5 2>&1 \
      | grep -v -i warn | tee "$OUT/bench_1b.log" | tail -8
    timeout 120 python benchmarks/train_throughput.py --preset 1b --batch 2 --seq 1024 --vocab 151936 \
      --methods baseline mhar mhar/padded mhar/jitlaunch baseline mhar --backend triton --warmup 2 \
      --steps 6 --out "$OUT/train_1b.json" 2>&1 | grep -v -i warn | tail -9
    timeout 60 python benchmarks/kernels/host_overhead.py --shape 100M --heads 8 --out "$OUT/host_100M.json" \
      2>&1 | tail -3 ;;
  ncu)  # kernel filter : launches to skip : launches to profile, per shape (late calls: many sources)
    SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats
      --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis"
    METRICS="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio,dram__bytes.sum.per_second"
    # the default (collect) backward's kernels; JOBS= overrides (the earlier backward's were
    # stack_bwd and dqdg, with MHAR_STACK_COLLECT=0)
    for job in ${JOBS:-1B-train:route_fwd:60:2 1B-train:stack_gather:12:2 1B-train:pair_e:1:1 \
               100M-train:route_fwd:20:1 100M-train:stack_gather:4:1 100M-train:pair_e:1:1}; do
      IFS=: read -r shape kern skip count <<< "$job"
      timeout 85 ncu --clock-control none --profile-from-start off -k "regex:$kern" --launch-skip "$skip" \
        --launch-count "$count" $SECTIONS $METRICS --csv --page details \
        python benchmarks/kernels/ncu_routing.py --shape "$shape" --heads 8 --dtype mixed \
        > "$OUT/ncu_${shape}_$kern.csv" 2> "$OUT/ncu_${shape}_$kern.err"
      echo "$shape $kern: rc $? ($(wc -l < "$OUT/ncu_${shape}_$kern.csv") csv lines)"; tail -2 "$OUT/ncu_${shape}_$kern.err"
    done
    python benchmarks/kernels/ncu_routing.py --summarise "$OUT"/ncu_*.csv --out "$OUT/ncu_summary.json" ;;
  sweep)  # launch configs incl. register caps: SHAPES (default 1B-train), KERNELS (default fwd,stack)
    timeout 60 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu -k register_cap 2>&1 \
      | tee "$OUT/pytest_regcap.log" | grep -E "passed|failed|Error|^E  " | tail -4
    timeout 500 python -m mhar_probe.bench.routing --out "$OUT/sweep.json" --no-delta --dtype ${DTYPE:-mixed} \
      --heads ${HEADS:-8} \
      --sweep "${SHAPES:-1B-train}" --sweep-kernels "${KERNELS:-fwd,stack}" --sweep-only --repeat 3 2>&1 \
      | grep -v -i warn | tee "$OUT/sweep.log" | grep SWEEP ;;
  table)
    fla_setup
    timeout 250 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu tests/test_kernels_model.py \
      2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -14
    timeout ${TABLE_TIMEOUT:-320} python -m mhar_probe.bench.routing --out "$OUT/bench_table.json" --no-delta \
      --shapes 100M,350M,1B --heads 1,8 --backends triton,compile$FLA --repeat 5 --graph 2>&1 \
      | grep -v -i warn | tee "$OUT/bench_table.log" | tail -16 ;;
  gathermeta)
    timeout 225 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu tests/test_kernels_model.py \
      2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -14
    timeout 110 python -m mhar_probe.bench.routing --out "$OUT/bench_train_meta.json" --no-delta --dtype mixed \
      --shapes 100M-train,350M-train,1B-train --heads 8 --backends triton,triton-meta --repeat 5 2>&1 \
      | grep -v -i warn | tee "$OUT/bench_train_meta.log" | tail -8
    timeout 245 python -m mhar_probe.bench.routing --out "$OUT/bench_table.json" --no-delta \
      --shapes 100M,350M,1B --heads 1,8 --backends triton,triton-meta,compile --repeat 5 --graph 2>&1 \
      | grep -v -i warn | tee "$OUT/bench_table.log" | tail -20 ;;
  sweeps)
    timeout 60 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu -k fp32 2>&1 \
      | tee "$OUT/pytest_fp32.log" | grep -E "passed|failed|Error|^E  " | tail -6
    sweep_jobs fwd 100M,350M,1B:bfloat16:1:150 100M-train,350M-train,1B-train:mixed:8:170
    sweep_jobs pair_e 100M-train,350M-train,1B-train:mixed:8:130 ;;
  host-ab)  # host time per routing call, this tree against OLD (a copy of an earlier mhar_probe/,
    # carried to the device), alternated process by process (this VM's host speed drifts)
    for round in 1 2 3; do
      for arm in old new; do
        if [ "$arm" = old ]; then pp="$OLD"; else pp=.; fi
        PYTHONPATH="$pp" timeout 80 python benchmarks/kernels/host_overhead.py --shape 100M --heads 8 --rounds 2 \
          --out "$OUT/host_${arm}_$round.json" 2>&1 | grep "HOST.*direct" | sed "s/^/$arm round $round: /"
      done
    done ;;
  host)
    timeout 60 python benchmarks/kernels/host_overhead.py --shape 100M --heads 8 --out "$OUT/host_100M.json" \
      2>&1 | tail -1 ;;
  train)  # PRESETS (default: all three) as preset:batch:seq; VARIANT (default bf16dout)
    V=${VARIANT:-bf16dout}
    timeout 150 python -m mhar_probe.bench.routing --out "$OUT/bench_train.json" --no-delta --dtype mixed \
      --shapes 100M-train,350M-train,1B-train --heads 8 --backends triton,triton-$V,triton-prev \
      --repeat 5 2>&1 | grep -v -i warn | tee "$OUT/bench_train.log" | tail -12
    for preset in ${PRESETS:-100m:8:2048 350m:4:1024 1b:2:1024}; do
      IFS=: read -r p b t <<< "$preset"
      timeout 200 python benchmarks/train_throughput.py --preset "$p" --batch "$b" --seq "$t" --vocab 151936 \
        --methods baseline mhar mhar/$V baseline mhar mhar/$V --backend triton --warmup 2 --steps 8 \
        --out "$OUT/train_$p.json" 2>&1 | grep -v -i warn | tail -8
    done ;;
  interleave)  # PRESETS as preset:batch:seq (default: the paper's three microbatches)
    run_interleaved "100m:8:2048 350m:4:1024 1b:2:1024" "baseline mhar mhar/stackbwd" 180 ;;
  fwdpipe)  # the forward's loop under Triton's pipeliner (fourth config entry) against its prefetch
    timeout 120 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu -k "pipelined or fp32_shared" 2>&1 \
      | tee "$OUT/pytest_fwdpipe.log" | grep -E "passed|failed|Error|^E  " | tail -6
    export MHAR_SWEEP_FWD=${MHAR_SWEEP_FWD:-'[[1,1],[1,1,0,2],[1,1,0,3],[1,1,0,4],[1,2,0,3],[2,1,0,3]]'}
    sweep_jobs fwd 100M-train,350M-train,1B-train:mixed:8:220 100M,350M,1B:bfloat16:1:170 ;;
  typed)  # launch configs for pure 16-bit chains (the kernel-table shapes, bf16): the gather and the
    # forward at H = 8, which ran the autocast-tuned entries, and the gather at 100M H = 1 (heuristic)
    MHAR_SWEEP_GATHER=${SWEEP_GATHER_H8:-'[[1,2,false],[1,2,false,0,true],[1,1,true],[1,1,false],[1,2,true],
      [2,1,false],[2,2,false],[2,2,true],[1,1,false,0,true],[1,4,false]]'} \
      sweep_jobs gather 100M,350M,1B:bfloat16:8:330
    MHAR_SWEEP_FWD=${SWEEP_FWD_H8:-'[[1,1,0,5],[1,1,0,3],[1,1,0,4],[1,2,0,3],[1,2,0,4],[2,1,0,3]]'} \
      sweep_jobs fwd 100M,350M,1B:bfloat16:8:150
    MHAR_SWEEP_GATHER=${SWEEP_GATHER_H1:-'[[1,2,false],[1,1,true],[1,1,false],[2,1,false],[2,1,true]]'} \
      sweep_jobs gather 100M:bfloat16:1:70 ;;
  sameh)  # the gather's constant-H path: its GPU tests, then the gather's configs with it, at the
    # training microbatches (autocast layout) and the kernel-table shapes (bf16), H = 8
    timeout 150 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu \
      -k "same_h or two_pass or pipelined or register_cap or fp32_shared" 2>&1 \
      | tee "$OUT/pytest_sameh.log" | grep -E "passed|failed|Error|^E  " | tail -6
    export MHAR_SWEEP_GATHER=${MHAR_SWEEP_GATHER:-'[[1,2,false,0,true],[1,1,true],[1,1,false],[1,2,false],
      [1,1,false,0,true],[1,2,true]]'}
    sweep_jobs gather 100M-train,350M-train,1B-train:mixed:8:240 100M,350M,1B:bfloat16:8:170 ;;
  aligned)  # the gather's two column tiles of a 160-wide head laid out alike (route_bwd_collect.ALIGN_TILES):
    # its GPU tests and the d = 1280 chain tests, then the gather's configs at 1B with the tiles
    # aligned and (SWEEP_TAG _unaligned) not, at the training microbatch (autocast) and the
    # kernel-table shape (bf16), H = 8
    timeout ${TEST_TIMEOUT:-150} python -m pytest -q -p no:cacheprovider -m gpu tests/gpu \
      -k "${TESTS_K:-aligned or fp32_shared or bf16_stack or bf16_chain or bitwise or same_h}" 2>&1 \
      | tee "$OUT/pytest_aligned.log" | grep -E "passed|failed|Error|^E  " | tail -8
    MHAR_SWEEP_GATHER=${ALIGNED_CONFIGS:-'[[1,1,false],[1,2,false],[1,2,true],[1,2,false,128],[1,4,false]]'} \
      sweep_jobs gather 1B-train:mixed:8:130 1B:bfloat16:8:100
    SWEEP_TAG=_unaligned MHAR_GATHER_ALIGN_TILES=0 MHAR_SWEEP_GATHER=${UNALIGNED_CONFIGS:-'[[1,1,false],[1,2,false]]'} \
      sweep_jobs gather 1B-train:mixed:8:90 1B:bfloat16:8:70 ;;
  gatherprof)  # the 1B gather with its column tiles aligned or not (route_bwd_collect.ALIGN_TILES):
    # triton against triton-unaligned in one process (1B-train autocast; 1B bf16 graph replay,
    # H = 8 and 1), more aligned configs (GATHER_CONFIGS) at 1B-train, then Nsight Compute on
    # one late gather launch per (align, config) in NCU_CASES (align:blockp:warps:prefetch:maxnreg)
    timeout 150 python -m mhar_probe.bench.routing --out "$OUT/bench_train.json" --no-delta --dtype mixed \
      --shapes 1B-train --heads 8 --backends triton,triton-unaligned --repeat 5 2>&1 | grep -v -i warn \
      | tee "$OUT/bench_train.log" | tail -6
    timeout 120 python -m mhar_probe.bench.routing --out "$OUT/bench_table.json" --no-delta \
      --shapes 1B --heads 8,1 --backends triton,triton-unaligned --repeat 5 --graph 2>&1 | grep -v -i warn \
      | tee "$OUT/bench_table.log" | tail -8
    MHAR_SWEEP_GATHER=${GATHER_CONFIGS:-'[[1,1,false],[2,4,false],[2,4,false,128],[1,2,false,96],[2,2,false,128]]'} \
      sweep_jobs gather 1B-train:mixed:8:140
    gather_ncu ;;
  gatherncu)  # META (VARIANTS: triton against them at 350M-train and 1B-train), then gather_ncu
    timeout 150 python -m mhar_probe.bench.routing --out "$OUT/bench_train.json" --no-delta --dtype mixed \
      --shapes 350M-train,1B-train --heads 8 --backends triton${VARIANTS:+,$VARIANTS} --repeat 5 2>&1 \
      | grep -v -i warn | tee "$OUT/bench_train.log" | tail -8
    gather_ncu ;;
  loadsfirst)  # the gather's configs with its q*g loads issued with the dout (sixth entry,
    # route_bwd_collect LOADS_FIRST) against the configs in use: training microbatches (autocast)
    # and kernel-table shapes (bf16), H = 8
    export MHAR_SWEEP_GATHER=${MHAR_SWEEP_GATHER:-'[[1,2,true],[1,2,true,0,false,true],[1,1,true],
      [1,1,true,0,false,true],[1,1,false],[1,1,false,0,false,true],[1,2,false,0,false,true],
      [1,2,false,168,false,true]]'}
    sweep_jobs gather ${LF_JOBS:-100M-train,350M-train,1B-train:mixed:8:300 100M,350M,1B:bfloat16:8:200} ;;
  compare)  # no tests: the kernel table (bf16, graph replay) and the training microbatches (autocast,
    # H = 8), triton against the VARIANTS (default triton-g10), then the interleaved end-to-end
    # table for METHODS (default baseline, mhar and mhar/g10)
    V=${VARIANTS-triton-g10}
    timeout ${TABLE_TIMEOUT:-160} python -m mhar_probe.bench.routing --out "$OUT/bench_table.json" --no-delta \
      --shapes 100M,350M,1B --heads 8,1 --backends triton${V:+,$V} --repeat 5 --graph 2>&1 \
      | grep -v -i warn | tee "$OUT/bench_table.log" | tail -14
    timeout ${TRAINB_TIMEOUT:-130} python -m mhar_probe.bench.routing --out "$OUT/bench_train.json" --no-delta \
      --dtype mixed --shapes 100M-train,350M-train,1B-train --heads 8 --backends triton${V:+,$V} --repeat 5 \
      2>&1 | grep -v -i warn | tee "$OUT/bench_train.log" | tail -8
    run_interleaved "100m:8:2048 350m:4:1024 1b:2:1024" "baseline mhar mhar/g10" 100 ;;
  sweepjobs)  # KIND (fwd, stack, gather, pair_e) swept over JOBS (shapes:dtype:heads:timeout ...);
    # the configs from MHAR_SWEEP_<KIND> (JSON) or the sweep's default list
    sweep_jobs "${KIND:?set KIND}" ${JOBS:?set JOBS} ;;
  check)  # every GPU test, then the routing kernels at the training microbatches (autocast layout,
    # H = 8): triton against the VARIANTS (comma-separated) in one process
    timeout ${TEST_TIMEOUT:-420} python -m pytest -q -p no:cacheprovider -m gpu tests/gpu tests/test_kernels_model.py \
      2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -14
    timeout 220 python -m mhar_probe.bench.routing --out "$OUT/bench_train.json" --no-delta --dtype mixed \
      --shapes 100M-train,350M-train,1B-train --heads 8 --backends triton${VARIANTS:+,$VARIANTS} --repeat 5 \
      2>&1 | grep -v -i warn | tee "$OUT/bench_train.log" | tail -14 ;;
  splitdot)  # every GPU test, then the kernel table (bf16, graph replay): pair_e's three-product
    # TF32 dot for rounded keys against its IEEE dot (triton-eieee)
    timeout ${TEST_TIMEOUT:-420} python -m pytest -q -p no:cacheprovider -m gpu tests/gpu tests/test_kernels_model.py \
      2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -14
    timeout 250 python -m mhar_probe.bench.routing --out "$OUT/bench_table.json" --no-delta \
      --shapes 100M,350M,1B --heads 8,1 --backends triton,triton-eieee --repeat 5 --graph 2>&1 \
      | grep -v -i warn | tee "$OUT/bench_table.log" | tail -16 ;;
  append)  # GPU tests (TESTS, default every one, 420 s), then the kernel table (bf16, graph replay)
    # and the training microbatches (autocast layout, H = 8; profiler kernel sums), triton against
    # the VARIANTS (default: the forward's stored append folded last, and the copy at append)
    V=${VARIANTS-triton-appendlast,triton-copyappend}
    timeout ${TEST_TIMEOUT:-420} python -m pytest -q -p no:cacheprovider -m gpu ${TESTS:-tests/gpu tests/test_kernels_model.py} \
      2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -14
    timeout ${TABLE_TIMEOUT:-250} python -m mhar_probe.bench.routing --out "$OUT/bench_table.json" --no-delta \
      --shapes 100M,350M,1B --heads 8,1 --backends triton${V:+,$V} --repeat 5 --graph 2>&1 \
      | grep -v -i warn | tee "$OUT/bench_table.log" | tail -20
    timeout ${TRAINB_TIMEOUT:-200} python -m mhar_probe.bench.routing --out "$OUT/bench_train.json" --no-delta \
      --dtype mixed --shapes 100M-train,350M-train,1B-train --heads 8 --backends triton${V:+,$V} --repeat 5 \
      2>&1 | grep -v -i warn | tee "$OUT/bench_train.log" | tail -12 ;;
  fla)  # FLA's fused_attnres against triton at H=1, graph replay (carry .whl)
    fla_setup
    timeout ${TABLE_TIMEOUT:-500} python -m mhar_probe.bench.routing --out "$OUT/bench_fla.json" --no-delta \
      --shapes ${SHAPES:-100M,350M,1B} --heads 1 --backends triton$FLA --repeat 5 --graph 2>&1 \
      | grep -v -i warn | tee "$OUT/bench_fla.log" | tail -12 ;;
  final)
    fla_setup
    timeout ${TABLE_TIMEOUT:-560} python -m mhar_probe.bench.routing --out "$OUT/bench_table.json" --no-delta \
      --shapes 100M,350M,1B --heads 8,1 --backends triton${VARIANTS:+,$VARIANTS},eager,compile$FLA --repeat 5 \
      --graph 2>&1 | grep -v -i warn | tee "$OUT/bench_table.log" | tail -30 ;;
  fwdcuts)
    timeout 250 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu tests/test_kernels_model.py \
      2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -14
    timeout 170 python -m mhar_probe.bench.routing --out "$OUT/bench_train_fwd.json" --no-delta --dtype mixed \
      --shapes 100M-train,350M-train,1B-train --heads 8 \
      --backends triton,triton-fwdprev,triton-nofold,triton-eagerscale --repeat 5 2>&1 | grep -v -i warn \
      | tee "$OUT/bench_train_fwd.log" | tail -14
    timeout 150 python -m mhar_probe.bench.routing --out "$OUT/bench_table_fwd.json" --no-delta \
      --shapes 100M,350M,1B --heads 8,1 --backends triton,triton-fwdprev --repeat 5 --graph 2>&1 \
      | grep -v -i warn | tee "$OUT/bench_table_fwd.log" | tail -14 ;;
  twopass)
    MHAR_GATHER_TWO_PASS=1 timeout 120 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu \
      -k "two_pass or collect" 2>&1 | tee "$OUT/pytest_twopass.log" | grep -E "passed|failed|Error|^E  " | tail -8
    export MHAR_SWEEP_GATHER='[[1,2,false],[1,1,true],[1,1,false,0,true],[1,1,false,168,true],[1,1,true,168,true],
      [1,1,false,128,true],[1,2,false,0,true],[1,4,false,0,true]]'
    sweep_jobs gather 100M-train,350M-train,1B-train:mixed:8:230 100M,350M,1B:bfloat16:1:170 ;;
  twopasstable)
    timeout 250 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu tests/test_kernels_model.py \
      2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -14
    timeout ${TABLE_TIMEOUT:-300} python -m mhar_probe.bench.routing --out "$OUT/bench_table.json" --no-delta \
      --shapes 100M,350M,1B --heads 8,1 --backends triton,triton-gatherprev,compile --repeat 5 --graph 2>&1 \
      | grep -v -i warn | tee "$OUT/bench_table.log" | tail -20 ;;
  twopasstrain)
    timeout 110 python -m mhar_probe.bench.routing --out "$OUT/bench_train.json" --no-delta --dtype mixed \
      --shapes 100M-train,350M-train,1B-train --heads 8 --backends triton,triton-gatherprev --repeat 5 2>&1 \
      | grep -v -i warn | tee "$OUT/bench_train.log" | tail -8
    run_interleaved "100m:8:2048 350m:4:1024" "baseline mhar mhar/gatherprev" 200 ;;
  pairewide)
    timeout 130 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu -k "two_pass or collect" 2>&1 \
      | tee "$OUT/pytest_collect.log" | grep -E "passed|failed|Error|^E  " | tail -8
    MHAR_SWEEP_PAIR_E='[[16,16,4],[16,16,8],[32,16,8],[16,32,4]]' timeout 170 python -m mhar_probe.bench.routing \
      --out "$OUT/sweep_paire_h8.json" --no-delta --dtype mixed --heads 8 --sweep 100M-train,350M-train,1B-train \
      --sweep-kernels pair_e --sweep-only --repeat 3 2>&1 | grep -v -i warn | tee "$OUT/sweep_paire_h8.log" | grep SWEEP
    MHAR_KERNEL_CONFIG="$OUT/sweep_paire_h8_tuned.json" timeout 110 python -m mhar_probe.bench.routing \
      --out "$OUT/bench_train.json" --no-delta --dtype mixed --shapes 100M-train,350M-train,1B-train --heads 8 \
      --backends triton,triton-enarrow --repeat 5 2>&1 | grep -v -i warn | tee "$OUT/bench_train.log" | tail -8 ;;
  tests)
    timeout 250 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu tests/test_kernels_model.py \
      2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -14
    timeout 240 python -m pytest -q -p no:cacheprovider tests/test_kernels_collect.py 2>&1 \
      | tee "$OUT/pytest_collect_small.log" | grep -E "passed|failed|Error|^E  " | tail -6 ;;
  profile)
    timeout 400 python benchmarks/profile_train_step.py --presets ${PRESETS:-1b} \
      --methods ${METHODS:-baseline mhar mhar/stackbwd} --steps 6 --show 10 --out "$OUT/profile.json" 2>&1 \
      | grep -v -i warn | tee "$OUT/profile.log" ;;
  collect)  # all GPU tests, then the default backward's kernel table against the earlier one
    timeout 250 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu tests/test_kernels_model.py \
      2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -14
    timeout 240 python -m pytest -q -p no:cacheprovider tests/test_kernels_collect.py 2>&1 \
      | tee "$OUT/pytest_collect_small.log" | grep -E "passed|failed|Error|^E  " | tail -6
    timeout 200 python -m mhar_probe.bench.routing --out "$OUT/bench_collect.json" --no-delta --dtype mixed \
      --shapes 100M-train,350M-train,1B-train --heads 8 --backends triton,triton-stackbwd,triton-bf16dout \
      --repeat 5 2>&1 | grep -v -i warn | tee "$OUT/bench_collect.log" | tail -12 ;;
esac
# the device tool returns a few files only: everything also goes back as one archive (written
# outside $OUT first: tar exits 1, "file changed as we read it", when its archive grows inside
# the folder it reads)
tar czf /tmp/device_run_all.tgz -C "$OUT" . 2>/dev/null && mv /tmp/device_run_all.tgz "$OUT/all.tgz"
