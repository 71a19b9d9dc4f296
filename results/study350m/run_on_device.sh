#!/usr/bin/env bash
# One device call of the 350M study (results/study350m/README.md, issue 52). Carry corpus-prose.tar.xz (the prose
# sources of the registry corpus, `mhar corpus build --sources ...` then `mhar corpus pack`), .mhar-stamp.json (`python -m mhar_probe.provenance stamp`, just before the call) and
# .whl (h5netcdf, the LM Evaluation Harness and their dependencies, installed into /tmp/site beside the project).
#   bash results/study350m/run_on_device.sh [options] prepare
#   bash results/study350m/run_on_device.sh [options] GRID METHOD SEED     (GRID: paper350m | paper350m-extra)
# options: --nproc N (GPUs, default 4) --budget S (this call's seconds, default 560) --reserve S (left after
#   training for capture, evaluation and export, default 200) --roots "DIR ..." --new-manifest --tiny (a CPU
#   stand-in: tiny model and corpus) --steps N (the CPU check's short runs) --study DIR (the study folder on the
#   machine, default /tmp/paper350m: kept between the calls of a hold) --unstamped (the CPU check only)
# prepare (also the first step of a training call): refuses an unstamped tree, builds corpus350/ from this
# machine's text and the carried corpus against the lock (results/study350m/device_call.py), kept for later calls
# of the same hold; its lock lands in $OUT/corpus_lock.tar.gz. GRID METHOD SEED: trains that run under torchrun
# (DDP; the global batch, data order and schedule are the plan's) until --reserve s before --budget, stopping
# with a checkpoint in /tmp/paper350m that the next call of the hold resumes; a finished run is captured and
# evaluated (one process), exported to $OUT/part_<args>.tar.gz, and a table of the study's runs is printed last.
set -uo pipefail
PYTHON=${PYTHON:-python3}
nproc=4; budget=560; reserve=200; roots=(); extra=(); tiny=(); steps=(); study=/tmp/paper350m
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --nproc) nproc=$2; shift 2;;
    --budget) budget=$2; shift 2;;
    --reserve) reserve=$2; shift 2;;
    --roots) read -r -a roots <<< "$2"; shift 2;;
    --new-manifest) extra+=(--new-manifest); shift;;
    --unstamped) extra+=(--unstamped); shift;;
    --tiny) tiny=(--tiny); shift;;
    --steps) steps=(--steps "$2"); shift 2;;
    --study) study=$2; shift 2;;
    *) echo "run_on_device.sh: unknown option $1"; exit 2;;
  esac
done
[[ $# -eq 1 && $1 == prepare ]] || [[ $# -eq 3 ]] || {
  echo "usage: run_on_device.sh [--nproc N] [--budget S] [--reserve S] [--roots DIRS] [--tiny] prepare | GRID METHOD SEED"; exit 2; }
[[ $nproc =~ ^[1-9][0-9]*$ ]] || { echo "run_on_device.sh: --nproc wants a positive whole number, got '$nproc'"; exit 2; }
start=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export OUT PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 MHAR_CACHE_DIR=${MHAR_CACHE_DIR:-/tmp/mhar-cache} \
  HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
if compgen -G ".whl/*.whl" > /dev/null; then  # once a hold (a marker names the wheels): the runs of one
  wheels=$(ls -l .whl/*.whl | md5sum | cut -c1-32)  # call (run_several_on_device.sh) must not reinstall under each other
  if [[ $(cat /tmp/site/.mhar-wheels 2>/dev/null) != "$wheels" ]]; then
    $PYTHON -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || { echo "wheel install failed"; exit 1; }
    echo "$wheels" > /tmp/site/.mhar-wheels
  fi
fi
tag=$(IFS=_; echo "$*")${tiny:+_tiny}; log=$OUT/log_$tag.txt
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU"
  $PYTHON -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; } > "$log" 2>&1
roots_arg=(); [[ ${#roots[@]} -gt 0 ]] && roots_arg=(--roots "${roots[@]}")
$PYTHON results/study350m/device_call.py prepare "${roots_arg[@]}" "${extra[@]}" "${tiny[@]}" 2>&1 | tee -a "$log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "prepare failed"; exit 1; }
[[ $1 == prepare ]] && { echo "prepared in $(( $(date +%s) - start )) s"; exit 0; }
trainer=($PYTHON); [[ $nproc -gt 1 ]] && trainer=($PYTHON -m torch.distributed.run --standalone --nproc_per_node "$nproc")
stamp=$(date +%s)
left=$(( budget - reserve - ($(date +%s) - start) ))
if [[ $left -gt 10 ]]; then
  timeout --signal=INT $(( left + 90 )) "${trainer[@]}" results/study100m/device_runs.py --out "$study" "$@" \
    --stages sweep --time-limit "$left" "${tiny[@]}" "${steps[@]}" >> "$log" 2>&1
  echo "sweep exit $? after $(( $(date +%s) - start )) s" | tee -a "$log"
fi
left=$(( budget - 25 - ($(date +%s) - start) ))
if [[ $left -gt 10 ]]; then
  timeout --signal=INT "$left" $PYTHON results/study100m/device_runs.py --out "$study" "$@" --stages capture eval \
    "${tiny[@]}" "${steps[@]}" >> "$log" 2>&1
  echo "capture/eval exit $? after $(( $(date +%s) - start )) s" | tee -a "$log"
fi
$PYTHON results/study350m/device_call.py export "$study" "$OUT" "$tag" --since "$stamp" >> "$log" 2>&1
$PYTHON results/study100m/table.py "$study" >> "$log" 2>&1
grep -v -i "warn\|it/s\]" "$log" | tail -30
