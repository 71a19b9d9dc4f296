"""Launch-table sweep for one card, with each backward kernel's time split out, and the probes that
test why the fold-block backward does not beat the gather backward (benchmarks/kernels/results.md,
"Why the fold-block backward does not cut time").

At the training microbatches by default (autocast's layout, H = 8):

1. **Probes**, every shape first, at the built-in launch rows (the card's: launch_tables.json's
   default rows, swept on an H100, with the card's own `devices` rows over them): the default
   (fold-block) backward, the same with bf16 douts (`routing_douts="storage"`: half the dout
   bytes everywhere, L2 and DRAM), and the gather backward (`stack_backward="gather"`). The diagnosis predicts that the fold
   kernel's time per (pair, position) does not move with the dout width (it is bound by each
   reader iteration's dependent chain of loads and reductions, not by bytes), and that it stays
   within about 1.3x of the gather backward's gather per pair.
2. **Sweep** of the `gather` launch rows (which also launch the fold kernel, where the table has
   no `fold` row), of the fold kernel's own rows (`fold`: the gather's values plus `sources` per
   reader iteration, 1 or 2, and prefetch 2, the next reader's w, shift and S' with its dout;
   judged by the fold kernel alone), then of the `fwd` rows, and of pair_e's (`pair_e`: readers
   per program, positions per dot step, warps; judged by pair_e_kernel alone; a GPU raises the
   first two to 16 for its dot): each candidate row laid over the
   rows chosen so far, one fwd + bwd of the whole chain to compile, then `--repeat` profiled runs (median device time per kernel); a row is judged by
   the sum of its kind's kernels (gather: stack_gather + stack_fold, the default backward) and
   must give the built-in row's gradients (max |diff| / max |g| <= `--tol`; bf16 source
   gradients differ by an ulp where the summation order changes). Candidates are tried in order
   (the built-in row first) until the (shape, kind)'s share of what is left of `--budget-s` is
   spent; each tries at least its built-in row. A candidate that raises (a row the card cannot
   run, e.g. out of shared memory) is kept as a `failed:<kind>` row with its error, and the sweep
   goes on; the built-in row raising stops it (nothing could be judged).

`--probes` names the probes to run (e.g. `fold,gather-backward`); `--deadline-s` stops starting
sweep rows that many seconds after the start, so that a device call's time limit leaves room for
the closing table. The table, printed last (lines starting `TABLE`) and stored as the JSON's
`summary`: per shape the backward's dout-reading kernels under the gather backward, today's
fold (built-in rows) and the fold at its best swept row.

Writes, after every row (probe or candidate), `--out` (meta: device, date, versions, commit,
copy bandwidth; one row per probe and candidate with `kernels_ms` and the gather / fold split of
`fold_split.split_row`) and `--table-out` (the chosen rows in launch_tables.py's format: the
card's launch table, for `--launch-table` / `KernelConfig(launch_table=...)`).

    PYTHONPATH=. python benchmarks/kernels/launch_sweep.py --commit <sha> --budget-s 120 \\
        --out $OUT/launch_sweep.json --table-out $OUT/launch_tables_tuned.json
    PYTHONPATH=. TRITON_INTERPRET=1 python benchmarks/kernels/launch_sweep.py --device cpu \\
        --shapes 32x1x1x16 --heads 2 --repeat 1 --out /tmp/s.json --table-out /tmp/t.json   # logic only
    PYTHONPATH=. python benchmarks/kernels/launch_sweep.py --kinds fold --probes fold,gather-backward \\
        --deadline-s 220 --out $OUT/fold_sweep.json --table-out $OUT/launch_tables_fold.json  # the fold's rows
    PYTHONPATH=. python benchmarks/kernels/launch_sweep.py --summarise $OUT/fold_sweep.json   # its table again

On the CPU (the Triton interpreter) there is no per-kernel device time: a row is judged by the
wall time of the whole chain, which says nothing about a GPU; that mode checks the script.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch

from mhar_probe.provenance import benchmark_record, software
from mhar_probe.bench.routing import SHAPES, SWEEP_FOLD, SWEEP_FWD, SWEEP_GATHER, SWEEP_PAIR_E, chain_fwd
from mhar_probe.bench.routing import sweep_key as table_key  # the key a kind's row is stored under
from mhar_probe.kernels import KernelConfig
from mhar_probe.kernels.launch_tables import VALUE_COLUMNS, LaunchTables, tables_for
from mhar_probe.model.routing import get_backend

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fold_split import split_row  # noqa: E402

#: kernel-name prefixes a kind's rows are judged by (the gather rows also launch the fold kernel)
JUDGED = {"gather": ("stack_gather", "stack_fold"), "fold": ("stack_fold",), "fwd": ("route_fwd",),
          "pair_e": ("pair_e",)}
#: the kernels of the backward that read stored douts (the closing table's sums)
DOUT_KERNELS = ("stack_gather", "stack_fold")
#: the probes: name -> KernelConfig fields over the default
PROBES = {"fold": {}, "fold-storage-douts": {"routing_douts": "storage"}, "gather-backward": {"stack_backward": "gather"}}
#: gather rows in the order tried: loads-first rows (which won on the H100) first, then the rest
GATHER_ORDER = sorted(SWEEP_GATHER, key=lambda row: -row[4])
#: fold rows (block_p, num_warps, prefetch, maxnreg, loads_first, sources) after the ones derived
#: from the shape's built-in row (`fold_variants`): two sources and prefetch 2 first
FOLD_ORDER = SWEEP_FOLD


def fold_variants(builtin: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The built-in fold row's variants, tried first: two sources per iteration (at the row's warps,
    then at two warps at least), the next reader's rows prefetched (prefetch 2), both. Compiled
    offline (sm_90; `regs_offline.py --kernels fold_rows`), two sources fit without spilling at two
    warps (125 / 168 / 255 registers at 100M / 350M / 1B with Triton 3.6, the GPU machine's;
    121 / 214 / 234 with 3.9) and spill at one warp at 350M and 1B, hence the two-warp row second."""
    bp, warps, pre, cap, lf, _ = builtin
    w2 = max(warps, 2)
    return list(dict.fromkeys([(bp, warps, pre, cap, lf, 2), (bp, w2, pre, cap, lf, 2), (bp, warps, 2, cap, lf, 1),
                               (bp, w2, 2, cap, lf, 2), (bp, warps, 2, cap, lf, 2)]))


