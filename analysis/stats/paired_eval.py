"""`mhar stats mcnemar`: the paired exact McNemar test per task of two LM-eval harness
`--log_samples` outputs (`compare.compare_eval_dirs`), with its tables written as
mcnemar.csv / .json / .tex (`report`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .compare import MAX_UNPAIRED, Comparison, compare_eval_dirs
from .errors import StatsError
from .output import check_writable
from .report import format_table, write_outputs

#: the files `mcnemar_eval_dirs` writes under `out`, as STEM.SUFFIX
SUFFIXES = ("csv", "json", "tex")


@dataclass
class McNemar:
    """The comparison of arm A and arm B and the files written, if any."""

    comparison: Comparison
    written: list[Path] = field(default_factory=list)

    def lines(self) -> list[str]:
        """What `mhar stats mcnemar` prints: the table and its notes, then the files written."""
        return [format_table(self.comparison)] + [f"wrote {p}" for p in self.written]


def mcnemar_eval_dirs(dir_a: str | Path, dir_b: str | Path, *, tasks: Sequence[str] | None = None,
                      filters: Sequence[str] | None = None, metric: str | None = None, out: str | Path | None = None,
                      overwrite: bool = False, n_boot: int = 10_000, level: float = 0.95, seed: int = 0,
                      allow_unpaired: bool = False, date_a: str | None = None, date_b: str | None = None,
                      stem: str = "mcnemar") -> McNemar:
    """Exact McNemar per task (and filter) on the items both arms answered, with a paired bootstrap
    CI of acc B - acc A (`n_boot` resamples at `level`, `seed`) and Holm's correction; tasks where
    more than MAX_UNPAIRED of the items do not pair are refused unless `allow_unpaired`. `out`:
    also write STEM.{csv,json,tex} there (checked before the work)."""
    if n_boot < 1:
        raise StatsError(f"--n-boot must be positive, got {n_boot}")
    if out is not None:  # fail before the (slow) work if outputs exist
        check_writable([Path(out) / f"{stem}.{s}" for s in SUFFIXES], overwrite=overwrite)
    cmp = compare_eval_dirs(dir_a, dir_b, tasks=tasks, filters=filters, metric=metric, n_boot=n_boot, level=level,
                            seed=seed, date_a=date_a, date_b=date_b,
                            max_unpaired=1.0 if allow_unpaired else MAX_UNPAIRED)
    result = McNemar(cmp)
    if out is not None:
        result.written = write_outputs(cmp, out, overwrite=overwrite, stem=stem)
    return result
