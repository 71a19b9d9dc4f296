"""Registers and spills of the routing kernels, compiled for sm_90 on a machine without a GPU.

Triton compiles for a named target without a driver; the cubin's resource usage (registers per
thread, stack frame = spill space) comes from the `cuobjdump` that ships with Triton's NVIDIA
backend. That is what bounds resident warps per SM (65536 registers: 16 one-warp programs need
<= 128 registers per thread), so launch configurations can be screened here before a GPU sweep.
Numbers depend on the Triton version: with the GPU machine's (3.6) they match Nsight Compute there.

    python benchmarks/kernels/regs_offline.py --out benchmarks/kernels/regs_offline_<date>.json

Another Triton version compiles the same way from a side directory, e.g. the GPU machine's:

    pip install --target /tmp/tri36 --no-deps triton==3.6.0
    PYTHONPATH=/tmp/tri36:. python benchmarks/kernels/regs_offline.py --out ..._triton3.6.json

Shapes: the three training shapes in autocast's layout (fp32 source 0, douts and outputs; bf16
buffer and source gradients), H = 8, one head count per stack (HM = H).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import warnings

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from mhar_probe.bench.routing import SWEEP_FWD, SWEEP_GATHER, SWEEP_PAIR_E, SWEEP_STACK
from mhar_probe.kernels.route.bwd import stack_bwd_kernel, stack_bwd_split_kernel
from mhar_probe.kernels import KernelConfig
from mhar_probe.kernels.launch_tables import tables_for
from mhar_probe.kernels.route.bwd_collect import e_tiles, narrow_tile_vec, pair_e_kernel, stack_gather_kernel
from mhar_probe.kernels.route.bwd_fold import stack_fold_held_kernel, stack_fold_kernel
from mhar_probe.kernels.route.fwd import W_ROWS, W_STAGES, head_split, route_fwd_kernel, route_fwd_split_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launch_sweep import fold_variants  # noqa: E402

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
F32, BF16, I64P, I32, F = "*fp32", "*bf16", "*i64", "i32", "fp32"
SHAPES = {"100M": 512, "350M": 1024, "1B": 1280}
DIVISIBLE = {"stride_vn", "stride_dc", "stride_es", "P", "chunk", "dbase"}  # multiples of 16 at these shapes


#: fp32 arithmetic opcodes: what a loop computes, as against its addresses, masks, loads and exchanges
FLOAT_ARITH = ("FFMA", "FADD", "FMUL")


def loops(sass: str) -> list[dict]:
    """Every loop of a kernel's SASS (a backward branch and its body): instructions, global loads,
    and the shared-memory traffic and block barriers that layout conversions cost, per iteration;
    also its fp32 arithmetic (FFMA, FADD, FMUL), shuffles, and local-memory loads and stores (LDL, STL:
    spilled registers).
    Nested loops are listed separately, each with its whole body."""
    addr_re = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?);")
    body = [(int(a, 16), op) for a, op in addr_re.findall(sass)]
    found = []
    for here, op in body:
        m = re.search(r"BRA (0x[0-9a-f]+)", op)
        if m and int(m.group(1), 16) < here:
            start = int(m.group(1), 16)
            ops = [o for a, o in body if start <= a <= here]
            count = lambda key: sum(1 for o in ops if re.search(rf"(^|\s){key}", o))  # noqa: E731
            found.append(dict(start=hex(start), end=hex(here), instructions=len(ops), LDG=count("LDG"),
                              LDS=count("LDS"), STS=count("STS"), BAR=count("BAR"),
                              float_arith=sum(count(op) for op in FLOAT_ARITH), SHFL=count("SHFL"),
                              LDL=count("LDL"), STL=count("STL")))
    return sorted(found, key=lambda r: r["instructions"])


def resources(fn, types: dict[str, str], consts: dict, num_warps: int, maxnreg: int | None = None,
              arch: int = 90, with_loops: bool = False) -> dict:
    """Compile `fn` for sm_<arch>; registers per thread and stack bytes (spills) of the cubin,
    and with `with_loops` the per-iteration counts of every loop in its SASS (`loops`)."""
    sig = {p.name: "constexpr" if p.is_constexpr else types[p.name] for p in fn.params}
    # what Triton's launcher specialises on at the training shapes: every pointer 16-byte aligned,
    # the row strides and P divisible by 16 (without it, no vectorised loads)
    aligned = {(i,): [["tt.divisibility", 16]] for i, p in enumerate(fn.params)
               if not p.is_constexpr and (types[p.name].startswith("*") or p.name in DIVISIBLE)}
    opts = {"num_warps": num_warps, **({"maxnreg": maxnreg} if maxnreg else {})}
    kernel = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=aligned),
                            target=GPUTarget("cuda", arch, 32), options=opts)
    with tempfile.NamedTemporaryFile("wb", suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        txt = subprocess.run([CUOBJDUMP, "--dump-resource-usage", f.name], capture_output=True,
                             text=True, check=True).stdout
        sass = subprocess.run([CUOBJDUMP, "-sass", f.name], capture_output=True, text=True,
                              check=True).stdout if with_loops else ""
    regs = int(re.search(r"REG:(\d+)", txt).group(1))
    stack = int(re.search(r"STACK:(\d+)", txt).group(1))
    warps_per_sm = min(64, 65536 // (max(regs, 1) * 32 * num_warps) * num_warps)
    out = dict(regs=regs, spill_stack_bytes=stack, warps_per_sm_by_regs=warps_per_sm)
    if with_loops:
        out["loops"] = loops(sass)
    return out


def fwd_job(d: int, cfg: tuple, ahead: tuple[int, int] = (0, 0)) -> tuple:
    """The forward at row `cfg`; `ahead` = (NEXT, RESUME): the lookahead's leading or resuming call."""
    H, K = 8, d // 8
    types = dict(V0=F32, V=BF16, stride_vn=I32, Q=F32, G=F32, PARTIAL=F32, GATE=F32, OUT=F32, W=F32,
                 RES=F32, X=BF16, XDST=BF16, P=I32, N=I32, eps=F, QN=F32, GN=F32, WN=F32, SACC=F32, SML=F32,
                 N0=I32, RN=F32)
    # autocast's layout: fp32 outputs over a bf16 buffer fold q*g; each call stores its newest source
    flags = dict(BLOCK_P=cfg[0], HAS_PARTIAL=False, HAS_GATE=False, ROUND_KEY=False, ROUND_KEY2=False,
                 HAS_RES=False, FOLD=True, STAGES=cfg[3], APPEND=True, W_STAGES=W_STAGES, W_ROWS=W_ROWS, NEXT=ahead[0],
                 RESUME=ahead[1], R_STORED=1, STORE_R0=0)  # a stack's calls: the rows' stored r
    split = head_split(K)
    if split:
        return route_fwd_split_kernel, types, dict(D=d, H=H, K=K, K1=split[0], K2=split[1],
                                                   BLOCK_K2=split[2], **flags)
    return route_fwd_kernel, types, dict(D=d, H=H, K=K, BLOCK_K=K, **flags)


