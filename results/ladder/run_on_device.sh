#!/usr/bin/env bash
# One device call of the GPU ladder (results/ladder/README.md). Carry .whl: hyper-connections, h5netcdf
# and the LM Evaluation Harness with its dependencies, installed into /tmp/site beside the project, not
# into the site-packages that the `installed` corpus reads.
#   bash results/ladder/run_on_device.sh GRID [GRID ...]     e.g. main hw seeds | kvgrid widths
# Trains, captures and evaluates those grids of the ladder plan, stops itself before the call's
# 10-minute limit, and exports the finished runs (no weights) to $OUT/part_<grids>.tar.gz, with the
# log beside it. Unpack on the CPU with: mhar demo --plan ladder --out ... (see the README).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 MHAR_CACHE_DIR=/tmp/mhar-cache HF_HUB_OFFLINE=1 \
  HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
tag=$(IFS=_; echo "$*"); log=$OUT/log_$tag.txt; budget=${LADDER_SECONDS:-540}
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git rev-parse HEAD 2>/dev/null;
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > "$log" 2>&1
start=$(date +%s)
timeout --signal=INT "$budget" python3 -m mhar_probe.cli demo --plan ladder --out /tmp/ladder \
  --stages sweep capture eval --grids "$@" >> "$log" 2>&1
echo "demo exit $? after $(( $(date +%s) - start )) s" >> "$log"
python3 -c "from pathlib import Path; from mhar_probe.demo.export import export_study
print('exported', len(export_study(Path('/tmp/ladder'), Path('/tmp/export'))), 'files')" >> "$log" 2>&1
tar czf "$OUT/part_$tag.tar.gz" -C /tmp/export .
grep -v -i "warn\|it/s\]" "$log" | tail -60
