#!/usr/bin/env bash
# One run of the 350M study trained by ONE process across the calls of a warm hold (results/study350m/README.md,
# issue 52), for a machine too small to train a run in the calls that run_on_device.sh's stop-and-resume makes:
# each resume costs 100-130 s of start-up, compilation and checkpoint load and save, and a 1-GPU run of 5,000
# steps has none of that to spare in a 30-minute hold. The trainer is started in a session of its own
# (setsid), which the device leaves running between calls; later calls only watch it and, once it has
# finished (trained, captured, evaluated: device_runs.py's stages in one process), export its part.
# Carry what run_on_device.sh needs (corpus-prose.tar.xz, .mhar-stamp.json, .whl).
#   bash results/study350m/run_detached_on_device.sh [options] start GRID METHOD SEED
#   bash results/study350m/run_detached_on_device.sh [options] watch
# options: --budget S (this call's seconds, default 585: it returns by then, the trainer going on) --nproc N
#   (GPUs, default 1) --study DIR (default /tmp/paper350m) --every S (seconds between progress lines, default 30)
#   and, for the CPU check, --tiny --steps N --roots "DIRS" --unstamped
# start: prepares the corpus (run_on_device.sh prepare: refuses an unstamped tree), starts the trainer detached
#   (device_runs.py --stages sweep capture eval --progress, its log and exit code under STUDY/detached/), then
#   watches. A second start while one trains, or after one finished, is refused: watch it.
# watch: prints the trainer's progress (step, rate, tokens/s, its projected end) every --every s; when the
#   trainer has exited, exports the run to $OUT/part_<GRID_METHOD_SEED>.tar.gz (device_call.py export: every
#   file of the run), packs the trainer's log into $OUT/log_detached.txt.gz and prints the study's table.
#   Exit: the trainer's code once it has exited, 3 while it still trains at the call's end (call watch again).
set -uo pipefail
PYTHON=${PYTHON:-python3}
me=run_detached_on_device.sh
here=$(dirname "$0")
budget=585; nproc=1; study=/tmp/paper350m; every=30; common=(); train_extra=()
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --budget) budget=$2; shift 2;;
    --nproc) nproc=$2; shift 2;;
    --study) study=$2; shift 2;;
    --every) every=$2; shift 2;;
    --tiny) common+=(--tiny); train_extra+=(--tiny); shift;;
    --unstamped) common+=(--unstamped); shift;;
    --roots) common+=(--roots "$2"); shift 2;;
    --steps) train_extra+=(--steps "$2"); shift 2;;
    *) echo "$me: unknown option $1"; exit 2;;
  esac
done
for v in budget nproc every; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$me: --$v wants a positive whole number, got '${!v}'"; exit 2; }
done
[[ $# -eq 4 && $1 == start ]] || [[ $# -eq 1 && $1 == watch ]] || {
  echo "usage: $me [--budget S] [--nproc N] [--study DIR] [--every S] start GRID METHOD SEED | watch"; exit 2; }
start=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export OUT PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 MHAR_CACHE_DIR=${MHAR_CACHE_DIR:-/tmp/mhar-cache} \
  HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
state=$study/detached  # run (its words), started (epoch s), pid, log, exit (the trainer's code, once it exited)

if [[ $1 == start ]]; then
  shift
  if [[ -f $state/run ]]; then
    echo "$me: a detached run was started in this hold already ($(cat "$state/run")): watch it"; exit 2
  fi
  bash "$here/run_on_device.sh" --budget "$budget" "${common[@]}" prepare || { echo "$me: prepare failed"; exit 1; }
  mkdir -p "$state"
  echo "$*" > "$state/run"; date +%s > "$state/started"
  trainer=("$PYTHON"); [[ $nproc -gt 1 ]] && trainer=("$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$nproc")
  # its own session: the device ends a call's processes when the call returns, except those
  setsid bash -c '"$@"; echo $? > "'"$state"'/exit"' trainer "${trainer[@]}" results/study100m/device_runs.py \
    --out "$study" "$@" --stages sweep capture eval --progress "${train_extra[@]}" \
    > "$state/log" 2>&1 < /dev/null &
  echo $! > "$state/pid"
  echo "started the trainer of '$*' (pid $(cat "$state/pid")) $(( $(date +%s) - start )) s into the call"
fi

[[ -f $state/run ]] || { echo "$me: no detached run in $study (start one)"; exit 2; }
read -r -a words < "$state/run"
tag=$(IFS=_; echo "${words[*]}")
began=$(cat "$state/started")

steps_bar='[0-9]+/[0-9]+ \[.*step/s'  # the trainer's bar (the sweep's counts runs)
progress() {  # its last state: "2250/5000 [08:00<09:47,  4.68step/s, loss=2.104, tok_s=137000]"
  local bar
  bar=$(tr '\r' '\n' < "$state/log" 2>/dev/null | grep -E "$steps_bar" | tail -1 \
        | sed -E 's/.*\| *([0-9]+\/[0-9]+ \[)/\1/; s/\x1b\[A//g')
  echo "$(( $(date +%s) - began )) s since start: ${bar:-no step yet}"
}

while [[ ! -f $state/exit ]]; do
  if (( $(date +%s) - start + every + 20 > budget )); then
    progress; echo "still training at this call's end: call '$me watch' again"; exit 3
  fi
  progress; sleep "$every"
done
code=$(cat "$state/exit")
progress; echo "the trainer exited with $code after $(( $(date +%s) - began )) s"
tr '\r' '\n' < "$state/log" | grep -v -E "$steps_bar" | gzip > "$OUT/log_detached.txt.gz"
$PYTHON "$here/device_call.py" export "$study" "$OUT" "$tag" --since "$began"
$PYTHON results/study100m/table.py "$study"
tr '\r' '\n' < "$state/log" | grep -v -i -E "warn|$steps_bar" | tail -15
exit "$code"
