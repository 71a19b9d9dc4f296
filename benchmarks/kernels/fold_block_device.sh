#!/usr/bin/env bash
# The fold-block backward on one GPU machine, in one device call (under 8 minutes):
#   COMMIT=$(git rev-parse --short HEAD) bash benchmarks/kernels/fold_block_device.sh
# 1. the kernels' GPU tests (`pytest -m gpu tests/gpu/test_kernels_gpu.py tests/test_kernels_model.py`:
#    every stack test under the fold-block backward at blocks of 8 and 3 and under the gather
#    backward, the fold at the model's depths, CUDA-graph replay), log in $OUT/pytest_gpu.log;
# 2. the old (gather, `triton-gather`) against the new (fold-block, `triton`, the default)
#    backward in one process per table, graph replay and GPU busy: the training microbatches in
#    autocast's layout (100M-train, 350M-train, 1B-train; fp32 douts; H = 8), then the kernel-table
#    shapes (bf16; H = 8 and 1). VARIANTS (comma-separated, e.g. triton-fold12,triton-fold16) adds
#    other block sizes to the training microbatches;
# 3. a short table last: ms per microbatch (graph replay) of both backwards, gather / fold, each
#    against the 4-byte floor, and the extra peak memory.
# JSON under $OUT: fold_train.json, fold_table.json (mhar bench routing's format), gpu_results.jsonl
# (the GPU tests' measured errors), summary.json (the table). Each step has its own time limit
# (TEST_TIMEOUT, TRAIN_TIMEOUT, TABLE_TIMEOUT; 190 + 150 + 90 s by default: under 8 minutes with
# start-up; each benchmark writes its JSON after every shape, so a cut-short step keeps what it timed).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
COMMIT_ARG=${COMMIT:+--commit $COMMIT}
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}. PYTHONUNBUFFERED=1 MHAR_GPU_RESULTS=$OUT/gpu_results.jsonl
python -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)" \
  | tee "$OUT/device.txt"
XDIST=$(python -c "import xdist" 2>/dev/null && echo "-n 4")
t0=$SECONDS
timeout ${TEST_TIMEOUT:-190} python -m pytest -q -p no:cacheprovider $XDIST -m gpu tests/gpu/test_kernels_gpu.py \
  tests/test_kernels_model.py > "$OUT/pytest_gpu.log" 2>&1
echo "GPU tests: rc $? in $((SECONDS - t0)) s: $(grep -E "passed|failed|error" "$OUT/pytest_gpu.log" | tail -1)"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_gpu.log" | head -10
t0=$SECONDS
timeout ${TRAIN_TIMEOUT:-150} python -m mhar_probe.cli bench routing $COMMIT_ARG --out "$OUT/fold_train.json" --no-delta \
  --dtype mixed --shapes 100M-train,350M-train,1B-train --heads 8 --backends triton,triton-gather${VARIANTS:+,$VARIANTS} \
  --repeat 5 --graph 2>&1 | grep -v -i warn > "$OUT/fold_train.log"
echo "training microbatches: rc $? in $((SECONDS - t0)) s"
t0=$SECONDS
timeout ${TABLE_TIMEOUT:-90} python -m mhar_probe.cli bench routing $COMMIT_ARG --out "$OUT/fold_table.json" --no-delta \
  --shapes 100M,350M,1B --heads 8,1 --backends triton,triton-gather --repeat 5 --graph 2>&1 \
  | grep -v -i warn > "$OUT/fold_table.log"
echo "kernel table: rc $? in $((SECONDS - t0)) s"
python - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
rows, meta = [], {}
for name in ("fold_train.json", "fold_table.json"):
    path = os.path.join(out, name)
    if os.path.exists(path):
        doc = json.load(open(path))
        meta = meta or doc["meta"]
        rows += [r for r in doc["rows"] if "fwdbwd_ms" in r]
by = {(r["shape"], r["H"], r["backend"]): r for r in rows}
summary = []
print(f"\n{meta.get('device', '?')}  commit {meta.get('commit')}  copy {meta.get('copy_gbps', 0):.0f} GB/s"
      "  (ms per microbatch, fwd+bwd; graph replay, GPU busy in brackets)")
print(f"{'shape':10s} {'H':>2s} {'backend':14s} {'graph ms':>9s} {'(busy)':>8s} {'/floor':>7s} {'gather/this':>11s} {'peak+GiB':>8s}")
for (shape, H, backend), r in by.items():
    old = by.get((shape, H, "triton-gather"), {})
    g, go = r.get("graph_fwdbwd_ms"), old.get("graph_fwdbwd_ms")
    ratio = go / g if g and go else None
    row = dict(shape=shape, H=H, backend=backend, graph_ms=g, busy_ms=r.get("kernels_total_ms"),
               floor_ms=r["floor_ms"], graph_over_floor=g / r["floor_ms"] if g else None,
               gather_over_this=ratio, peak_extra_gib=r["peak_extra_gib"], kernels_ms=r.get("kernels_ms"))
    summary.append(row)
    fmt = lambda x, f: format(x, f) if x is not None else "-"  # noqa: E731
    print(f"{shape:10s} {H:2d} {backend:14s} {fmt(g, '9.3f')} ({fmt(r.get('kernels_total_ms'), '6.2f')}) "
          f"{fmt(row['graph_over_floor'], '6.2f')}x {fmt(ratio, '10.3f')}x {r['peak_extra_gib']:8.2f}")
json.dump(dict(meta=meta, rows=summary), open(os.path.join(out, "summary.json"), "w"), indent=1)
EOF
