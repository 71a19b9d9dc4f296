"""Shared look of every figure: colour-blind-safe colours (Okabe-Ito), paper-size fonts,
one colour and label per method, and deterministic PNG/PDF output.

Sizes: COLUMN (3.35 in) and FULL (6.75 in) wide, 8 pt text, so a figure placed at its
natural width in a two-column or one-column paper reads at the body text size.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

from mhar_probe.atomic import write_with  # noqa: E402
from mhar_probe.errors import UserError  # noqa: E402
from mhar_probe.model.methods import METHODS, display_name  # noqa: E402

COLUMN = 3.35  # inches
FULL = 6.75
DPI = 200

OKABE_ITO = {
    "black": "#000000", "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7",
}
#: one Okabe-Ito hue per method (colour-blind safe), no two alike in lightness or hue family:
#: the baseline black, MHAR vermillion, single-head blue, hyper-connections reddish purple,
#: head-wise MHAR bluish green (orange is left out: beside vermillion it is the pair most often confused)
METHOD_COLORS = {
    "baseline": OKABE_ITO["black"], "hyper": OKABE_ITO["purple"], "attnres": OKABE_ITO["blue"],
    "mhar": OKABE_ITO["vermillion"], "mhar_hw": OKABE_ITO["green"], "delta": OKABE_ITO["sky"],
}
METHOD_ORDER = METHODS
#: sequential palette for loss grids (lower = lighter), cells without a run are grey
GRID_CMAP = "crest"
MISSING_COLOR = "#D9D9D9"
WEIGHT_CMAP = "mako_r"  # depth weights: sequential, light = 0
UNREACHABLE = "#808080"  # cells a site cannot read (masked): mid grey, far from every masked colormap's colours (tests/test_figures.py)
STAR_COLOR = "#FFC20A"  # gold, black-edged so it reads on every cell
DIAGONAL_COLOR = OKABE_ITO["vermillion"]
PAPER_COLOR = "#9A9A9A"

RC = {
    "font.size": 8, "axes.titlesize": 8.5, "axes.labelsize": 8, "xtick.labelsize": 7,
    "ytick.labelsize": 7, "legend.fontsize": 7, "legend.frameon": False, "figure.dpi": 100,
    "savefig.dpi": DPI, "axes.spines.top": False, "axes.spines.right": False,
    "axes.linewidth": 0.7, "lines.linewidth": 1.3, "lines.markersize": 4,
    "pdf.fonttype": 42, "ps.fonttype": 42, "svg.hashsalt": "mhar-probe",
    "font.family": "DejaVu Sans", "axes.titleweight": "bold",
    "xtick.major.size": 3, "ytick.major.size": 3, "xtick.major.width": 0.6, "ytick.major.width": 0.6,
}


def method_color(method: str) -> str:
    return METHOD_COLORS.get(method, OKABE_ITO["black"])


def method_label(method: str) -> str:
    """The method's name in figures ('Single-head'): the methods table's `display` (`run_label`
    adds the head count)."""
    return display_name(method)


@contextlib.contextmanager
def paper_style() -> Iterator[None]:
    """Seaborn 'ticks' with the paper rc; restores the caller's settings afterwards."""
    with plt.rc_context():
        sns.set_theme(style="ticks", rc=RC)
        plt.rcParams.update(RC)
        yield
    sns.reset_orig()


def new_figure(width: float = COLUMN, aspect: float = 0.72, **kw) -> tuple[plt.Figure, object]:
    """A figure `width` inches wide and `width * aspect` tall (constrained layout)."""
    return plt.subplots(figsize=(width, width * aspect), layout="constrained", **kw)


PNG_META = {"Software": None}
PDF_META = {"Creator": None, "Producer": None, "CreationDate": None, "ModDate": None}


def save_figure(fig: plt.Figure, out_dir: Path, name: str, *, overwrite: bool = False) -> list[Path]:
    """Write NAME.png and NAME.pdf atomically with fixed metadata (byte-stable); closes `fig`."""
    out_dir = Path(out_dir)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    existing = [str(p) for p in paths if p.exists()]
    if existing and not overwrite:
        plt.close(fig)
        raise UserError(f"{', '.join(existing)} already exist; pass --overwrite to replace them")
    out_dir.mkdir(parents=True, exist_ok=True)
    for path, meta in zip(paths, (PNG_META, PDF_META)):
        write_with(path, lambda tmp: fig.savefig(tmp, format=path.suffix[1:], metadata=meta, dpi=DPI))
    plt.close(fig)
    return paths
