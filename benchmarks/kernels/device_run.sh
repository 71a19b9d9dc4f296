#!/usr/bin/env bash
# The routing benchmark on one GPU machine, one case per call of the device tool (10 min each):
#   bash benchmarks/kernels/device_run.sh tests           every GPU test (stacks with and without the sites'
#                                                         parameters), then the CPU collect tests (no timing)
#   bash benchmarks/kernels/device_run.sh table           every GPU test, then the kernel table against compile
#                                                         and FLA (H=1; carry .whl with its wheel), graph replay
#   VARIANTS=.. bash benchmarks/kernels/device_run.sh final   the whole kernel table in one run: triton (and
#                                                         the VARIANTS, comma-separated), eager, compile and
#                                                         FLA (H=1; carry .whl with its wheel), graph replay
#                                                         (SHAPES, HEADS: a part of it, e.g. SHAPES=1B HEADS=1)
#   VARIANTS=.. bash benchmarks/kernels/device_run.sh check   every GPU test, then triton against the VARIANTS at
#                                                         the training microbatches (routing kernels, H = 8)
#   VARIANT=.. bash benchmarks/kernels/device_run.sh train   autocast-layout kernel table at the training
#                                                         microbatches, triton against triton-$VARIANT (storage-douts)
#   VARIANTS=.. bash benchmarks/kernels/device_run.sh compare   no tests: kernel table and training
#                                                         microbatches (triton against VARIANTS)
# (End-to-end training throughput and its profile: benchmarks/train_throughput/run_on_device.sh.)
#   bash benchmarks/kernels/device_run.sh host            host time per routing call, Triton's launch
#                                                         path against the direct launches (cProfile)
#   OLD=dir bash benchmarks/kernels/device_run.sh host-ab  host time per routing call against an older tree
#   bash benchmarks/kernels/device_run.sh ncu             Nsight Compute counters of the three kernels at
#                                                         the 1B and 100M training shapes (ncu_routing.py)
#   NCU_CASES=.. bash benchmarks/kernels/device_run.sh gatherncu   Nsight Compute on one late 1B-train gather
#                                                         launch per gather launch-table row
#   SHAPES=.. KERNELS=.. bash benchmarks/kernels/device_run.sh sweep   launch configs with register caps
#                                                         (DTYPE=mixed, HEADS=8 by default)
#   bash benchmarks/kernels/device_run.sh sweeps          fp32 GPU tests, then the forward's configs at the
#                                                         kernel-table shapes (bf16, H=1) and the training
#                                                         microbatches (H=8), and pair_e's
#   KIND=.. JOBS=.. bash benchmarks/kernels/device_run.sh sweepjobs   one kernel's configs over sweep jobs
#   KINDS=.. BUDGET_S=.. bash benchmarks/kernels/device_run.sh launchsweep   launch_sweep.py: the fold-block
#                                                         backward's probes (per-kernel split, bf16 douts, the
#                                                         gather backward), then a card's gather (and fwd) rows
#   AS_CARD=.. bash benchmarks/kernels/device_run.sh cardtests   the kernel GPU tests under the built-in rows of
#                                                         AS_CARD (its name), on whatever card runs them
#   bash benchmarks/kernels/device_run.sh paire           the kernel GPU tests, then pair_e's split TF32 dot
#                                                         against its IEEE dot (pair_e_dot.py)
#   bash benchmarks/kernels/device_run.sh adopt           ONE call: the card's gather and forward rows swept, those
#                                                         winning by > 2% made its built-in rows (adopt_rows.py),
#                                                         then the kernel GPU tests under them
#   bash benchmarks/kernels/device_run.sh foldsweep       ONE call (<= 300 s on an H100): at the training
#                                                         microbatches the gather backward, today's fold and the
#                                                         fold kernel's own rows swept (two sources per reader
#                                                         iteration, prefetch 2), a TABLE last; the fold rows in
#                                                         $OUT/launch_tables_fold.json
#   BASE=exp_base BASE_COMMIT=... bash benchmarks/kernels/device_run.sh foldab
#                                                         ONE call (~100 s): two trees' fold kernels at the card's rows,
#                                                         four processes alternated (base, this tree, base, this tree;
#                                                         launch_sweep.py's probe:fold at the training microbatches);
#                                                         BASE holds the base commit's mhar_probe (`git archive
#                                                         BASE_COMMIT mhar_probe | tar -x -C exp_base`, untracked, so
#                                                         it travels; delete it after). Files
#                                                         $OUT/${PREFIX}_ab_{base,$VARIANT}_{1,2}.json, the table:
#                                                         fold_rows_table.py dense / merge
#   BASE=exp_base BASE_COMMIT=... bash benchmarks/kernels/device_run.sh fwdab
#                                                         ONE call (~400 s): two trees' forwards (the lookahead's
#                                                         pairs) at the training microbatches, four processes: the
#                                                         base tree, then this one, each timing the card's row and
#                                                         ROWS_FWD (BUDGET_S each), then each the card's row alone
#                                                         again. BASE as for foldab. Files
#                                                         $OUT/${PREFIX}_ab_{base,$VARIANT}_{1,2}.json
#   bash benchmarks/kernels/device_run.sh fla             FLA's fused_attnres against triton, H=1, graph
#                                                         replay (carry .whl with its wheel)
# Sweeps write launch-table files (*_tuned.json, mhar_probe/kernels/launch_tables.py's format);
# `--launch-table FILE` runs the benchmark with one. MHAR_SWEEP_<KIND> (a JSON list of launch-table
# rows) replaces a kind's sweep list. The cases of earlier sessions that timed variants since
# deleted are in git history (mhar_probe/kernels/README.md, "Deleted variants").
# (FLA's fused_attnres runs when its wheel is installed: pip install --no-deps fla_core-*.whl, and
# `fla` is added to --backends.) Writes everything under $OUT (default /tmp/out). Set COMMIT to the
# commit sent (`COMMIT=$(git rev-parse --short HEAD)` here): the JSON records it. The warning filters
# are line-buffered: a call cut by its time limit keeps in its logs every line printed before the cut
# (a block-buffered grep held a whole H = 1 table call's output on 2026-12-07, and lost it).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# COMMIT: the commit of the tree sent (the GPU machine's copy has no .git), recorded in the JSON
COMMIT_ARG=${COMMIT:+--commit $COMMIT}
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}. PYTHONUNBUFFERED=1 MHAR_GPU_RESULTS=$OUT/gpu_results.jsonl
python -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
sweep_jobs() {  # $1 kernel kind, then jobs shapes:dtype:heads:timeout -> $OUT/sweep_<kind>_<dtype>_h<heads>$SWEEP_TAG.*
  local kind=$1 job shapes dtype heads limit
  shift
  for job in "$@"; do
    IFS=: read -r shapes dtype heads limit <<< "$job"
    timeout "$limit" python -m mhar_probe.cli bench routing $COMMIT_ARG --out "$OUT/sweep_${kind}_${dtype}_h$heads$SWEEP_TAG.json" \
      --no-delta --dtype "$dtype" --heads "$heads" --sweep "$shapes" --sweep-kernels "$kind" --sweep-only \
      --repeat 3 2>&1 | grep --line-buffered -v -i warn | tee "$OUT/sweep_${kind}_${dtype}_h$heads$SWEEP_TAG.log" | grep SWEEP
  done
}
gather_ncu() {  # Nsight Compute on one late 1B-train gather launch per case of NCU_CASES
  # (blockp:warps:prefetch:maxnreg:loads_first, a gather launch-table row for 1B-train per case)
  local case bp warps pre cap first tag
  for case in ${NCU_CASES:-1:2:0:0:1 1:1:0:0:1 1:1:0:0:0}; do
    IFS=: read -r bp warps pre cap first <<< "$case"
    tag=${case//:/_}
    echo "{\"gather\": [[1280, 8, 8, 4, $bp, $warps, $pre, $cap, $first]]}" > "$OUT/cfg_$tag.json"
    timeout 85 ncu --clock-control none \
      --profile-from-start off -k "regex:stack_gather" --launch-skip 40 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio,dram__bytes.sum.per_second,lts__t_bytes.sum.per_second,l1tex__t_bytes.sum.per_second" \
      --csv --page details python benchmarks/kernels/ncu_routing.py --shape 1B-train --heads 8 --dtype mixed \
      --launch-table "$OUT/cfg_$tag.json" > "$OUT/ncu_gather_$tag.csv" 2> "$OUT/ncu_gather_$tag.err"
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
    echo "no FLA wheel under .whl/ (benchmarks/device_wheels.py --fla, then carry .whl): FLA is not timed"
  fi
}
as_card() {  # $1: a card's name; lays its built-in rows over this card's entry in this copy's table
  # (launch-table rows are launch configurations: their correctness is the same on any sm_90 card)
  python - "$1" <<'PY'
import json, sys
import torch
sys.path.insert(0, "benchmarks/kernels")
from adopt_rows import copy_card, format_table
from mhar_probe.kernels.launch_tables import BUILTIN
here = torch.cuda.get_device_name()
BUILTIN.write_text(format_table(copy_card(json.loads(BUILTIN.read_text()), sys.argv[1], here)))
print(f"kernel tests under the built-in rows of {sys.argv[1]}, on {here}")
PY
}
case "${1:-tests}" in
  tests)
    timeout 250 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu tests/test_kernels_model.py \
      2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -14
    timeout 240 python -m pytest -q -p no:cacheprovider tests/test_kernels_collect.py 2>&1 \
      | tee "$OUT/pytest_collect_small.log" | grep -E "passed|failed|Error|^E  " | tail -6 ;;
  table)
    fla_setup
    timeout 250 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu tests/test_kernels_model.py \
      2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -14
    timeout ${TABLE_TIMEOUT:-320} python -m mhar_probe.cli bench routing $COMMIT_ARG --out "$OUT/bench_table.json" --no-delta \
      --shapes 100M,350M,1B --heads 1,8 --backends triton,compile$FLA --repeat 5 --graph 2>&1 \
      | grep --line-buffered -v -i warn | tee "$OUT/bench_table.log" | tail -16 ;;
  final)
    fla_setup
    timeout ${TABLE_TIMEOUT:-560} python -m mhar_probe.cli bench routing $COMMIT_ARG --out "$OUT/bench_table.json" --no-delta \
      --shapes ${SHAPES:-100M,350M,1B} --heads ${HEADS:-8,1} --backends triton${VARIANTS:+,$VARIANTS},eager,compile$FLA \
      --repeat 5 --graph 2>&1 | grep --line-buffered -v -i warn | tee "$OUT/bench_table.log" | tail -30 ;;
  check)  # every GPU test, then the routing kernels at the training microbatches (autocast layout,
    # H = 8): triton against the VARIANTS (comma-separated) in one process
    timeout ${TEST_TIMEOUT:-420} python -m pytest -q -p no:cacheprovider -m gpu tests/gpu tests/test_kernels_model.py \
      2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -14
    timeout 220 python -m mhar_probe.cli bench routing $COMMIT_ARG --out "$OUT/bench_train.json" --no-delta --dtype mixed \
      --shapes 100M-train,350M-train,1B-train --heads 8 --backends triton${VARIANTS:+,$VARIANTS} --repeat 5 \
      2>&1 | grep --line-buffered -v -i warn | tee "$OUT/bench_train.log" | tail -14 ;;
  train)  # PRESETS (default: all three) as preset:batch:seq; VARIANT (default storage-douts)
    V=${VARIANT:-storage-douts}
    timeout 150 python -m mhar_probe.cli bench routing $COMMIT_ARG --out "$OUT/bench_train.json" --no-delta --dtype mixed \
      --shapes 100M-train,350M-train,1B-train --heads 8 --backends triton,triton-$V \
      --repeat 5 2>&1 | grep --line-buffered -v -i warn | tee "$OUT/bench_train.log" | tail -12 ;;
  compare)  # no tests: the kernel table (bf16, graph replay) and the training microbatches (autocast,
    # H = 8), triton against the VARIANTS (default triton-storage-douts), then the interleaved end-to-end
    # table for METHODS (default baseline, mhar and mhar/storage-douts)
    V=${VARIANTS-triton-storage-douts}
    timeout ${TABLE_TIMEOUT:-160} python -m mhar_probe.cli bench routing $COMMIT_ARG --out "$OUT/bench_table.json" --no-delta \
      --shapes 100M,350M,1B --heads 8,1 --backends triton${V:+,$V} --repeat 5 --graph 2>&1 \
      | grep --line-buffered -v -i warn | tee "$OUT/bench_table.log" | tail -14
    timeout ${TRAINB_TIMEOUT:-130} python -m mhar_probe.cli bench routing $COMMIT_ARG --out "$OUT/bench_train.json" --no-delta \
      --dtype mixed --shapes 100M-train,350M-train,1B-train --heads 8 --backends triton${V:+,$V} --repeat 5 \
      2>&1 | grep --line-buffered -v -i warn | tee "$OUT/bench_train.log" | tail -8 ;;
  host)
    timeout 60 python benchmarks/kernels/host_overhead.py --shape 100M --heads 8 --out "$OUT/host_100M.json" \
      2>&1 | tail -1 ;;
  host-ab)  # host time per routing call, this tree against OLD (a copy of an earlier mhar_probe/,
    # carried to the device), alternated process by process (this VM's host speed drifts)
    for round in 1 2 3; do
      for arm in old new; do
        if [ "$arm" = old ]; then pp="$OLD"; else pp=.; fi
        PYTHONPATH="$pp" timeout 80 python benchmarks/kernels/host_overhead.py --shape 100M --heads 8 --rounds 2 \
          --out "$OUT/host_${arm}_$round.json" 2>&1 | grep "HOST.*direct" | sed "s/^/$arm round $round: /"
      done
    done ;;
  ncu)  # kernel filter : launches to skip : launches to profile, per shape (late calls: many sources)
    SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats
      --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis"
    METRICS="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio,dram__bytes.sum.per_second,lts__t_bytes.sum.per_second,l1tex__t_bytes.sum.per_second,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_elapsed"
    # the model's (collect) backward's kernels; JOBS= overrides
    for job in ${JOBS:-1B-train:route_fwd:60:2 1B-train:stack_gather:12:2 1B-train:pair_e:1:1 \
               100M-train:route_fwd:20:1 100M-train:stack_gather:4:1 100M-train:pair_e:1:1}; do
      IFS=: read -r shape kern skip count <<< "$job"
      timeout 85 ncu --clock-control none --profile-from-start off -k "regex:$kern" --launch-skip "$skip" \
        --launch-count "$count" $SECTIONS $METRICS --csv --page details \
        python benchmarks/kernels/ncu_routing.py --shape "$shape" --heads 8 --dtype mixed \
        > "$OUT/ncu_${shape}_${kern}_$skip.csv" 2> "$OUT/ncu_${shape}_${kern}_$skip.err"
      echo "$shape $kern $skip: rc $? ($(wc -l < "$OUT/ncu_${shape}_${kern}_$skip.csv") csv lines)"; tail -2 "$OUT/ncu_${shape}_${kern}_$skip.err"
    done
    python benchmarks/kernels/ncu_routing.py --summarise "$OUT"/ncu_*.csv --out "$OUT/ncu_summary.json" ;;
  gatherncu)  # Nsight Compute on one late 1B-train gather launch per NCU_CASES row
    gather_ncu ;;
  sweep)  # launch configs incl. register caps: SHAPES (default 1B-train), KERNELS (default fwd,gather; fold: the fold kernel's own rows)
    timeout 60 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu -k register_cap 2>&1 \
      | tee "$OUT/pytest_regcap.log" | grep -E "passed|failed|Error|^E  " | tail -4
    timeout 500 python -m mhar_probe.cli bench routing $COMMIT_ARG --out "$OUT/sweep.json" --no-delta --dtype ${DTYPE:-mixed} \
      --heads ${HEADS:-8} \
      --sweep "${SHAPES:-1B-train}" --sweep-kernels "${KERNELS:-fwd,gather}" --sweep-only --repeat 3 2>&1 \
      | grep --line-buffered -v -i warn | tee "$OUT/sweep.log" | grep SWEEP ;;
  sweeps)
    timeout 60 python -m pytest -q -p no:cacheprovider -m gpu tests/gpu -k fp32 2>&1 \
      | tee "$OUT/pytest_fp32.log" | grep -E "passed|failed|Error|^E  " | tail -6
    sweep_jobs fwd 100M,350M,1B:bfloat16:1:150 100M-train,350M-train,1B-train:mixed:8:170
    sweep_jobs pair_e 100M-train,350M-train,1B-train:mixed:8:130 ;;
  launchsweep)  # launch_sweep.py: probes (fold, fold with bf16 douts, gather backward: per-kernel split),
    # then the KINDS rows (default gather) at SHAPES (default the training microbatches), within BUDGET_S
    timeout ${SWEEP_TIMEOUT:-345} python benchmarks/kernels/launch_sweep.py $COMMIT_ARG --kinds ${KINDS:-gather} \
      --shapes ${SHAPES:-1B-train,350M-train,100M-train} --budget-s ${BUDGET_S:-120} ${NO_PROBES:+--no-probes} \
      --out "$OUT/launch_sweep.json" --table-out "$OUT/launch_tables_tuned.json" 2>&1 | grep --line-buffered -v -i warn \
      | tee "$OUT/launch_sweep.log" | grep -E "probe|chose|budget|Error" ;;
  cardtests)  # the kernel GPU tests (4 processes) under the built-in rows of AS_CARD (default: this card's),
    # whatever card runs them; the copy's table is restored afterwards. File: pytest.log
    cp mhar_probe/kernels/launch_tables.json /tmp/launch_tables.orig.json
    if [ -n "${AS_CARD:-}" ] && ! as_card "$AS_CARD"; then exit 2; fi
    timeout ${TEST_TIMEOUT:-230} python -m pytest -q -n 4 -p no:cacheprovider -m gpu tests/gpu/test_kernels_gpu.py \
      tests/test_kernels_model.py 2>&1 | tee "$OUT/pytest.log" | grep -E "passed|failed|Error|^E  " | tail -14
    cp /tmp/launch_tables.orig.json mhar_probe/kernels/launch_tables.json ;;
  paire)  # the kernel GPU tests (4 processes, pytest.log), then pair_e's split TF32 dot over the bf16
    # buffer against its IEEE dot at the training microbatches (pair_e_dot.py -> pair_e_dot.json)
    timeout ${TEST_TIMEOUT:-300} python -m pytest -v -n 4 -p no:cacheprovider -m gpu tests/gpu/test_kernels_gpu.py \
      tests/test_kernels_model.py > "$OUT/pytest.log" 2>&1; grep -E "passed|failed|Error|^E  " "$OUT/pytest.log" | tail -14
    timeout ${PAIRE_TIMEOUT:-200} python benchmarks/kernels/pair_e_dot.py $COMMIT_ARG --out "$OUT/pair_e_dot.json" 2>&1 \
      | grep --line-buffered -v -i warn | tee "$OUT/pair_e_dot.log" | tail -6 ;;
  adopt)  # ONE call (<= 580 s): the card's gather and forward rows swept at the training microbatches
    # (launch_sweep.py, KINDS default gather,fwd, no probes, BUDGET_S; ROWS_FWD: a JSON list of forward rows
    # instead of the sweep's list), the rows that beat the card's by more than 2% made its built-in rows in
    # this copy (adopt_rows.py), then the kernel GPU tests under them (TESTS_K: only those pytest -k selects).
    # Files: launch_sweep.json, adopt.log, launch_tables.json (the built-in table with them), pytest.log
    timeout ${SWEEP_TIMEOUT:-320} python benchmarks/kernels/launch_sweep.py $COMMIT_ARG --kinds ${KINDS:-gather,fwd} \
      --shapes ${SHAPES:-1B-train,350M-train,100M-train} --budget-s ${BUDGET_S:-240} --no-probes \
      ${ROWS_FWD:+--rows-fwd "$ROWS_FWD"} --out "$OUT/launch_sweep.json" --table-out "$OUT/launch_tables_tuned.json" \
      2>&1 | grep --line-buffered -v -i warn | tee "$OUT/launch_sweep.log" | grep -E "sweep:|chose|budget|Error" | cut -c1-150
    python benchmarks/kernels/adopt_rows.py "$OUT/launch_sweep.json" 2>&1 | tee "$OUT/adopt.log"
    cp mhar_probe/kernels/launch_tables.json "$OUT/launch_tables.json"
    timeout ${TEST_TIMEOUT:-230} python -m pytest -q -n 4 -p no:cacheprovider -m gpu tests/gpu/test_kernels_gpu.py \
      tests/test_kernels_model.py ${TESTS_K:+-k "$TESTS_K"} 2>&1 | tee "$OUT/pytest.log" \
      | grep -E "passed|failed|Error|^E  " | tail -14 ;;
  foldsweep)  # launch_sweep.py --kinds fold: per shape (default the training microbatches, 1B first) the
    # probes fold (built-in rows: today's fold) and gather-backward, then the fold kind's rows (the built-in
    # row, then two sources, prefetch 2, both, the other warp count, ...) judged by stack_fold's device time
    # and checked against today's gradients; no row starts after DEADLINE_S; the closing TABLE (gather
    # backward / today's fold / the tuned fold, stack_gather + stack_fold ms) is printed last, also from the
    # JSON if the time limit cut the sweep. Files: fold_sweep.json (rows, summary), launch_tables_fold.json.
    # SWEEP_ARGS: more launch_sweep.py arguments (on the CPU: --fold-calls 2 --heads 2 --repeat 1 --dtype float32);
    # ROWS_FOLD: a JSON list of fold rows to try after the built-in one (launch_sweep.py --rows-fold)
    timeout ${SWEEP_TIMEOUT:-255} python benchmarks/kernels/launch_sweep.py $COMMIT_ARG --kinds fold \
      --probes fold,gather-backward --shapes ${SHAPES:-1B-train,350M-train,100M-train} \
      --budget-s ${BUDGET_S:-150} --deadline-s ${DEADLINE_S:-220} $SWEEP_ARGS ${ROWS_FOLD:+--rows-fold "$ROWS_FOLD"} \
      --out "$OUT/fold_sweep.json" --table-out "$OUT/launch_tables_fold.json" 2>&1 | grep --line-buffered -v -i warn \
      | tee "$OUT/fold_sweep.log" | grep -E "probe|sweep:|chose|budget|deadline|Error|^TABLE"
    if ! grep -q "^TABLE" "$OUT/fold_sweep.log" && [ -f "$OUT/fold_sweep.json" ]; then
      echo "(cut short: the table of what ran)"
      timeout 20 python benchmarks/kernels/launch_sweep.py --summarise "$OUT/fold_sweep.json"
    fi ;;
  foldab)  # the header: BASE, BASE_COMMIT, COMMIT, PREFIX (default ${TAG:-h100}_fold), VARIANT (default variant)
    if [ ! -d "${BASE:-}/mhar_probe" ]; then echo "foldab: BASE must name a directory holding the base tree's mhar_probe" >&2; exit 2; fi
    for i in 1 2; do for arm in base ${VARIANT:-variant}; do
      if [ $arm = base ]; then pp=$(cd "$BASE" && pwd):$PWD; commit=${BASE_COMMIT:-base}; else pp=$PWD; commit=${COMMIT:-}; fi
      PYTHONPATH=$pp timeout 80 python benchmarks/kernels/launch_sweep.py --commit "$commit" --kinds "" --probes fold \
        --shapes ${SHAPES:-1B-train,350M-train,100M-train} --out "$OUT/${PREFIX:-${TAG:-h100}_fold}_ab_${arm}_$i.json" \
        --table-out "/tmp/foldab_${arm}_$i.json" 2>&1 | grep -E "probe|Error" | cut -c1-110
    done; done ;;
  fwdab)  # the header: BASE, BASE_COMMIT, COMMIT, PREFIX (default ${TAG:-h100}_fwd), VARIANT (default variant)
    if [ ! -d "${BASE:-}/mhar_probe" ]; then echo "fwdab: BASE must name a directory holding the base tree's mhar_probe" >&2; exit 2; fi
    fwd_arm() {  # $1 arm, $2 JSON rows after the card's, $3 budget (s), $4 process number
      local pp=$PWD commit=${COMMIT:-}
      if [ "$1" = base ]; then pp=$(cd "$BASE" && pwd):$PWD; commit=${BASE_COMMIT:-base}; fi
      PYTHONPATH=$pp timeout $(( $3 + 90 )) python benchmarks/kernels/launch_sweep.py --commit "$commit" --kinds fwd \
        --no-probes --rows-fwd "$2" --budget-s "$3" --shapes ${SHAPES:-1B-train,350M-train,100M-train} $SWEEP_ARGS \
        --out "$OUT/${PREFIX:-${TAG:-h100}_fwd}_ab_$1_$4.json" --table-out "/tmp/fwdab_$1_$4.json" 2>&1 \
        | grep -E "chose|budget|Error" | cut -c1-130
    }
    fwd_arm base "${ROWS_FWD:-[]}" ${BUDGET_S:-120} 1; fwd_arm ${VARIANT:-variant} "${ROWS_FWD:-[]}" ${BUDGET_S:-120} 1
    fwd_arm base "[]" 30 2; fwd_arm ${VARIANT:-variant} "[]" 30 2 ;;
  sweepjobs)  # KIND (fwd, stack, gather, pair_e) swept over JOBS (shapes:dtype:heads:timeout ...);
    # the configs from MHAR_SWEEP_<KIND> (JSON) or the sweep's default list
    sweep_jobs "${KIND:?set KIND}" ${JOBS:?set JOBS} ;;
  fla)  # FLA's fused_attnres against triton at H=1, graph replay (carry .whl)
    fla_setup
    timeout ${TABLE_TIMEOUT:-500} python -m mhar_probe.cli bench routing $COMMIT_ARG --out "$OUT/bench_fla.json" --no-delta \
      --shapes ${SHAPES:-100M,350M,1B} --heads 1 --backends triton$FLA --repeat 5 --graph 2>&1 \
      | grep --line-buffered -v -i warn | tee "$OUT/bench_fla.log" | tail -12 ;;
esac
# the device tool returns a few files only: everything also goes back as one archive (written
# outside $OUT first: tar exits 1, "file changed as we read it", when its archive grows inside
# the folder it reads)
tar czf /tmp/device_run_all.tgz -C "$OUT" . 2>/dev/null && mv /tmp/device_run_all.tgz "$OUT/all.tgz"
