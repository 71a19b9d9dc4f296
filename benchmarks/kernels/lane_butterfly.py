"""Per-head sums of a block of readers across the lanes: Triton's reduction against a transposed
butterfly written with `tl.gather`, for the held fold kernel's next step (results.md, "H100: the
held fold kernel": its per-head dots reduce each reader's sum over 32 lanes one by one).

The held kernel holds, per head, x[h, c, l] = the lane-l partial of reader c's dot (CB = 8 readers,
32 lanes). `tl.sum(x, axis=2)` reduces each reader separately: 5 shuffle-and-add levels each, 40
shuffles and 40 adds a thread. The transposed butterfly halves the readers a lane keeps at each of
the first three levels (xor 16, 8, 4: a lane keeps the half its lane bit names and adds its
partner's copy of that half, 4 + 2 + 1 exchanges), then sums the last two levels (xor 2, 1): every
lane ends with one reader's whole sum (reader 4 b16 + 2 b8 + b4 of its lane bits), and a last
gather hands every lane all 8. Written in plain Triton (`tl.gather` along an axis that lies within
a warp, `tl.split`, `tl.where`), so it runs in the CPU interpreter.

    PYTHONPATH=<triton 3.6>:. python benchmarks/kernels/lane_butterfly.py --out benchmarks/kernels/lane_butterfly_triton3.6.json
    TRITON_INTERPRET=1 python benchmarks/kernels/lane_butterfly.py --check     (the sums against float64)

Offline it compiles for sm_90 without a GPU, as regs_offline.py does, and counts the kernel's
shuffles, fp32 adds, selects and shared-memory traffic. It has not been timed in the held kernel.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile

import triton
import triton.language as tl


@triton.jit
def _xor_lane(x, lane, m: tl.constexpr):
    """x[..., l ^ m] along the last axis (the lanes)."""
    return tl.gather(x, tl.broadcast_to(lane ^ m, x.shape), axis=len(x.shape) - 1)


@triton.jit
def _halve(x, lane, m: tl.constexpr, n: tl.constexpr):
    """x [HM, n, 32] -> [HM, n / 2, 32]: a lane keeps the upper half of the readers where its bit m
    is set, else the lower, and adds its xor-m partner's partials of the same half."""
    HM: tl.constexpr = x.shape[0]
    lo, hi = tl.split(tl.permute(tl.reshape(x, [HM, 2, n // 2, 32]), (0, 2, 3, 1)))
    b = (lane & m) != 0
    return tl.where(b, hi, lo) + _xor_lane(tl.where(b, lo, hi), lane, m)


@triton.jit
def per_head_sums_kernel(DA, V, OUT, HM: tl.constexpr, CB: tl.constexpr, K: tl.constexpr, BUTTERFLY: tl.constexpr):
    """OUT[h, c] = sum_k DA[h, c, k] V[h, k] (CB = 8, K a multiple of 32): Triton's reduction, or
    (BUTTERFLY) the lane partials [HM, CB, 32] reduced by the transposed butterfly."""
    offs_h = tl.arange(0, HM)
    offs_c = tl.arange(0, CB)
    offs_k = tl.arange(0, K)
    da = tl.load(DA + offs_h[:, None, None] * CB * K + offs_c[None, :, None] * K + offs_k[None, None, :])
    v = tl.load(V + offs_h[:, None] * K + offs_k[None, :])
    prod = da * v[:, None, :]  # [HM, CB, K]
    if BUTTERFLY:
        lane = tl.arange(0, 32)[None, None, :]
        x = tl.sum(tl.reshape(prod, [HM, CB, 32, K // 32]), axis=3)  # [HM, CB, 32]: within each thread
        x = _halve(x, lane, 16, 8)
        x = _halve(x, lane, 8, 4)
        x = _halve(x, lane, 4, 2)
        x = x + _xor_lane(x, lane, 2)
        x = x + _xor_lane(x, lane, 1)  # [HM, 1, 32]: lane l holds reader 4 b16 + 2 b8 + b4's sum
        src = ((offs_c >> 2) & 1) * 16 + ((offs_c >> 1) & 1) * 8 + (offs_c & 1) * 4
        ds = tl.gather(tl.broadcast_to(x, [HM, CB, 32]), tl.broadcast_to(src[None, :, None], [HM, CB, 32]), axis=2)
        tl.store(OUT + offs_h[:, None, None] * CB + offs_c[None, :, None] + lane * 0, ds, mask=lane == 0)
    else:
        tl.store(OUT + offs_h[:, None] * CB + offs_c[None, :], tl.sum(prod, axis=2))


def check(K: int = 128) -> float:
    """The larger of both variants' errors against float64 (interpreter or GPU)."""
    import torch

    dev = "cuda" if torch.cuda.is_available() and not os.environ.get("TRITON_INTERPRET") else "cpu"
    gen = torch.Generator().manual_seed(0)
    da, v = torch.randn(8, 8, K, generator=gen).to(dev), torch.randn(8, K, generator=gen).to(dev)
    ref = (da.double() * v.double()[:, None, :]).sum(-1)
    worst = 0.0
    for b in (False, True):
        out = torch.full((8, 8), float("nan"), device=dev)
        per_head_sums_kernel[(1,)](da, v, out, 8, 8, K, b, num_warps=8)
        worst = max(worst, (out.double() - ref).abs().max().item())
    return worst


def counts(K: int = 128, num_warps: int = 8) -> dict[str, dict[str, int]]:
    """SASS opcode counts of both variants compiled for sm_90 (no GPU needed)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if not hasattr(per_head_sums_kernel, "params"):  # TRITON_INTERPRET=1: no compiler to count with
        raise SystemExit("lane_butterfly.py: the offline counts compile for sm_90; run them without "
                         "TRITON_INTERPRET (it is for --check)")
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(cuobjdump):
        raise SystemExit(f"lane_butterfly.py: no cuobjdump at {cuobjdump} (Triton's NVIDIA backend); "
                         "the offline counts need it")
    out = {}
    for b in (False, True):
        sig = {p.name: "constexpr" if p.is_constexpr else "*fp32" for p in per_head_sums_kernel.params}
        k = triton.compile(ASTSource(fn=per_head_sums_kernel, signature=sig,
                                     constexprs=dict(HM=8, CB=8, K=K, BUTTERFLY=b),
                                     attrs={(i,): [["tt.divisibility", 16]] for i in range(3)}),
                           target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
        with tempfile.NamedTemporaryFile("wb", suffix=".cubin") as f:
            f.write(k.asm["cubin"])
            f.flush()
            sass = subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True, check=True).stdout
        ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(.*?);", sass)
        c = collections.Counter((o.split()[1] if o.startswith("@") else o.split()[0]).split(".")[0] for o in ops)
        out["butterfly" if b else "tl.sum"] = dict(instructions=len(ops), **{op: c[op] for op in (
            "SHFL", "FADD", "FFMA", "FMUL", "FSEL", "LDS", "STS", "BAR")})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only the sums against float64 (interpreter or GPU)")
    ap.add_argument("--out", default="", help="write the offline counts here (JSON)")
    args = ap.parse_args()
    if args.check:
        err = check()
        print(f"largest error against float64: {err:.2e}")
        sys.exit(0 if err < 1e-4 else 1)
    res = counts()
    for name, c in res.items():
        print(f"{name:10s} " + " ".join(f"{k} {v}" for k, v in c.items()))
    if args.out:
        try:
            with open(args.out, "w") as f:
                json.dump(dict(date=datetime.date.today().isoformat(), triton=triton.__version__, arch="sm_90",
                               shape=dict(HM=8, CB=8, K=128, num_warps=8), kernels=res), f, indent=1)
        except OSError as exc:
            raise SystemExit(f"lane_butterfly.py: cannot write {args.out} ({exc.strerror})") from None


if __name__ == "__main__":
    main()
