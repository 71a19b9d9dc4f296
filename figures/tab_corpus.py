"""Table datamix: composition of the corpus a run trained on (corpus.json: bytes per source
and split), one table per distinct corpus, beside the paper's anneal_pt_v3 shares."""

from __future__ import annotations

from pathlib import Path

from mhar_probe.runfiles import CORPUS, RunFiles

from .registry import Output, Skip, generator
from .tables import Cell, Table

NEEDS = "a finished run (its corpus.json, written by mhar train)"
COLUMNS = ["Split", "Source", "Documents", "Bytes", "% bytes"]


@generator("table_corpus", kind="table", paper_ref="tab:datamix", needs=NEEDS)
def make(ctx) -> list[Output]:
    seen: dict[str, tuple[str, dict]] = {}
    for path in ctx.runs["path"].values.tolist():
        files = RunFiles(Path(path))
        if files.corpus_path.exists():
            doc = files.corpus()
            seen.setdefault(str(doc.get("fingerprint") or doc.get("name")), (path, doc))
    if not seen:
        raise Skip("no run has a corpus.json", [NEEDS])
    outputs = []
    multi = len(seen) > 1
    for i, (fp, (path, doc)) in enumerate(sorted(seen.items(), key=lambda kv: kv[1][1].get("name", ""))):
        name = f"table_corpus_{i}" if multi else "table_corpus"
        t = Table(name, f"Corpus composition: {doc.get('name', '?')} (from {Path(path).name}/{CORPUS})", COLUMNS)
        last = None
        for r in doc.get("composition", []):
            t.add([Cell(r["split"], r["split"]), Cell(r["source"], r["source"]), Cell.num(r["documents"], "{:,}"),
                   Cell.num(r["bytes"], "{:,}"), Cell.num(100 * r["share"], "{:.1f}")],
                  rule_before=last is not None and r["split"] != last)
            last = r["split"]
        paper = ctx.paper["corpus"]
        for j, g in enumerate(paper["groups"]):  # the paper's groups only, so its rows do not swamp yours
            t.add([Cell("paper", "paper"), Cell(g["group"], g["group"]), Cell("-"), Cell("-"), Cell.num(g["pct"], "{:.1f}")],
                  source="paper", rule_before=j == 0)
        t.notes.append("Paper: " + paper["what"] + f" ({paper['ref']}); its {len(paper['groups'])} source groups "
                       "above, their sources (% bytes) here: " + "; ".join(
                           f"{g['group']}: " + ", ".join(f"{src} {'<0.1' if pct < 0.1 else f'{pct:.1f}'}"
                                                         for src, pct in g["sources"]) for g in paper["groups"]) + ".")
        outputs.append(Output(name, ctx.write_table(t), dict(table=t, composition=doc.get("composition", []))))
    return outputs
