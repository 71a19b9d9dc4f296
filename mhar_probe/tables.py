"""Writing a table, in one place: the LaTeX and Markdown escapes, a Markdown pipe table, a booktabs
tabular and CSV text.

Each table of the project lays itself out with these: the figure tables (`figures/tables.py`, a
`Table` of cells), the probe tables (`analysis/probes/tables.py`, DataFrames) and the McNemar table
(`analysis/stats/report.py`), and the claim table's cells (`mhar_probe/demo/claims.py`). They differ
in layout (a title, an index column, a caption, rules between groups), not in how a cell is written.

    Markdown   | a | b |  under  |---|---:|  (first column left, the rest right-aligned);
               a `|` inside a cell is `\\|`, or it would split the cell
    LaTeX      a & b \\\\  between \\toprule, \\midrule and \\bottomrule (booktabs); every character
               LaTeX reads as markup is escaped (`tex_escape`), in headers, cells and captions
    CSV        the standard library's writer, "\\n" line ends, a float as repr(float(x)),
               None as an empty field (a DataFrame writes its own CSV: `DataFrame.to_csv`)

pytablewriter (1.2.1, in the lock through lm-eval) was weighed for this and does not keep the
tables as they are: its Markdown writer pads every column to one width (unpadded, the rule row
loses its dashes), its LaTeX writer writes an `array` of `\\verb` cells instead of booktabs, and its
CSV writer quotes every string and reformats numbers.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Iterable, Sequence

#: what each character that LaTeX reads as markup becomes in text mode ("<=" before "<")
TEX_ESCAPES: dict[str, str] = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
    "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}", "|": r"$|$", "<=": r"$\le$", "<": r"$<$",
    ">": r"$>$", "±": r"$\pm$", "×": r"$\times$",
}
_TEX = re.compile("|".join(re.escape(k) for k in sorted(TEX_ESCAPES, key=len, reverse=True)))


def tex_escape(text: object) -> str:
    """`text` as LaTeX text: each key of TEX_ESCAPES replaced by its value, in one pass (an
    escape is never escaped again)."""
    return _TEX.sub(lambda m: TEX_ESCAPES[m.group(0)], str(text))


def md_escape(text: object) -> str:
    """`text` as a Markdown table cell: `|` -> `\\|`."""
    return str(text).replace("|", "\\|")


def md_row(cells: Sequence[str]) -> str:
    """One Markdown table line of already escaped cells: `| a | b |` (an empty cell: `|  |`)."""
    return "| " + " | ".join(cells) + " |"


def md_rule(columns: int) -> str:
    """The Markdown rule under the header: the first column left-aligned, the rest right: `|---|---:|`."""
    return "|" + "|".join("---" if i == 0 else "---:" for i in range(columns)) + "|"


def tex_row(cells: Sequence[str]) -> str:
    """One tabular line of already escaped cells: `a & b \\\\`."""
    return " & ".join(cells) + r" \\"


def booktabs(spec: str, header: str, body: Iterable[str]) -> list[str]:
    """A booktabs tabular: begin{tabular}{spec}, toprule, the header line, midrule, the body lines
    (rows, or a midrule between groups), bottomrule, end{tabular}."""
    return [r"\begin{tabular}{" + spec + "}", r"\toprule", header, r"\midrule", *body,
            r"\bottomrule", r"\end{tabular}"]


def csv_field(value: object) -> object:
    """A value as the CSV writes it: None empty, a float (numpy's too) as repr(float(x))."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(float(value))
    return value


def csv_text(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """CSV of a header and rows (the csv module's quoting, "\\n" line ends)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for row in rows:
        w.writerow([csv_field(v) for v in row])
    return buf.getvalue()
