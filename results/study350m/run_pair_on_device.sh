#!/usr/bin/env bash
# Two runs of the 350M study at once, on disjoint GPUs of one machine (results/study350m/README.md, issue 52):
# on a 4-GPU machine each run trains on two GPUs, as the grid's 2-GPU runs do, and the two share the call's
# start-up, corpus build and waiting instead of taking turns. Carry what run_on_device.sh needs.
#   bash results/study350m/run_pair_on_device.sh [options] "RUN_A" "RUN_B"
# RUN: run_on_device.sh's words for one run, its own options first ("--reserve 200 paper350m mhar 0").
# options: --gpus-per-run N (default 2; run A gets GPUs 0..N-1, run B the next N) --budget S (this call's
#   seconds, default 585) --tiny --steps N --roots "DIRS" --unstamped (the CPU check) --study-root DIR (default
#   /tmp/paper350m: each run keeps its own study folder there, named GRID-METHOD-SEED, so the calls of a hold
#   resume it whichever slot it has and the two runs never write one manifest).
# The corpus is prepared once, before the two start (run_on_device.sh prepare); each run then trains,
# is captured, evaluated and exported as run_on_device.sh does, into this call's $OUT (its part named by its
# own words); the two tails are printed last, run A's first, and every log is packed into $OUT/logs_pair.tar.gz
# (the device tool returns at most 8 files: two parts, the corpus lock, the logs and room for a GPU suite's).
set -uo pipefail
per=2; budget=585; common=(); root=/tmp/paper350m
while [[ $# -gt 0 && $1 == --* && $1 != *" "* ]]; do  # (a run spec has spaces)
  case $1 in
    --gpus-per-run) per=$2; shift 2;;
    --budget) budget=$2; shift 2;;
    --tiny|--unstamped) common+=("$1"); shift;;
    --steps|--roots) common+=("$1" "$2"); shift 2;;
    --study-root) root=$2; shift 2;;
    *) echo "run_pair_on_device.sh: unknown option $1"; exit 2;;
  esac
done
[[ $# -eq 2 ]] || { echo "usage: run_pair_on_device.sh [--gpus-per-run N] [--budget S] [--tiny] \"RUN_A\" \"RUN_B\""; exit 2; }
[[ $per =~ ^[1-9][0-9]*$ ]] || { echo "run_pair_on_device.sh: --gpus-per-run wants a positive whole number, got '$per'"; exit 2; }
start=$(date +%s)
here=$(dirname "$0")
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
names=()
for spec in "$1" "$2"; do
  read -r -a words <<< "$spec"; n=${#words[@]}
  [[ $n -ge 3 ]] || { echo "run_pair_on_device.sh: a run is 'GRID METHOD SEED' after its options, got '$spec'"; exit 2; }
  names+=("${words[n-3]}-${words[n-2]}-${words[n-1]}")
done
[[ ${names[0]} != "${names[1]}" ]] || { echo "run_pair_on_device.sh: the two runs are one (${names[0]})"; exit 2; }
bash "$here/run_on_device.sh" --budget "$budget" "${common[@]}" prepare || { echo "prepare failed"; exit 1; }
left=$(( budget - ($(date +%s) - start) ))
pids=()
specs=("$1" "$2")
for i in 0 1; do
  read -r -a words <<< "${specs[i]}"
  gpus=$(seq -s, $(( i * per )) $(( i * per + per - 1 )))
  CUDA_VISIBLE_DEVICES=$gpus bash "$here/run_on_device.sh" --nproc "$per" --budget "$left" "${common[@]}" \
    --study "$root/${names[i]}" "${words[@]}" > "$OUT/pair_${names[i]}.txt" 2>&1 &
  pids+=($!)
done
status=0
for i in 0 1; do wait "${pids[i]}" || status=1; done
for i in 0 1; do echo "== ${names[i]} (GPUs $(( i * per ))-$(( i * per + per - 1 )))"; tail -32 "$OUT/pair_${names[i]}.txt"; done
# the device tool brings back at most 8 files of $OUT: the logs go back as one archive beside the parts
(cd "$OUT" && tar czf logs_pair.tar.gz ./*.txt && rm -f ./*.txt)
echo "pair done in $(( $(date +%s) - start )) s; in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
exit $status