def parse_shape(name: str) -> tuple[int, int, int, int]:
    """(d, L, B, T) of a benchmark shape name (`mhar_probe.bench.routing.SHAPES`) or `DxLxBxT`."""
    if name in SHAPES:
        return SHAPES[name]
    try:
        d, L, B, T = (int(x) for x in name.split("x"))
    except ValueError:
        raise SystemExit(f"shape {name!r}: not one of {', '.join(SHAPES)} nor DxLxBxT") from None
    return d, L, B, T


def chain_inputs(d: int, L: int, B: int, T: int, dtype: str, device: str, seed: int = 0):
    """The 2L + 1 sources, queries, norm weights and douts of one microbatch. `mixed`: autocast's
    layout (fp32 embedding, bf16 sublayer outputs, fp32 douts); else every tensor in `dtype`."""
    S = 2 * L + 1
    g = torch.Generator(device=device).manual_seed(seed)
    src = torch.bfloat16 if dtype == "mixed" else getattr(torch, dtype)
    xs = [torch.randn(B, T, d, device=device, generator=g).to(torch.float32 if i == 0 and dtype == "mixed" else src)
          .requires_grad_() for i in range(S)]
    qs = [(0.1 * torch.randn(d, device=device, generator=g)).bfloat16().requires_grad_() for _ in range(S)]
    gs = [(1 + 0.1 * torch.randn(d, device=device, generator=g)).bfloat16().requires_grad_() for _ in range(S)]
    douts = [torch.randn(B, T, d, device=device, generator=g).to(torch.float32 if dtype == "mixed" else src)
             for _ in range(S)]
    return xs, qs, gs, douts


