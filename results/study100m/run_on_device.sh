#!/usr/bin/env bash
# One device call of the 100M study (results/study100m/README.md). Carry corpus.tar.xz (the built corpus,
# `mhar corpus pack`) and .whl (hyper-connections, h5netcdf, the LM Evaluation Harness and its dependencies,
# installed into /tmp/site beside the project).
#   bash results/study100m/run_on_device.sh [--steps N] [--tiny] [--lr RATE] [--budget S] [--reserve S] [--nproc N] GRID [METHOD [SEED]]
# --lr RATE: only the grid's runs at RATE (e.g. the sweep's 2e-3 point alone)
# --nproc N: train under torchrun on N GPUs of one host (DDP; the global batch, data order and schedule
# are the plan's, split over the ranks); capture and evaluation stay one process on GPU 0.
#   GRID: lrsweep | main | extra | hw | bestvsbest (plan study100m) | middle (plan middle)
#         | scale350m (plan study350m: the 350M pair, exported as results/study100m/scale350m)
# Trains the named runs (finished ones are skipped, an interrupted one resumes from its checkpoint in
# /tmp/<plan>[_lrsweep|_bestvsbest] (/tmp/study350m for scale350m), kept between calls on the same warm machine), stops training --reserve seconds before the
# --budget, captures and evaluates the finished runs, exports them without weights to
# $OUT/part_<args>.tar.gz with the log beside it, and prints a table of the runs last.
# Training stops itself (--time-limit): at a step boundary, with a checkpoint there, leaving room for one
# more step, evaluation and checkpoint write; a run whose last step is reached finishes. SIGINT
# (timeout) comes only 90 s later, as a backstop.
set -uo pipefail
steps=(); tiny=(); lr=(); budget=560; reserve=170; nproc=1
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --steps) steps=(--steps "$2"); shift 2;;
    --tiny) tiny=(--tiny); shift;;
    --lr) lr=(--lr "$2"); shift 2;;
    --budget) budget=$2; shift 2;;
    --reserve) reserve=$2; shift 2;;
    --nproc) nproc=$2; shift 2;;
    *) echo "run_on_device.sh: unknown option $1"; exit 2;;
  esac
done
[[ $# -ge 1 ]] || { echo "usage: run_on_device.sh [--steps N] [--tiny] [--budget S] [--reserve S] [--nproc N] GRID [METHOD [SEED]]"; exit 2; }
[[ $nproc =~ ^[1-9][0-9]*$ ]] || { echo "run_on_device.sh: --nproc wants a positive whole number, got '$nproc'"; exit 2; }
trainer=(python3); [[ $nproc -gt 1 ]] && trainer=(python3 -m torch.distributed.run --standalone --nproc_per_node "$nproc")
start=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
plan=study100m; [[ $1 == middle ]] && plan=middle; [[ $1 == scale350m ]] && plan=study350m
# one rate per study folder (the report stages pick runs by method and seed): the sweep and the
# best-vs-best rate train into folders of their own, exported as results/study100m/{lrsweep,bestvsbest}
folder=$plan; [[ $1 == lrsweep || $1 == bestvsbest ]] && folder=${plan}_$1
study=/tmp/$folder; [[ ${#tiny[@]} -gt 0 ]] && study=/tmp/${folder}_tiny
tag=$(IFS=_; echo "$*")${lr:+_lr${lr[1]}}${tiny:+_tiny}; log=$OUT/log_$tag.txt
if [[ ! -f corpus/mhar_corpus.json ]]; then
  [[ -f corpus.tar.xz ]] || { echo "no corpus/ and no corpus.tar.xz: carry corpus.tar.xz"; exit 1; }
  tar -xJf corpus.tar.xz || { echo "corpus.tar.xz did not unpack"; exit 1; }
fi
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 MHAR_CACHE_DIR=/tmp/mhar-cache HF_HUB_OFFLINE=1 \
  HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU"; git rev-parse HEAD 2>/dev/null;
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; } > "$log" 2>&1
stamp=$(mktemp); touch "$stamp"
left=$(( budget - reserve - ($(date +%s) - start) ))
if [[ $left -gt 10 ]]; then
  timeout --signal=INT $(( left + 90 )) "${trainer[@]}" results/study100m/device_runs.py --out "$study" "$@" \
    --stages sweep --time-limit "$left" "${steps[@]}" "${tiny[@]}" "${lr[@]}" >> "$log" 2>&1
  echo "sweep exit $? after $(( $(date +%s) - start )) s" >> "$log"
fi
left=$(( budget - 25 - ($(date +%s) - start) ))
# the sweep only picks the rate: its runs are neither captured nor evaluated
if [[ $left -gt 10 && $1 != lrsweep ]]; then
  timeout --signal=INT "$left" python3 results/study100m/device_runs.py --out "$study" "$@" --stages capture eval \
    "${steps[@]}" "${tiny[@]}" "${lr[@]}" >> "$log" 2>&1
  echo "capture/eval exit $? after $(( $(date +%s) - start )) s" >> "$log"
fi
rm -rf /tmp/export_$folder; mkdir -p /tmp/export_$folder
python3 -c "from pathlib import Path; from mhar_probe.demo.export import export_study
print('exported', len(export_study(Path('$study'), Path('/tmp/export_$folder'))), 'files')" >> "$log" 2>&1
# this call's files (export keeps modification times) and every manifest
(cd /tmp/export_$folder && { find . -type f -newer "$stamp"; find . -name manifest.json; } | sort -u \
  | tar czf "$OUT/part_$tag.tar.gz" -T -)
python3 results/study100m/table.py "$study" "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" \
  >> "$log" 2>&1
grep -v -i "warn\|it/s\]" "$log" | tail -40