def stack_job(d: int, cfg: tuple) -> tuple:
    H, K = 8, d // 8
    types = dict(V0=F32, V=BF16, stride_vn=I32, DOUT=F32, OUT=F32, DOUT_BUF=F32, stride_dc=I32, WALL=F32,
                 DALL=F32, SALL=F32, U=F32, CALL_N=I64P, CALL_H=I64P, CALL_WOFF=I64P, CALL_SOFF=I64P,
                 DX=BF16, EPART=F32, call=I32, top1=I32, n=I32, woff=I32, soff=I32, j0=I32, j1=I32, P=I32,
                 eps=F)
    flags = dict(BLOCK_P=cfg[0], ROUND_KEY=False, HAS_GATHER=True, GATHER0=False)
    split = head_split(K)
    if split:
        k1, k2, bk2 = split
        return stack_bwd_split_kernel, types, dict(D=d, H=H, K=K, K1=k1, K2=k2, BLOCK_K2=bk2, HM=H, KM=K,
                                                   KM1=k1, KM2=k2, BLOCK_KM2=bk2, **flags)
    return stack_bwd_kernel, types, dict(D=d, H=H, K=K, BLOCK_K=K, HM=H, KM=K, BLOCK_KM=K, **flags)


def gather_job(d: int, cfg: tuple, fold: bool = False) -> tuple:
    """stack_gather_kernel as the gather backward launches it, or (fold) as the fold-block
    backward does once a fold has happened (dout slots below the frontier, the sources'
    accumulators added)."""
    H, K = 8, d // 8
    types = dict(V0=F32, V=BF16, stride_vn=I32, DOUT=F32, OUT=F32, RES=F32, DOUT_BUF=F32, stride_dc=I32,
                 WALL=F32, DALL=F32, SHALL=F32, SALL=F32, U=F32, RALL=F32, CALL_N=I64P, CALL_H=I64P,
                 CALL_WOFF=I64P, CALL_SOFF=I64P, DX=BF16, call=I32, top1=I32, soff=I32, j0=I32, j1=I32,
                 P=I32, eps=F, ACC=F32, dbase=I32)
    split = head_split(K)
    ka, bka, kb, bkb = (split[0], split[0], split[1], split[2]) if split else (K, K, 0, 1)
    return stack_gather_kernel, types, dict(D=d, H=H, HM=H, KM=K, KA=ka, BLOCK_KA=bka, KB=kb, BLOCK_KB=bkb,
                                            BLOCK_P=cfg[0], HAS_RES=False, HAS_GATHER=True, GATHER0=False,
                                            PREFETCH=bool(cfg[2]), SAME_H=True,
                                            VEC_B=narrow_tile_vec(cfg[0], cfg[1], H, bka, bkb, 2),
                                            LOADS_FIRST=bool(cfg[4]), FOLD=fold, HAS_ACC=fold)


