#!/usr/bin/env bash
# The mid-training run (issue 36, item 5): pre-train a baseline, export it as Qwen3, `mhar convert`,
# continue it twice (MHAR delta form and the schedule-matched control, same seed and data order),
# `mhar eval` both, and print the table last (benchmarks/multi_gpu/midtrain.py says how).
#   bash benchmarks/multi_gpu/midtrain.sh NPROC PRESET PRETRAIN_STEPS CPT_STEPS [OUT] [midtrain.py flags...]
# e.g. on 2 GPUs (one device call):
#   bash benchmarks/multi_gpu/midtrain.sh 2 100m 300 150 /tmp/midtrain --budget 540
#   (DDP on CUDA steps from CUDA graphs with compiled sublayers by default)
# on the CPU (gloo, the logic only):
#   bash benchmarks/multi_gpu/midtrain.sh 2 tiny 20 10 /tmp/midtrain --heads 2 --batch-size 8 --seq-len 64 \
#     --vocab-size 512 --corpus-max-bytes 150000 --train-args "--device cpu" --cpt-args "--device cpu" \
#     --eval-device cpu --eval-limit 20
set -euo pipefail
if (( $# < 4 )); then sed -n '2,13p' "$0"; exit 2; fi
nproc=$1 preset=$2 pretrain=$3 cpt=$4 out=${5:-runs/midtrain-$2-$1x}
shift $(( $# < 5 ? $# : 5 ))
export PYTHONPATH=${PYTHONPATH:-$PWD} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
exec python3 "$(dirname "$0")/midtrain.py" --nproc "$nproc" --preset "$preset" --pretrain-steps "$pretrain" \
  --cpt-steps "$cpt" --out "$out" "$@"
