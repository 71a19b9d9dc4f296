#!/usr/bin/env bash
# The whole GPU suite in one device call: every gpu-marked test on ONE visible GPU, then the
# multi-GPU tests (tests/gpu/test_distributed_gpu.py) with TWO visible GPUs, with the card, the
# software and the commit on record.
#
# Run it in every session that changes model, kernel or step code (mhar_probe/model/,
# mhar_probe/kernels/, mhar_probe/step.py, compiled.py, loss.py, train.py, parallel code), and
# commit its log beside the change (tests/gpu/README.md):
#   python -m mhar_probe.provenance stamp          # here, before the tree is copied: the commit that runs
#   bash tests/gpu/run_gpu_suite.sh                # on the GPU machine (2 GPUs for the second part;
#                                                  # carry .mhar-stamp.json, which git ignores, and .whl)
#   bash tests/gpu/run_gpu_suite.sh --only 1gpu    # one part (--only 2gpu: the other), e.g. one per call
#   bash tests/gpu/run_gpu_suite.sh --dry-run      # any machine: the header and the plan, nothing run
#   bash tests/gpu/run_gpu_suite.sh --collect      # any machine: ... and pytest's collection of each part
#   bash tests/gpu/run_gpu_suite.sh --workers 1    # the one-GPU part in one process (default 4, below)
#
# The one-GPU part runs in --workers pytest-xdist processes sharing the card (default 4: the GPU
# machine has 16 cores; run serially on an H200 on 2026-11-28 the part had passed 43 of 102 tests
# when its 420 s ran out, and the killed run named no test). Every test's
# result is a line of its own (-v), so a part killed by its timeout still shows what had finished.
#
# Writes $OUT/gpu_suite.log (OUT default /tmp/out): the card (nvidia-smi name, driver, memory), the
# torch / CUDA / triton / transformers versions, the code record (mhar_probe.provenance.code_record:
# the commit from the stamp, else git, whose id can be stale on the GPU machine), then each part's
# pytest report; $OUT/gpu_suite_<part>.log hold the parts' full output. Each part runs under
# `timeout` (PART_1GPU_S, default 420; PART_2GPU_S, default 300 -- one device call is 10 minutes, so
# on a fresh machine give each part its own call). The short summary is printed last: each part's
# pytest result line and one verdict; the exit status is 0 only when every part asked for ran and
# passed (a machine with one GPU cannot run the second part, and says so).
# The header also names the wheels the GPU tests import beyond the GPU image (hyper_connections, h5netcdf),
# or says which are missing (no .whl carried) before any test runs.
# tests/test_gpu_suite_script.py runs --dry-run and --collect on a CPU.
set -uo pipefail
usage="usage: bash tests/gpu/run_gpu_suite.sh [--dry-run | --collect] [--only 1gpu|2gpu] [--workers N]"
dry=0; collect=0; only=""; workers=4
while (( $# )); do
  case $1 in
    --dry-run) dry=1 ;;
    --collect) dry=1; collect=1 ;;
    --only) [[ ${2:-} == 1gpu || ${2:-} == 2gpu ]] || { echo "$usage (--only takes 1gpu or 2gpu)" >&2; exit 2; }
            only=$2; shift ;;
    --workers) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "$usage (--workers takes a positive integer)" >&2; exit 2; }
               workers=$2; shift ;;
    *) echo "$usage (unknown argument '$1')" >&2; exit 2 ;;
  esac
  shift
done
cd "$(dirname "$0")/../.." || exit 2
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG=$OUT/gpu_suite.log
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
# the wheels the GPU image lacks (hyper-connections for the hyper modes, h5netcdf, ...: benchmarks/device_wheels.py),
# carried as .whl/ like every device script's; without them the hyper-mode tests fail to import
if (( ! dry )) && compgen -G ".whl/*.whl" > /dev/null; then
  "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl || { echo "wheel install failed" >&2; exit 1; }
fi
: > "$LOG"
say() { echo "$*" | tee -a "$LOG"; }

# every test file that marks a test gpu, the multi-GPU one apart
mapfile -t FILES < <(grep -rlE "pytest\.mark\.gpu" tests --include="test_*.py" | sort)
ONE=(); TWO=()
for f in "${FILES[@]}"; do
  if [[ $f == tests/gpu/test_distributed_gpu.py ]]; then TWO+=("$f"); else ONE+=("$f"); fi