def gather_fold_job(d: int, cfg: tuple) -> tuple:
    return gather_job(d, cfg, fold=True)


def fold_job(d: int, cfg: tuple, dense: bool = False) -> tuple:
    """stack_fold_kernel (kernels/route/bwd_fold.py) at a gather launch-table row, or at a fold row
    (six values: its prefetch 0-2 and sources per iteration last; sources 0: stack_fold_held_kernel,
    the block of 8 readers held; the dot kernel's rows of regs_offline_2026-12-07_fold_dot_d0855db_triton3.6.json
    ran d0855db's stack_fold_dot_kernel, deleted); `dense`: its DENSE reader loop (the model's
    folds), else the masked one."""
    H, K = 8, d // 8
    types = dict(V0=F32, V=BF16, stride_vn=I32, DOUT_BUF=F32, stride_dc=I32, dbase=I32, WALL=F32, DALL=F32,
                 SHALL=F32, SALL=F32, U=F32, CALL_N=I64P, CALL_H=I64P, CALL_WOFF=I64P, CALL_SOFF=I64P,
                 ACC=F32, call=I32, top1=I32, jf=I32, first=I32, P=I32, eps=F)
    split = head_split(K)
    ka, bka, kb, bkb = (split[0], split[0], split[1], split[2]) if split else (K, K, 0, 1)
    if len(cfg) > 5 and cfg[5] == 0:  # a held row: stack_fold_held_kernel over blocks of 8 readers
        held = {**{k: v for k, v in types.items() if k not in ("CALL_N", "CALL_H", "top1")}, "RN": F32}
        return stack_fold_held_kernel, held, dict(D=d, HM=H, KM=K, KA=ka, BLOCK_KA=bka, KB=kb, BLOCK_KB=bkb,
                                                  CB=8, PREFETCH=int(cfg[2] == 1), R_STORED=1,
                                                  STAGES=3 if cfg[2] == 2 else 1)
    return stack_fold_kernel, types, dict(D=d, HM=H, KM=K, KA=ka, BLOCK_KA=bka, KB=kb, BLOCK_KB=bkb,
                                          BLOCK_P=cfg[0], PREFETCH=int(cfg[2]), SAME_H=True,
                                          VEC_B=narrow_tile_vec(cfg[0], cfg[1], H, bka, bkb, 2),
                                          LOADS_FIRST=bool(cfg[4]), SOURCES=cfg[5] if len(cfg) > 5 else 1,
                                          **({"DENSE": True} if dense else {}))


