"""The README's speed numbers ("Numbers (H100, ...)" under the kernels' section), each recomputed
from the committed records it names: the H100 training steps with the held fold kernel and the
forward's lookahead (benchmarks/train_throughput/h100_step_ahead_*.json, its arm ARM), the routing's floors (byte_floors.py), the
kernel table (benchmarks/kernels/h100_kernel_table{,_1b}_734ef24.json, ..._1b_fla_ce3036b.json, ..._h8_34f0258.json,
..._{100m,350m}_fla_ec96206.json)
and the backward's bytes
(route/bwd_fold.plan_bytes)."""
from __future__ import annotations

import json
from pathlib import Path

from mhar_probe.kernels.route.bwd_fold import backward_plan, model_layout, plan_bytes
from script_checks import load_script

ROOT = Path(__file__).resolve().parents[1]
STEP = ROOT / "benchmarks" / "train_throughput"
KERN = ROOT / "benchmarks" / "kernels"
PRESETS = ("100m", "350m", "1b")
ARM = "mhar"  # the default step (lookahead, 16-row weights' loop, stored norms)


def _readme() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("Numbers (H100, ")
    return " ".join(text[start:text.index("The kernels take no environment switches", start)].split())


def _arms() -> dict[str, dict[str, dict]]:
    out = {}
    for p in PRESETS:
        doc = json.loads((STEP / f"h100_step_pipe_{p}.json").read_text())
        out[p] = {r["arm"]: r for r in doc["results"]}
    return out


def _k(x: float) -> str:
    """419,411 -> 419k; 94,005 -> 94.0k (three figures)."""
    return f"{x / 1e3:.0f}k" if x >= 1e5 else f"{x / 1e3:.1f}k"


def _j(vals, fmt: str, end: str = "") -> str:
    """' / '-joined values, each formatted with `fmt` and followed by `end`."""
    return " / ".join(format(v, fmt) + end for v in vals)


def test_throughput_numbers_are_the_step_records():
    text, arms = _readme(), _arms()
    bt = load_script("benchmarks/train_throughput/train_throughput.py")
    base = [arms[p]["baseline"] for p in PRESETS]
    mhar = [arms[p][ARM] for p in PRESETS]
    assert f"baseline {' / '.join(_k(r['tokens_per_s']) for r in base)} tokens/s at 100M / 350M / 1B" in text
    assert f"(MFU {_j((100 * r['mfu'] for r in base), '.0f', '%')})" in text
    assert f"MHAR (H=8) {' / '.join(_k(r['tokens_per_s']) for r in mhar)}" in text
    paper = [bt.PAPER[p][1] for p in PRESETS]
    assert f"{_j((r['tokens_per_s'] / q for r, q in zip(mhar, paper)), '.1f', 'x')} the paper's *baseline*" in text
    assert f"({_j((q / 1e3 for q in paper), '.1f', 'k')})" in text  # as the paper states them
    assert f"{_j((r['vs_baseline'] for r in mhar), '.3f', 'x')} of ours" in text
    busy = [r["busy_fraction_of_step"] for r in mhar]
    assert f"busy {100 * min(busy):.1f}-{100 * max(busy):.1f}% of MHAR's step" in text
    mem = [r["memory_vs_baseline"] for r in mhar]
    assert f"Peak memory {min(mem):.2f}-{max(mem):.2f}x the baseline's" in text
    eight = {r["arm"]: r for r in json.loads((STEP / "h100_step_pipe_100m_vocab8192.json").read_text())["results"]}["mhar"]
    assert all(r["routing_forward"] == "lookahead" and r["routing_stored_norms"] for r in [eight, *mhar])
    assert f"({eight['memory_vs_baseline']:.2f}x at the study's 8,192-word vocabulary, where MHAR runs at " \
           f"{eight['vs_baseline']:.3f}x" in text


