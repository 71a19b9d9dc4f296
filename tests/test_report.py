"""The demo's report explains itself: the claim table inside its own section, a caption under
every figure (from figures/index.json and its generator), and a header that keeps the study's
cost when only some stages run again (per-stage times in stages.json)."""

from __future__ import annotations

import json
from pathlib import Path

from mhar_probe.demo.report import Stage, figure_captions, record_stages, write_report

CLAIMS = "## Claims\n\n| claim (paper) | ours | verdict | how read |\n|---|---|---|---|\n| A < B | -0.1 | **replicated** | x |\n"


def study(tmp_path: Path) -> Path:
    out = tmp_path / "study"
    (out / "figures").mkdir(parents=True)
    (out / "claims.md").write_text(CLAIMS)
    (out / "figures" / "training_curves_tiny.png").write_bytes(b"png")
    (out / "figures" / "index.json").write_text(json.dumps({"made": {"training_curves": [
        {"name": "training_curves_tiny", "files": ["training_curves_tiny.png"], "notes": ["seed 42 only"]}]},
        "skipped": {}, "failed": {}}))
    return out


def sections(text: str) -> dict[str, str]:
    parts = text.split("\n## ")
    return {p.split("\n", 1)[0]: p.split("\n", 1)[1] if "\n" in p else "" for p in parts[1:]}


def test_the_claim_table_sits_in_the_claims_section_and_figures_have_captions(tmp_path):
    out = study(tmp_path)
    stages = [Stage("sweep", 100.0, "trained"), Stage("claims", 2.0, "table"), Stage("figures", 30.0, "made")]
    text = write_report(out, stages, 132.0, "Tiny study").read_text()
    before_runs = text.split("## Runs")[0]
    assert "| claim (paper)" not in before_runs  # not floating above everything
    claims = next(body for head, body in sections(text).items() if head.startswith("claims"))
    assert "| A < B | -0.1 | **replicated** | x |" in claims and "95% interval" in claims
    assert "\n## Claims" not in text  # claims.md's own heading is not repeated
    caption = figure_captions(out / "figures")["training_curves_tiny"]
    assert caption.startswith("Training curves") and "fig:trainloss" in caption and "seed 42 only." in caption
    assert f"![training_curves_tiny](figures/training_curves_tiny.png)\n\n*{caption}*" in text
    assert f"<em>{caption}</em>" in (out / "report.html").read_text()


def test_a_partial_rerun_keeps_the_studys_cost_in_the_header(tmp_path):
    out = study(tmp_path)
    write_report(out, [Stage("sweep", 300.0, "trained 13 runs"), Stage("figures", 40.0, "")], 340.0, "T")
    text = write_report(out, [Stage("sweep", 2.0, "all finished, skipped"), Stage("claims", 3.0, "t")], 5.0,
                        "T").read_text()
    assert "The study: 3 stages, 343 s in all (this call: 2 stages in 5 s" in text
    assert "## sweep (300 s)" in text and "all finished, skipped" in text  # the latest log, the real cost
    record_stages(out, [Stage("sweep", 20.0, "retrained")], overwrite=True)  # --overwrite redoes the work
    assert json.loads((out / "stages.json").read_text())["sweep"]["seconds"] == 20.0