def builtin_row(kind: str, d: int, H: int, width: int, card: str | None = None) -> tuple[int, ...]:
    """The row the built-in table (or its heuristic) gives `kind` at (d, H, storage width) on
    `card` (its name: the card's own rows where launch_tables.json has them, else the default)."""
    tables = tables_for(KernelConfig(), card)
    if kind == "gather":
        bp, warps, pre, cap, first = tables.gather_config(d, H, H, width)
        return bp, warps, int(pre), cap or 0, int(first)
    if kind == "fold":
        bp, warps, pre, cap, first, sources = tables.fold_config(d, H, H, width)
        return bp, warps, int(pre), cap or 0, int(first), sources
    if kind == "pair_e":
        return tuple(tables.pair_e_config(d, H))
    _, bp, warps, cap, stages = tables.fwd_config(d, H, width)
    return bp, warps, cap or 0, stages


def candidates(kind: str, builtin: tuple[int, ...], given: str | None) -> list[tuple[int, ...]]:
    """The built-in row, then `given` (a JSON list of rows) or the kind's default order (fold: the
    built-in row's variants first, `fold_variants`); no repeats."""
    default = {"gather": GATHER_ORDER, "fwd": SWEEP_FWD, "pair_e": SWEEP_PAIR_E}.get(kind) or \
        (fold_variants(tuple(builtin)) + FOLD_ORDER if len(builtin) == 6 else FOLD_ORDER)
    rows = [tuple(int(x) for x in r) for r in json.loads(given)] if given else list(default)
    bad = [r for r in rows if len(r) != len(VALUE_COLUMNS[kind])]
    if bad:
        raise SystemExit(f"{kind} rows {bad}: expected ({', '.join(VALUE_COLUMNS[kind])})")
    return list(dict.fromkeys([tuple(builtin), *rows]))




def choose(rows: list[dict], tol: float) -> dict | None:
    """The fastest row whose gradients match the reference's (None if none does)."""
    ok = [r for r in rows if r["grad_rel_err"] <= tol]
    return min(ok, key=lambda r: r["judged_ms"]) if ok else None