done
PYTEST=("$PY" -m pytest -m gpu -p no:cacheprovider -rfEs --durations=15)
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
# the devices a part may see: the first one, then the first two, of those this process may use
visible=${CUDA_VISIBLE_DEVICES:-$( ((ngpu)) && seq -s, 0 $((ngpu - 1)))}
IFS=, read -r -a VISIBLE <<< "${visible:-0,1}"
(( ngpu > ${#VISIBLE[@]} )) && ngpu=${#VISIBLE[@]}

say "## gpu suite $(date -u +%Y-%m-%dT%H:%M:%SZ)$( ((dry)) && echo " (dry run$( ((collect)) && echo ": collection only"))")"
if (( ngpu > 0 )); then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | sed 's/^/## card: /' | tee -a "$LOG"
else
  say "## card: none (nvidia-smi lists no GPU)"
fi
"$PY" - >> "$LOG" 2>&1 <<'EOF'
import json
from mhar_probe.provenance import code_record, software
import torch
code = code_record()
print("## software:", json.dumps(software()), "devices:", torch.cuda.device_count())
print("## code:", json.dumps(code))
if code["source"] != "stamp":
    print("## code: no stamp of this tree (python -m mhar_probe.provenance stamp before the copy); "
          "the commit is git's, which can be stale on the GPU machine")
# what the GPU tests import beyond the GPU image (benchmarks/device_wheels.py's ROOTS): a run without
# them (no .whl carried) fails those tests on an import, so the header says so before any test runs
import importlib.metadata as md
import importlib.util
extra = {"hyper_connections": "hyper-connections", "h5netcdf": "h5netcdf"}
have = {m: md.version(d) for m, d in extra.items() if importlib.util.find_spec(m) is not None}
print("## wheels:", ", ".join(f"{m} {have[m]}" if m in have else f"{m} MISSING" for m in extra))
if len(have) < len(extra):
    print("## wheels: missing", ", ".join(m for m in extra if m not in have), "-- carry .whl "
          "(benchmarks/device_wheels.py); the tests that import them will fail")
EOF
grep "^## software\|^## code\|^## wheels" "$LOG"

parts=()
[[ $only != 2gpu ]] && parts+=(1gpu)
[[ $only != 1gpu ]] && parts+=(2gpu)
summary=(); verdict=0
for part in "${parts[@]}"; do
  if [[ $part == 1gpu ]]; then files=("${ONE[@]}"); devices=${VISIBLE[0]}; secs=${PART_1GPU_S:-420}; need=1
    spread=(); (( workers > 1 )) && spread=(-n "$workers")
  else files=("${TWO[@]}"); devices=${VISIBLE[0]},${VISIBLE[1]:-1}; secs=${PART_2GPU_S:-300}; need=2; spread=(); fi
  cmd=(env CUDA_VISIBLE_DEVICES=$devices "${PYTEST[@]}" -v "${spread[@]}" "${files[@]}")
  say "## part $part: ${cmd[*]}"
  if (( dry && !collect )); then
    summary+=("$part: ${#files[@]} file(s), not run (dry run)"); continue
  elif (( dry )); then
    "${PYTEST[@]}" --collect-only -q "${files[@]}" > "$OUT/gpu_suite_$part.log" 2>&1
    rc=$?
    (( rc == 5 )) && rc=0  # nothing collected: this machine has no CUDA, so tests/gpu is not collected
  elif (( ngpu < need )); then
    say "## part $part: not run, needs $need GPUs ($ngpu visible)"
    summary+=("$part: NOT RUN (needs $need GPUs, $ngpu visible)"); verdict=1; continue
  else
    timeout --kill-after=10 "$secs" "${cmd[@]}" > "$OUT/gpu_suite_$part.log" 2>&1
    rc=$?
  fi
  cat "$OUT/gpu_suite_$part.log" >> "$LOG"
  result=$(grep -E "[0-9]+ (passed|failed|error|skipped|deselected|tests? collected)|no tests (ran|collected)" \
           "$OUT/gpu_suite_$part.log" | tail -1)
  (( rc == 124 || rc == 137 )) && result="TIMED OUT at $secs s; $result"
  summary+=("$part: exit $rc: ${result:-no result line}")
  (( rc != 0 )) && verdict=1
done

say "## summary"
for line in "${summary[@]}"; do say "## $line"; done
if (( dry )); then say "## dry run: ${#ONE[@]} one-GPU files, ${#TWO[@]} two-GPU file(s)$( ((collect)) && echo "; collection exit $verdict")"
elif (( verdict == 0 )); then say "## GPU suite: ALL PASSED"
else say "## GPU suite: NOT GREEN"; fi
exit $verdict
