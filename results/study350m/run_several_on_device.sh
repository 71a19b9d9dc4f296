#!/usr/bin/env bash
# Several runs of the 350M study at once, on disjoint GPUs of one machine (results/study350m/README.md, issue 52):
# on a 4-GPU machine two runs of two GPUs each (on an 8-GPU machine four), as the grid's 2-GPU runs train, sharing
# the call's start-up, corpus build and waiting instead of taking turns. Carry what run_on_device.sh needs.
#   bash results/study350m/run_several_on_device.sh [options] "RUN_1" "RUN_2" [...]
# RUN: run_on_device.sh's words for one run, its own options first ("--reserve 200 paper350m mhar 0").
# options: --gpus-per-run N (default 2; run k gets GPUs (k-1)N..kN-1) --budget S (this call's seconds, default
#   585) --tiny --steps N --roots "DIRS" --unstamped (the CPU check) --study-root DIR (default /tmp/paper350m:
#   each run keeps its own study folder there, named GRID-METHOD-SEED, so the calls of a hold resume it
#   whichever slot it has and no two runs write one manifest).
# The corpus is prepared once, before the runs start (run_on_device.sh prepare); each run then trains, is
# captured, evaluated and exported as run_on_device.sh does, into this call's $OUT (its part named by its own
# words); the tails are printed last in the order given, and every log is packed into $OUT/logs_runs.tar.gz
# (the device tool returns at most 8 files: the parts, the corpus lock, the logs and room for a GPU suite's).
set -uo pipefail
per=2; budget=585; common=(); root=/tmp/paper350m; tiny=0
me=run_several_on_device.sh
while [[ $# -gt 0 && $1 == --* && $1 != *" "* ]]; do  # (a run spec has spaces)
  case $1 in
    --gpus-per-run) per=$2; shift 2;;
    --budget) budget=$2; shift 2;;
    --tiny) common+=("$1"); tiny=1; shift;;
    --unstamped) common+=("$1"); shift;;
    --steps|--roots) common+=("$1" "$2"); shift 2;;
    --study-root) root=$2; shift 2;;
    *) echo "$me: unknown option $1"; exit 2;;
  esac
done
[[ $# -ge 2 && $# -le 5 ]] || { echo "usage: $me [--gpus-per-run N] [--budget S] [--tiny] \"RUN_1\" \"RUN_2\" [...] (2 to 5 runs: the device returns 8 files)"; exit 2; }
[[ $per =~ ^[1-9][0-9]*$ ]] || { echo "$me: --gpus-per-run wants a positive whole number, got '$per'"; exit 2; }
start=$(date +%s)
here=$(dirname "$0")
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
specs=("$@"); names=()
for spec in "${specs[@]}"; do
  read -r -a words <<< "$spec"; n=${#words[@]}
  [[ $n -ge 3 ]] || { echo "$me: a run is 'GRID METHOD SEED' after its options, got '$spec'"; exit 2; }
  name="${words[n-3]}-${words[n-2]}-${words[n-1]}"
  for seen in "${names[@]}"; do [[ $seen != "$name" ]] || { echo "$me: a run is given twice ($name)"; exit 2; }; done
  names+=("$name")
done
if (( ! tiny )) && command -v nvidia-smi > /dev/null; then  # enough GPUs for every run
  have=$(nvidia-smi -L | wc -l)
  (( ${#specs[@]} * per <= have )) || { echo "$me: ${#specs[@]} runs of $per GPUs need $(( ${#specs[@]} * per )); this machine has $have"; exit 2; }
fi
bash "$here/run_on_device.sh" --budget "$budget" "${common[@]}" prepare || { echo "prepare failed"; exit 1; }
left=$(( budget - ($(date +%s) - start) ))
pids=()
for i in "${!specs[@]}"; do
  read -r -a words <<< "${specs[i]}"
  gpus=$(seq -s, $(( i * per )) $(( i * per + per - 1 )))
  CUDA_VISIBLE_DEVICES=$gpus bash "$here/run_on_device.sh" --nproc "$per" --budget "$left" "${common[@]}" \
    --study "$root/${names[i]}" "${words[@]}" > "$OUT/runs_${names[i]}.txt" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
for i in "${!specs[@]}"; do
  echo "== ${names[i]} (GPUs $(( i * per ))-$(( i * per + per - 1 )))"; tail -32 "$OUT/runs_${names[i]}.txt"
done
(cd "$OUT" && tar czf logs_runs.tar.gz ./*.txt && rm -f ./*.txt)
echo "runs done in $(( $(date +%s) - start )) s; in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
exit $status
