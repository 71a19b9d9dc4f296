"""One table writer (issue 34): every table of the project escapes a cell the same way, a `|` never
splits a Markdown cell (read back with markdown-it's GFM tables), a LaTeX special never reaches
LaTeX raw, and the CSV reads back as written."""

from __future__ import annotations

import csv
import io
import re

import numpy as np
import pandas as pd
import pytest
from markdown_it import MarkdownIt

from analysis.probes.tables import to_latex as probe_latex, to_markdown as probe_markdown
from analysis.stats.compare import Comparison, McNemarRow
from analysis.stats.report import to_csv as mcnemar_csv, to_latex as mcnemar_latex
from figures.tables import Cell, Table, to_csv as table_csv, to_latex as table_latex, to_markdown as table_markdown
from mhar_probe.demo.claims import Claim, claims_markdown
from mhar_probe.tables import csv_text, md_escape, tex_escape

# what LaTeX prints for each character it reads as markup, written out by hand (text mode, T1)
EXPECTED_TEX = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
    "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}", "|": r"$|$", "<": r"$<$", ">": r"$>$",
    "<=": r"$\le$", "±": r"$\pm$", "×": r"$\times$",
}
NASTY = r"N <= N_min | 5% & #2 ~x^2 $a$ {b} \c ± 3 × 4 > 1"


@pytest.mark.parametrize("raw,tex", sorted(EXPECTED_TEX.items()))
def test_each_special_character(raw, tex):
    assert tex_escape(f"a{raw}b") == f"a{tex}b"


def test_an_escape_is_not_escaped_again():
    assert tex_escape("\\{}") == r"\textbackslash{}\{\}"
    assert tex_escape("<=<") == r"$\le$$<$"
    assert tex_escape("plain text, 0.25 (-0.1)") == "plain text, 0.25 (-0.1)"


def _raw_specials(tex: str) -> list[str]:
    """Characters LaTeX reads as markup left once the escapes of EXPECTED_TEX are taken out."""
    for esc in sorted(EXPECTED_TEX.values(), key=len, reverse=True):
        tex = tex.replace(esc, " ")
    return re.findall(r"[\\&%$#_{}~^|<>±×]", tex)


@pytest.mark.parametrize("seed", range(5))
def test_no_special_is_left_raw(seed):
    rng = np.random.default_rng(seed)
    alphabet = [*EXPECTED_TEX, "a", " ", "1", "-", "(", "=", "\\textbf"]
    text = "".join(rng.choice(alphabet, 60))
    assert not _raw_specials(tex_escape(text)), tex_escape(text)


def _mcnemar(task: str) -> Comparison:
    row = McNemarRow(task=task, filter="none", metric="acc", n=10, acc_a=0.5, acc_b=0.6, delta=0.1, b=1, c=2,
                     p_value=0.5, p_holm=0.5, ci_low=-0.1, ci_high=0.3, n_a=10, n_b=10, only_a=0, only_b=0,
                     duplicated_a=0, duplicated_b=0, hash_mismatch=0, hash_unchecked=0)
    return Comparison("A", "B", "d1", "d2", [row])


def test_the_three_latex_writers_escape_a_cell_alike():
    """The figure table, the probe table and the McNemar table write one text the same way."""
    t = Table("t", "title", ["run", NASTY])
    t.add([NASTY, 1.0])
    fig = table_latex(t)
    probe = probe_latex(pd.DataFrame({NASTY: [1.0]}, index=[NASTY]), caption=NASTY)
    mcn = mcnemar_latex(_mcnemar(NASTY))
    escaped = tex_escape(NASTY)
    assert not _raw_specials(escaped)
    assert fig.count(escaped) == 2 and probe.count(escaped) == 3 and mcn.count(escaped) == 1
    assert not any("N_min" in tex or "5%" in tex for tex in (fig, probe, mcn))


def _gfm_cells(markdown: str) -> list[list[str]]:
    """The cells of the first table as markdown-it (GFM tables) reads them, header first."""
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    rows, cells, inline = [], None, False
    for tok in tokens:
        if tok.type == "tr_open":
            cells = []
        elif tok.type in ("th_open", "td_open"):
            inline = True
        elif tok.type == "inline" and inline:
            cells.append(tok.content)
            inline = False
        elif tok.type == "tr_close":
            rows.append(cells)
    return rows


def test_a_bar_in_a_header_or_cell_stays_in_its_markdown_cell():
    """The seeds table's "|mean|/SE" header split into two cells: GFM then read no table at all."""
    t = Table("t", "title", ["run", "|mean|/SE"])
    t.add(["a|b", Cell("|D|", 1.0, bold=True)])
    t.add(["paper|run", 2.0], source="paper")
    assert _gfm_cells(table_markdown(t)) == [["run", "|mean|/SE"], ["a|b", "**|D|**"], ["*paper|run*", "*2.000*"]]
    df = pd.DataFrame({"max |D|": [0.5]}, index=["x|y"])
    assert _gfm_cells(probe_markdown(df)) == [["", "max |D|"], ["x|y", "0.500"]]
    claim = Claim("order", "|D| 0.1", "holds", "a | b", paper="the paper's |D|")
    assert _gfm_cells(claims_markdown([claim]))[1] == ["the paper's |D|", "|D| 0.1", "**holds**", "a | b"]


def test_markdown_escape_is_the_bar_alone():
    assert md_escape("a|b*c_d") == r"a\|b*c_d"


def test_csv_reads_back_as_written():
    header = ["name", "x", "note"]
    rows = [["a,b", 0.1, None], ['say "hi"', np.float64(1 / 3), True], ["line\nbreak", 7, ""]]
    back = list(csv.reader(io.StringIO(csv_text(header, rows))))
    assert back == [header, ["a,b", "0.1", ""], ['say "hi"', repr(1 / 3), "True"], ["line\nbreak", "7", ""]]


def test_a_numpy_float_is_written_as_a_number_in_every_csv():
    """repr(np.float64(x)) is "np.float64(x)" under numpy 2; the figure tables wrote that."""
    t = Table("t", "title", ["run", "x"])
    t.add([Cell("a", "a"), Cell("0.333", np.float64(1 / 3))])
    assert table_csv(t).splitlines()[1] == f"yours,a,{1 / 3!r}"
    cmp = _mcnemar("task")
    cmp.rows[0].acc_a = np.float64(0.25)
    assert list(csv.DictReader(io.StringIO(mcnemar_csv(cmp))))[0]["acc_a"] == "0.25"