class Runner:
    """One shape's chain: runs fwd + bwd under a kernel configuration, times it, checks gradients."""

    def __init__(self, dims: tuple[int, int, int, int], H: int, dtype: str, device: str, repeat: int):
        self.dims, self.H, self.device, self.repeat = dims, H, device, repeat
        self.xs, self.qs, self.gs, self.douts = chain_inputs(*dims, dtype, device)
        self.backend = get_backend("triton")
        self.ref: list[torch.Tensor] | None = None

    def fwdbwd(self) -> None:
        outs = chain_fwd(self.backend, self.xs, self.qs, self.gs, self.H)
        torch.autograd.backward(outs, self.douts)

    def grads(self) -> list[torch.Tensor]:
        leaves = self.xs + self.qs + self.gs
        for t in leaves:
            t.grad = None
        self.fwdbwd()
        out = [t.grad.detach().float().clone() for t in leaves]
        for t in leaves:
            t.grad = None
        return out

    def step(self) -> None:
        self.fwdbwd()
        for t in self.xs + self.qs + self.gs:
            t.grad = None

    def times(self) -> dict[str, float]:
        """Median device ms per kernel over `repeat` profiled runs (CUDA), or {"wall": ms} (CPU)."""
        if self.device != "cuda":
            walls = []
            for _ in range(self.repeat):
                t0 = time.perf_counter()
                self.step()
                walls.append((time.perf_counter() - t0) * 1e3)
            return {"wall": statistics.median(walls)}
        from mhar_probe.bench.routing import kernel_ms

        runs = [kernel_ms(self.step) for _ in range(self.repeat)]
        names = {k for run in runs for k in run}
        return {k: statistics.median(run.get(k, 0.0) for run in runs) for k in names}

    def run(self, config: dict) -> tuple[dict[str, float], float]:
        """(ms per kernel, gradient error against the reference) under `config` (KernelConfig
        fields); the first call's gradients are the reference."""
        self.backend = get_backend("triton", KernelConfig(**config))  # the configuration travels with it
        g = self.grads()  # compiles this configuration's kernels
        kernels = self.times()
        if self.ref is None:
            self.ref = g
        err = max(((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item() for a, b in zip(g, self.ref))
        return kernels, err


def judged(kind: str, kernels: dict[str, float]) -> float:
    if "wall" in kernels:
        return kernels["wall"]
    return sum(v for k, v in kernels.items() if k.startswith(JUDGED[kind]))


def _ms(row: dict | None, prefixes: tuple[str, ...]) -> float | None:
    if row is None:
        return None
    kernels = row["kernels_ms"]
    if "wall" in kernels:
        return kernels["wall"]
    return sum(v for k, v in kernels.items() if k.startswith(prefixes))


def summary(rows: list[dict], tol: float) -> list[dict]:
    """Per shape (in order of first appearance): the dout-reading backward kernels' ms
    (stack_gather + stack_fold; the wall time of the whole chain on the CPU) under the gather
    backward (probe), today's fold (probe, built-in rows) and the fold at its best swept fold row
    (None where not run), the fold kernel alone, and the ratios."""
    out = []
    for shape in dict.fromkeys(r["shape"] for r in rows):
        mine = [r for r in rows if r["shape"] == shape]
        probe = {r["what"]: r for r in mine if r["what"].startswith("probe:")}
        best = choose([r for r in mine if r["what"] == "sweep:fold"], tol)
        gather, today = probe.get("probe:gather-backward"), probe.get("probe:fold")
        row = dict(shape=shape, gather_backward_ms=_ms(gather, DOUT_KERNELS), fold_today_ms=_ms(today, DOUT_KERNELS),
                   fold_tuned_ms=_ms(best, DOUT_KERNELS), fold_kernel_today_ms=_ms(today, ("stack_fold",)),
                   fold_kernel_tuned_ms=_ms(best, ("stack_fold",)), fold_row=best["cfg"] if best else None,
                   fold_rows_tried=sum(r["what"] == "sweep:fold" for r in mine))
        for a, b in (("fold_today_ms", "gather_backward_ms"), ("fold_tuned_ms", "gather_backward_ms"),
                     ("fold_tuned_ms", "fold_today_ms")):
            row[f"{a[:-3]}_over_{b[:-3]}"] = row[a] / row[b] if row[a] is not None and row[b] else None
        out.append(row)
    return out


def print_summary(table: list[dict], cuda: bool) -> None:
    """The closing table, each line starting `TABLE` (grep-able in a device call's log)."""
    unit = "device ms, stack_gather + stack_fold" if cuda else "CPU wall ms of the whole chain: checks the script only"
    print(f"TABLE backward kernels that read douts ({unit})")
    print(f"TABLE {'shape':12s} {'gather bwd':>10s} {'fold today':>10s} {'fold tuned':>10s} {'tuned/today':>11s} "
          f"{'tuned/gather':>12s} {'fold kernel':>15s}  fold row (tried)")

    def f(x, spec):
        return "-" if x is None else format(x, spec)

    for r in table:
        kern = f"{f(r['fold_kernel_today_ms'], '.3f')}->{f(r['fold_kernel_tuned_ms'], '.3f')}"
        print(f"TABLE {r['shape']:12s} {f(r['gather_backward_ms'], '10.3f')} {f(r['fold_today_ms'], '10.3f')} "
              f"{f(r['fold_tuned_ms'], '10.3f')} {f(r['fold_tuned_over_fold_today'], '11.3f')} "
              f"{f(r['fold_tuned_over_gather_backward'], '12.3f')} {kern:>15s}  {r['fold_row']} ({r['fold_rows_tried']})",
              flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="1B-train,350M-train,100M-train",
                    help="benchmark shapes (mhar_probe.bench.routing.SHAPES) or DxLxBxT")
    ap.add_argument("--dtype", default="mixed", help="mixed (autocast's layout), bfloat16 or float32")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kinds", default="gather,fwd",
                    help="launch-table kinds to sweep, in order: gather, fold, fwd, pair_e")
    ap.add_argument("--rows-gather", default=None, help="JSON list of gather rows to try (default: the sweep list)")
    ap.add_argument("--rows-fwd", default=None, help="JSON list of fwd rows to try (default: the sweep list)")
    ap.add_argument("--rows-pair-e", default=None, help="JSON list of pair_e rows to try (default: the sweep list)")
    ap.add_argument("--rows-fold", default=None,
                    help="JSON list of fold rows to try (default: the built-in row's variants, then FOLD_ORDER)")
    ap.add_argument("--no-probes", action="store_true")
    ap.add_argument("--probes", default=",".join(PROBES), help="probes to run, in order: " + ", ".join(PROBES))
    ap.add_argument("--fold-calls", type=int, default=None,
                    help="KernelConfig.fold_calls of every run (default: the kernels' default, 8); small "
                         "chains on the CPU need a smaller block for any fold to happen")
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="start no sweep row after this many seconds from the start (room for the table)")
    ap.add_argument("--budget-s", type=float, default=120.0,
                    help="seconds for all sweeps (what is left, shared over the (shape, kind)s left)")
    ap.add_argument("--repeat", type=int, default=3, help="profiled runs per row (median per kernel)")
    ap.add_argument("--tol", type=float, default=2e-2, help="largest max|g - g_ref| / max|g_ref| of a row")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--out")
    ap.add_argument("--table-out")
    ap.add_argument("--summarise", metavar="JSON", default=None,
                    help="only print the closing table of a sweep's --out file (one a time limit cut short)")
    args = ap.parse_args(argv)
    if args.summarise:
        doc = json.loads(Path(args.summarise).read_text())
        print_summary(summary(doc["rows"], doc["meta"]["tol"]), doc["meta"]["copy_gbps"] is not None)
        return
    if not args.out or not args.table_out:
        ap.error("--out and --table-out are required (unless --summarise)")
    t_start = time.monotonic()
    kinds = [k for k in args.kinds.split(",") if k]
    if set(kinds) - set(JUDGED):
        raise SystemExit(f"--kinds: {', '.join(sorted(set(kinds) - set(JUDGED)))}; choose from {', '.join(JUDGED)}")
    probes = [p for p in args.probes.split(",") if p]
    if set(probes) - set(PROBES):
        raise SystemExit(f"--probes: {', '.join(sorted(set(probes) - set(PROBES)))}; choose from {', '.join(PROBES)}")
    shapes = args.shapes.split(",")
    dims = {s: parse_shape(s) for s in shapes}
    width = 4 if args.dtype in ("mixed", "float32") else 2  # bytes per stored dout / forward output
    cuda = args.device == "cuda"
    card = torch.cuda.get_device_name() if cuda else None  # the built-in rows are this card's
    if cuda:
        from mhar_probe.bench.routing import copy_bandwidth

        copy_gbps = copy_bandwidth()
    else:
        copy_gbps = None
    meta = dict(device=torch.cuda.get_device_name() if cuda else "cpu (Triton interpreter)",
                date=datetime.date.today().isoformat(), commit=args.commit, **software(), copy_gbps=copy_gbps,
                provenance=benchmark_record("cuda" if cuda else "cpu", args.commit),
                dtype=args.dtype, heads=args.heads, budget_s=args.budget_s, repeat=args.repeat, tol=args.tol,
                fold_calls=args.fold_calls or KernelConfig().fold_calls,
                command=" ".join(sys.argv if argv is None else ["launch_sweep.py", *argv]))
    chosen = LaunchTables()
    trials = tempfile.mkdtemp(prefix="mhar_launch_sweep_")
    rows: list[dict] = []

    base_fields = {} if args.fold_calls is None else dict(fold_calls=args.fold_calls)

    def record(shape: str, what: str, kind: str | None, cfg, config: dict, runner: Runner) -> dict:
        config = {**base_fields, **config}
        kernels, err = runner.run(config)
        row = dict(shape=shape, what=what, kind=kind, cfg=list(cfg) if cfg else None, config=config,
                   kernels_ms=kernels, judged_ms=judged(kind or "gather", kernels), grad_rel_err=err)
        if cuda and shape in SHAPES:
            bench_row = dict(shape=shape, H=args.heads, backend="triton", kernels_ms=kernels,
                             kernel_config={k: v for k, v in config.items() if k != "launch_table"})
            dout = 2 if config.get("routing_douts") == "storage" else width
            row["split"] = [asdict(s) for s in split_row(bench_row, copy_gbps, dout)]
        rows.append(row)
        dump()  # after every row: a call cut short by its time limit keeps (and tabulates) what ran
        print(f"{shape} {what:16s} {str(cfg or ''):18s} judged {row['judged_ms']:8.3f} ms  err {err:.1e}  "
              + " ".join(f"{k[:20]} {v:.3f}" for k, v in sorted(kernels.items(), key=lambda kv: -kv[1])[:4]),
              flush=True)
        return row

    def failed(shape: str, kind: str, cfg, config: dict, exc: Exception) -> None:
        """A swept row that raised: kept as `failed:<kind>` with its error (no time, never chosen), and
        the sweep goes on with the next row."""
        rows.append(dict(shape=shape, what=f"failed:{kind}", kind=kind, cfg=list(cfg), config={**base_fields, **config},
                         error=f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"))
        dump()
        print(f"{shape} failed:{kind:9s} {str(cfg):18s} {rows[-1]['error']}", flush=True)

    def dump() -> None:
        Path(args.out).write_text(json.dumps(dict(meta=meta, rows=rows, summary=summary(rows, args.tol)),
                                             indent=1) + "\n")
        chosen.dump(args.table_out)

    runners = {}
    for shape in shapes:  # the probes of every shape first: a call cut short keeps the diagnosis
        runners[shape] = runner = Runner(dims[shape], args.heads, args.dtype, args.device, args.repeat)
        base = os.path.join(trials, f"{shape}_base.json")
        LaunchTables().dump(base)  # the built-in rows: the reference gradients come from them
        if not args.no_probes:
            for name in probes:
                record(shape, f"probe:{name}", None, None, dict(launch_table=base, **PROBES[name]), runner)
        else:
            runner.run(dict(launch_table=base, **base_fields))
        dump()
    t_sweeps, left = time.monotonic(), len(shapes) * len(kinds)
    for shape in shapes:
        d, runner = dims[shape][0], runners[shape]
        for kind in kinds:
            budget = args.budget_s - (time.monotonic() - t_sweeps)
            if args.deadline_s is not None:
                budget = min(budget, args.deadline_s - (time.monotonic() - t_start))
            share = max(0.0, budget) / left  # what is left, shared out
            left -= 1
            key = table_key(kind, d, args.heads, width)
            tried: list[dict] = []
            t0 = time.monotonic()
            given = {"gather": args.rows_gather, "fold": args.rows_fold, "fwd": args.rows_fwd,
                     "pair_e": args.rows_pair_e}[kind]
            for i, cfg in enumerate(candidates(kind, builtin_row(kind, d, args.heads, width, card), given)):
                if tried and time.monotonic() - t0 > share:
                    print(f"{shape} {kind}: budget of {share:.0f} s spent after {len(tried)} rows", flush=True)
                    break
                if args.deadline_s is not None and time.monotonic() - t_start > args.deadline_s:
                    print(f"{shape} {kind}: deadline of {args.deadline_s:.0f} s reached after {len(tried)} rows",
                          flush=True)
                    break
                trial = LaunchTables(**{**chosen.__dict__, kind: {**getattr(chosen, kind), key: cfg}})
                path = os.path.join(trials, f"{shape}_{kind}_{i}.json")
                trial.dump(path)
                try:
                    tried.append(record(shape, f"sweep:{kind}", kind, cfg, dict(launch_table=path), runner))
                except Exception as exc:  # noqa: BLE001 -- a row this card cannot run (e.g. out of shared memory)
                    if not tried:  # the built-in row: without it no row can be judged
                        raise
                    failed(shape, kind, cfg, dict(launch_table=path), exc)
            best = choose(tried, args.tol)
            if best is not None:
                getattr(chosen, kind)[key] = tuple(best["cfg"])
                print(f"{shape} {kind}: chose {tuple(best['cfg'])} ({best['judged_ms']:.3f} ms; built-in "
                      f"{tried[0]['judged_ms']:.3f} ms)", flush=True)
            dump()
    dump()
    print_summary(summary(rows, args.tol), cuda)

if __name__ == "__main__":
    main()