def test_routing_numbers_are_the_floors_and_the_kernel_table():
    text, arms = _readme(), _arms()
    bf = load_script("benchmarks/kernels/byte_floors.py")
    rows = [bf.step_rows({"results": [arms[p][ARM]], "meta": {"args": {}}}, 2933.0)[0] for p in PRESETS]
    assert (f"take {_j((r['routing_ms'] for r in rows), '.1f')} ms of a step, "
            f"{_j((r['routing_x_stack'] for r in rows), '.2f')}x their stack floor") in text
    assert f"and {_j((r['routing_x_f4'] for r in rows), '.1f')}x the 4-byte floor" in text
    # the newest run of each (shape, H) wins: 1B at H = 1 ran again with FLA in its process (ce3036b),
    # every shape at H = 8 with main's kernels of 2026-12-07 (34f0258), 100M and 350M at H = 1 with FLA
    # and the kernels of 2026-12-07 (ec96206)
    rows_ = [r for name in ("h100_kernel_table_734ef24.json", "h100_kernel_table_1b_734ef24.json",
                            "h100_kernel_table_1b_fla_ce3036b.json", "h100_kernel_table_h8_34f0258.json",
                            "h100_kernel_table_100m_fla_ec96206.json", "h100_kernel_table_350m_fla_ec96206.json")
             for r in json.loads((KERN / name).read_text())["rows"]]
    by = {(r["shape"], r["H"], r["backend"]): r for r in rows_}
    keys = [(s, h) for s, h, b in by if b == "triton"]
    assert len(keys) == 6  # 100M, 350M, 1B at H = 1 and 8

    def ratio(s, h, b):
        return by[(s, h, b)]["graph_fwdbwd_ms"] / by[(s, h, "triton")]["graph_fwdbwd_ms"]

    floor = [1 / by[(s, h, "triton")]["graph_floor_fraction"] for s, h in keys]
    comp = [ratio(s, h, "compile") for s, h in keys]
    eager = [ratio(s, h, "eager") for s, h in keys]
    assert f"they are {min(floor):.2f}-{max(floor):.2f}x the 4-byte floor, {min(comp):.1f}-{max(comp):.1f}x " \
           f"faster than `torch.compile` of the reference and {min(eager):.0f}-{max(eager):.0f}x than eager" in text
    fla = [ratio(s, h, "fla") for s, h in keys if (s, h, "fla") in by]
    assert len(fla) == 3 and f"{min(fla):.1f}-{max(fla):.1f}x faster than FLA's `fused_attnres` at H=1 (100M, 350M and 1B" in text


def test_backward_bytes_are_the_plans():
    text = _readme()
    fold, gather = [], []
    for calls, d in ((25, 512), (49, 1024), (73, 1280)):
        layout = model_layout(calls)
        fold.append(plan_bytes(backward_plan(layout, calls - 1, 8), layout, [8] * calls, d, 2, 4))
        gather.append(plan_bytes(backward_plan(layout, calls - 1, 0), layout, [8] * calls, d, 2, 4))
    assert (f"moves {_j(fold, '.1f')} bytes per pair-element at 100M / 350M / 1B, "
            f"the gather backward {_j(gather, '.1f')}") in text


def test_kernels_readme_where_the_time_goes_is_the_pipe_steps():
    """mhar_probe/kernels/README.md's "Where the time goes": the table as byte_floors.py renders it from
    the e035df5 step records, the 09d3627 steps it compares with, and the bullets' shares and ms."""
    bf = load_script("benchmarks/kernels/byte_floors.py")
    text = (ROOT / "mhar_probe" / "kernels" / "README.md").read_text()
    flat = " ".join(text.split())

    def rows(pattern):
        return [bf.step_rows(json.loads((STEP / pattern.format(p)).read_text()), 2933.0)[0] for p in PRESETS]

    now, then = rows("h100_step_pipe_{}.json"), rows("h100_step_{}.json")
    assert bf.time_table(now) in text
    assert (f"the routing took {_j((r['routing_ms'] for r in then), '.2f')} ms, "
            f"{_j((r['routing_x_stack'] for r in then), '.2f')}x the stack floor") in flat
    m = now[0]  # 100M
    assert f"move {m['built_ms'] / m['stack_ms']:.2f}x the stack floor's bytes" in flat
    g = m["groups"]
    assert (f"asks them to average {1 / m['target55_x_built']:.0%} of copy over those bytes; they average "
            f"{1 / m['routing_x_built']:.0%}, the backward {g['bwd']['of_copy']:.0%}, the forward "
            f"{g['fwd']['of_copy']:.0%} and pair_e {g['pair_e']['of_copy']:.0%}") in flat
    b = now[2]  # 1B
    arm = next(r for r in json.loads((STEP / "h100_step_pipe_1b.json").read_text())["results"] if r["arm"] == ARM)
    fold = next(ms for ms, _, name in arm["profile"]["top_kernels"] if name == "stack_fold_held_kernel")
    assert f"the held fold**, {fold:.2f} ms of the dout-reading backward's {b['groups']['bwd']['ms']:.2f}" in flat
