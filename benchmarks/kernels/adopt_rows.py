"""Make a launch sweep's winning rows a card's built-in rows (`launch_tables.json`'s `devices`).

    python benchmarks/kernels/adopt_rows.py SWEEP.json [--table PATH] [--margin 0.02] [--dry-run]

SWEEP.json is what `launch_sweep.py --out` writes (its `meta.device` names the card, as
`torch.cuda.get_device_name` gave it). Per (shape, kind) swept, the first row tried is the card's
row at the time (`launch_sweep.builtin_row`); the fastest row whose gradients passed the sweep's
tolerance (`launch_sweep.choose`) is adopted only if it beats that row by more than `--margin` of
its time (a win inside the sweep's noise is no reason to change a default). Adopted rows go under
the card's name in the table, laid over its rows there; nothing else in the file changes, and the
file keeps its layout (one row per line). Prints one line per decision.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # the package, where it is not installed (the GPU machine)
from launch_sweep import choose, parse_shape, table_key  # noqa: E402

from mhar_probe.errors import UserError  # noqa: E402
from mhar_probe.kernels.launch_tables import BUILTIN, KINDS, load_tables  # noqa: E402


def read_sweep(path: str) -> dict:
    """A launch_sweep.py --out document, or one line saying why it is not one (SystemExit)."""
    try:
        sweep = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{path}: cannot read a sweep record ({exc})") from None
    meta = sweep.get("meta") if isinstance(sweep, dict) else None
    if not isinstance(meta, dict) or not isinstance(sweep.get("rows"), list) \
            or not {"device", "dtype", "heads", "tol"} <= set(meta):
        raise SystemExit(f"{path}: not a launch_sweep.py --out record (needs `meta` with device, dtype, heads "
                         "and tol, and `rows`)")
    return sweep


def copy_card(doc: dict, source: str, card: str) -> dict:
    """`doc` (a launch table) with card `card`'s entry replaced by card `source`'s rows, so that
    kernels on `card` run `source`'s rows (device_run.sh cardtests: a card's rows tested on
    whichever card a call gets); unchanged where the two are the same card."""
    cards = doc.get("devices", {})
    if source not in cards:
        raise SystemExit(f"no launch rows for card {source!r}; the table has rows for: {', '.join(cards) or 'none'}")
    if source == card:
        return doc
    doc = json.loads(json.dumps(doc))
    doc["devices"][card] = doc["devices"][source]
    return doc


def decisions(sweep: dict, margin: float) -> list[dict]:
    """Per (shape, kind) swept: the card's row (the first tried), the best passing row, whether it
    is adopted, and the table key it goes under."""
    meta, out = sweep["meta"], []
    width = 4 if meta["dtype"] in ("mixed", "float32") else 2
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in sweep["rows"]:
        if row["what"].startswith("sweep:"):
            groups.setdefault((row["shape"], row["kind"]), []).append(row)
    for (shape, kind), tried in groups.items():
        base, best = tried[0], choose(tried, meta["tol"])
        adopt = (best is not None and best is not base
                 and best["judged_ms"] < (1.0 - margin) * base["judged_ms"])
        out.append(dict(shape=shape, kind=kind, key=list(table_key(kind, parse_shape(shape)[0], meta["heads"], width)),
                        builtin=base["cfg"], builtin_ms=base["judged_ms"], best=best and best["cfg"],
                        best_ms=best and best["judged_ms"], adopt=adopt))
    return out


def format_table(doc: dict) -> str:
    """The table's JSON in launch_tables.json's layout: two-space indents, each row on one line."""
    def rows_block(rows: list, indent: str) -> str:
        if not rows:
            return "[]"
        return "[\n" + ",\n".join(indent + "  " + json.dumps(r) for r in rows) + "\n" + indent + "]"

    def kinds_block(block: dict, indent: str) -> list[str]:
        return [f'{indent}"{k}": {rows_block(block[k], indent)}' for k in KINDS if k in block]

    parts = [f'  "schema": {json.dumps(doc["schema"])}'] if "schema" in doc else []
    if "columns" in doc:
        parts.append('  "columns": {\n' + ",\n".join(f'    "{k}": {json.dumps(v)}' for k, v in doc["columns"].items())
                     + "\n  }")
    parts += kinds_block(doc, "  ")
    if doc.get("devices"):
        cards = [f'    {json.dumps(name)}: {{\n' + ",\n".join(kinds_block(card, "      ")) + "\n    }"
                 for name, card in doc["devices"].items()]
        parts.append('  "devices": {\n' + ",\n".join(cards) + "\n  }")
    odd = sorted(set(doc) - {"schema", "columns", "devices", *KINDS})
    if odd:
        raise SystemExit(f"the launch table has entries this script does not write back: {odd}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def adopt(doc: dict, card: str, chosen: list[dict]) -> dict:
    """`doc` with the adopted rows under devices[card]: a row with the same key replaced where it
    stands, a new one appended; the card's kinds in launch_tables.KINDS' order."""
    doc = json.loads(json.dumps(doc))
    entry = doc.setdefault("devices", {}).setdefault(card, {})
    for dec in chosen:
        if not dec["adopt"]:
            continue
        nk, new = len(dec["key"]), [*dec["key"], *dec["best"]]
        rows = entry.setdefault(dec["kind"], [])
        same = [i for i, r in enumerate(rows) if r[:nk] == dec["key"]]
        if same:
            rows[same[0]] = new
        else:
            rows.append(new)
    doc["devices"][card] = {k: entry[k] for k in KINDS if k in entry}
    return doc


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep", help="launch_sweep.py --out JSON")
    ap.add_argument("--table", default=str(BUILTIN), help="launch table to write into (default: the built-in one)")
    ap.add_argument("--margin", type=float, default=0.02, help="fraction of the card's row's time a row must win by")
    ap.add_argument("--dry-run", action="store_true", help="print the decisions, write nothing")
    args = ap.parse_args(argv)
    if not 0.0 <= args.margin < 1.0:
        ap.error(f"--margin {args.margin}: a fraction of the card's row's time, in [0, 1)")
    sweep = read_sweep(args.sweep)
    card = sweep["meta"]["device"]
    if card.startswith("cpu"):
        raise SystemExit(f"{args.sweep}: the sweep ran on {card}; only a card's rows can be adopted")
    chosen = decisions(sweep, args.margin)
    for dec in chosen:
        verdict = "adopt" if dec["adopt"] else "keep"
        best = "none passed" if dec["best"] is None else f"best {tuple(dec['best'])} {dec['best_ms']:.3f} ms"
        print(f"{card} {dec['shape']} {dec['kind']}: {verdict}; card's row {tuple(dec['builtin'])} "
              f"{dec['builtin_ms']:.3f} ms, {best}")
    if args.dry_run or not any(d["adopt"] for d in chosen):
        return
    path = Path(args.table)
    try:
        load_tables(path)  # the table to write into is one (a bad file is refused with its name)
    except UserError as exc:
        raise SystemExit(str(exc)) from None
    text = format_table(adopt(json.loads(path.read_text()), card, chosen))
    path.write_text(text)
    load_tables(path)  # the file still parses (a bad row would be refused here, with its name)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