def pair_e_job(d: int, cfg: tuple, r_in_dl: bool = False) -> tuple:
    """pair_e_kernel at row cfg (block_c, block_p, num_warps[, heads]) over the bf16 buffer: keys
    rounded to bf16 (ROUND 1), or with `r_in_dl` the training step's path (autocast: unrounded keys,
    r moved to dl)."""
    types = dict(VB=BF16, stride_vn=I32, RALL=F32, DALL=F32, ITEMS=I64P, CALL_N=I64P, CALL_H=I64P,
                 CALL_WOFF=I64P, CALL_POFF=I64P, CALL_RMODE=I64P, EPART=F32, top1=I32, P=I32, chunk=I32,
                 stride_es=I32)
    block_k, k_step, kb, block_kb = e_tiles(d, 8, cuda=True)
    return pair_e_kernel, types, dict(D=d, BLOCK_C=cfg[0], BLOCK_P=cfg[1], BLOCK_K=block_k, K_STEP=k_step,
                                      ROUND=0 if r_in_dl else 1, MIXED=False, SPLIT_DOT=True, R_IN_DL=r_in_dl,
                                      KB=kb, BLOCK_KB=block_kb, HB=cfg[3] if len(cfg) > 3 else 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", default="fwd,stack,gather,pair_e",
                    help="comma-separated, of fwd, stack, gather, gather_fold (the fold-block backward's "
                         "gather), fold (its fold kernel at the gather rows), fold_rows (the fold kernel at each "
                         "shape's built-in fold row and the variants launch_sweep.py tries first: two sources "
                         "per iteration, prefetch 2), pair_e")
    ap.add_argument("--loops", action="store_true",
                    help="also count instructions, shared-memory traffic and barriers per loop iteration")
    ap.add_argument("--out", default="")
    ap.add_argument("--rows-fold", default=None,
                    help="with --kernels fold_rows: a JSON list of fold rows compiled after each shape's built-in "
                         "one (instead of launch_sweep.py's variants)")
    ap.add_argument("--rows-fwd", default=None,
                    help="with --kernels fwd: a JSON list of forward rows (block_p, num_warps, maxnreg, stages) "
                         "compiled after each shape's built-in one (instead of the sweep list)")
    ap.add_argument("--rows-pair-e", default=None,
                    help="with --kernels pair_e: a JSON list of pair_e rows (block_c, block_p, num_warps, heads) "
                         "compiled instead of the sweep list")
    ap.add_argument("--pair-e-r-in-dl", action="store_true",
                    help="pair_e: compile the training step's path (unrounded keys over the bf16 buffer, r in dl) "
                         "instead of keys rounded to bf16")
    ap.add_argument("--dense", action="store_true",
                    help="fold kinds: compile the fold's DENSE reader loop (the model's folds) instead of the masked one")
    ap.add_argument("--ahead", action="store_true",
                    help="with --kernels fwd: also compile each row as the lookahead's leading call (NEXT) and "
                         "resuming call (RESUME), KernelConfig(forward='lookahead')")
    ap.add_argument("--builtin-only", action="store_true",
                    help="compile only the built-in launch-table row of each shape (gather kinds, fwd)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    # kind: (job, configs, index of maxnreg in a config (None: no cap), index of num_warps);
    # configs are launch-table rows (launch_tables.py)
    jobs = {"fwd": (fwd_job, SWEEP_FWD, 2, 1), "stack": (stack_job, SWEEP_STACK, 3, 1),
            "gather": (gather_job, SWEEP_GATHER, 3, 1), "gather_fold": (gather_fold_job, SWEEP_GATHER, 3, 1),
            "fold": (fold_job, SWEEP_GATHER, 3, 1), "fold_rows": (fold_job, [], 3, 1),
            "pair_e": (pair_e_job, SWEEP_PAIR_E, None, 2)}
    unknown = [k for k in args.kernels.split(",") if k not in jobs]
    if unknown:
        raise SystemExit(f"unknown kernel(s) {', '.join(unknown)}; choose from {', '.join(jobs)}")
    if args.builtin_only:  # only each shape's built-in row (the launch tables' current default)
        jobs = {k: (make, [], cap, warps) for k, (make, _, cap, warps) in jobs.items()}
    rows = []
    for kind in args.kernels.split(","):
        make, cfgs, cap_at, warps_at = jobs[kind]
        for shape, d in SHAPES.items():
            tables = tables_for(KernelConfig())  # the current default, as a launch-table row
            extra = [tuple(int(x or 0) for x in tables.gather_config(d, 8, 8, 4))] \
                if kind in ("gather", "gather_fold", "fold") else \
                [tuple(int(x or 0) for x in tables.fwd_config(d, 8, 4)[1:])] if kind == "fwd" else []
            if kind == "fwd" and args.rows_fwd:
                cfgs = []  # only the built-in row (extra) and the given ones
                extra = [*extra, *(tuple(r) for r in json.loads(args.rows_fwd))]
            if kind == "pair_e" and args.rows_pair_e:
                cfgs = [tuple(r) for r in json.loads(args.rows_pair_e)]
            if kind == "fold_rows":
                builtin = tuple(int(x or 0) for x in tables.fold_config(d, 8, 8, 4))
                extra = [builtin, *([tuple(r) for r in json.loads(args.rows_fold)] if args.rows_fold
                                    else fold_variants(builtin))]
            variants = [(cfg, ahead) for cfg in dict.fromkeys([*cfgs, *extra])
                        for ahead in ([(0, 0), (1, 0), (0, 1)] if kind == "fwd" and args.ahead else [None])]
            for cfg, ahead in variants:
                fn, types, consts = make(d, cfg, True) if args.dense and make is fold_job else \
                    make(d, cfg, ahead) if ahead else make(d, cfg, True) if args.pair_e_r_in_dl and \
                    make is pair_e_job else make(d, cfg)
                warps = cfg[warps_at]
                maxnreg = (cfg[cap_at] or None) if cap_at is not None and len(cfg) > cap_at else None
                res = resources(fn, types, consts, warps, maxnreg, with_loops=args.loops)
                row = dict(kernel=fn.__name__, shape=shape, d=d, cfg=list(cfg), num_warps=warps,
                           maxnreg=maxnreg, **({"dense": True} if consts.get("DENSE") else {}),
                           **({"ahead": ["plain", "next", "resume"][ahead[0] + 2 * ahead[1]]} if ahead else {}), **res)
                rows.append(row)
                print(f"{fn.__name__:24s} {shape:5s} cfg {str(cfg):22s} {row.get('ahead', ''):6s} regs {res['regs']:3d} "
                      f"spill {res['spill_stack_bytes']:4d} B  warps/SM by regs {res['warps_per_sm_by_regs']:2d}",
                      flush=True)
                for lp in res.get("loops", []):
                    print(f"    loop {lp['start']}-{lp['end']}: {lp['instructions']} instr, LDG {lp['LDG']}, "
                          f"LDS {lp['LDS']}, STS {lp['STS']}, BAR {lp['BAR']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(date=datetime.date.today().isoformat(), triton=triton.__version__, arch="sm_90",
                           rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
