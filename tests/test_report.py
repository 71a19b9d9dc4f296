"""The demo's report explains itself: the claim table inside its own section, a caption under
every figure (from figures/index.json and its generator), and a header that keeps the study's
cost when only some stages run again (per-stage times in stages.json)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from mhar_probe.demo.report import (Stage, comparison_table, figure_captions, record_stages, render_html,
                                    write_report)

RESULTS = Path(__file__).resolve().parents[1] / "results"
#: the committed studies' reports (each report.html is report.md rendered by the report stage)
COMMITTED = ("ladder", "study100m", "study100m/middle", "study100m/scale350m")

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
    assert "The study: 3 stages before this report, 343 s in all (this call: 2 stages in 5 s" in text
    assert "## sweep (300 s)" in text and "all finished, skipped" in text  # the latest log, the real cost
    record_stages(out, [Stage("sweep", 20.0, "retrained")], overwrite=True)  # --overwrite redoes the work
    assert json.loads((out / "stages.json").read_text())["sweep"]["seconds"] == 20.0


class _Page(HTMLParser):
    """The tags of an HTML page and its text outside <pre> and <code> (where Markdown syntax is literal)."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self._literal, self._text = 0, []
        self.feed(page)
        self.text = "".join(self._text)

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self._literal += tag in ("pre", "code")

    def handle_endtag(self, tag):
        self._literal -= tag in ("pre", "code")

    def handle_data(self, data):
        if not self._literal:
            self._text.append(data)


def assert_rendered(page: str) -> _Page:
    """Real HTML: tables as <table>, no Markdown syntax left in the text (**, *emphasis*, backticks)."""
    parsed = _Page(page)
    assert parsed.tags.get("table") and parsed.tags.get("td"), parsed.tags
    assert "**" not in parsed.text
    assert "`" not in parsed.text
    assert not re.search(r"(?<![\w*])\*[^\s*][^*\n]*\*(?![\w*])", parsed.text)
    assert not re.search(r"^\|.*\|$", parsed.text, re.M)  # no pipe-table line left as text
    return parsed


def test_the_runs_table_is_shown_once_and_other_sweep_logs_as_they_are(tmp_path):
    """The sweep stage prints the runs' table, which the Runs section shows rendered: its section
    points there instead of repeating the table as Markdown source in a code block."""
    out = study(tmp_path)
    text = write_report(out, [Stage("sweep", 9.0, comparison_table([]))], 9.0, "T").read_text()
    sweep = next(body for head, body in sections(text).items() if head.startswith("sweep"))
    assert "| run |" not in sweep and "under Runs above" in sweep
    text = write_report(out, [Stage("sweep", 9.0, "stopped at the time limit in grid main")], 9.0, "T").read_text()
    assert "stopped at the time limit in grid main" in next(
        body for head, body in sections(text).items() if head.startswith("sweep"))


def test_report_html_is_rendered_markdown(tmp_path):
    out = study(tmp_path)
    write_report(out, [Stage("claims", 2.0, "table"), Stage("figures", 3.0, "made")], 5.0, "Tiny `study`")
    page = assert_rendered((out / "report.html").read_text())
    assert page.tags.get("strong") and page.tags.get("em") and page.tags.get("img")
    assert "<td><strong>replicated</strong></td>" in (out / "report.html").read_text()
    assert "<code>study</code>" in (out / "report.html").read_text()
    assert "&lt;b&gt;" in render_html("a <b>raw</b> tag")  # raw HTML in the Markdown is shown, not run


@pytest.mark.parametrize("study_dir", COMMITTED)
def test_committed_report_html_is_up_to_date(study_dir):
    folder = RESULTS / study_dir
    html = (folder / "report.html").read_text(encoding="utf-8")
    assert html == render_html((folder / "report.md").read_text(encoding="utf-8"))
    assert_rendered(html)


def test_the_stage_headers_run_to_n_of_n_with_the_report_last(tmp_path, capsys):
    """Issue 54: the headers stopped at 7/8 (the report stage printed none) while the report counted 7."""
    from mhar_probe.demo.plan import DEMO
    from mhar_probe.demo.run import STAGES, run_demo
    from mhar_probe.sweep.manifest import write_manifest

    out = tmp_path / "study"
    write_manifest(out / "runs", {}, [])  # a sweep with no finished run yet: the file stages skip
    assert run_demo(out, plan=DEMO, stages=["probe", "report"]) == 0
    headers = re.findall(r"stage (\d+)/(\d+): (\w+)", capsys.readouterr().out)
    assert headers == [("1", "2", "probe"), ("2", "2", "report")]
    assert "The study: 1 stage before this report" in (out / "report.md").read_text()
    assert STAGES[-1] == "report"
