"""Run the generators: every figure and table the inputs make possible, a list of what was
skipped and why, and an index (index.md, index.json) of both in the output directory."""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from mhar_probe.atomic import write_json, write_text
from mhar_probe.errors import UserError

from .context import Context
from .registry import Output, Skip, load_generators


@dataclass
class BuildReport:
    out: Path
    made: dict[str, list[Output]] = field(default_factory=dict)
    skipped: dict[str, Skip] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(
            made={k: [dict(name=o.name, files=[p.name for p in o.paths], notes=o.notes) for o in v]
                  for k, v in self.made.items()},
            skipped={k: dict(reason=s.reason, needs=s.needs) for k, s in self.skipped.items()},
            failed=self.failed)

    def lines(self) -> list[str]:
        """What `mhar figures` prints: each output made, each generator skipped (and what it needs),
        each that failed (the first line of its error), and the index."""
        out = [f"made     {o.name}: {', '.join(p.name for p in o.paths)}"
               for outputs in self.made.values() for o in outputs]
        out += [f"skipped  {name}: {skip.reason}" + (f" -- needs: {'; '.join(skip.needs)}" if skip.needs else "")
                for name, skip in self.skipped.items()]
        out += [f"FAILED   {name}: {err.splitlines()[0]}" for name, err in self.failed.items()]
        return out + [f"index: {self.out / 'index.md'}"]


def default_benchmark_dirs(runs_dir: Path | None) -> list[Path]:
    """RUNS_DIR/benchmarks where it exists (the study's own); never the working directory, so
    the same runs give the same tables wherever the command runs (--benchmarks names others,
    e.g. the repository's benchmarks/)."""
    dirs = [runs_dir / "benchmarks"] if runs_dir else []
    return [d for d in dirs if d.is_dir()]


def build(runs_dir: str | Path | None, out: str | Path, *, only: Sequence[str] | None = None,
          overwrite: bool = False, benchmarks: Sequence[str | Path] | None = None,
          evals: str | Path | None = None, mhar_heads: int | None = None,
          more_runs: Mapping[str, Sequence[str | Path]] | None = None) -> BuildReport:
    """Make every figure/table (or those in `only`) from the inputs; never raises for a skip.
    `mhar_heads`: the H that stands for MHAR in the comparison tables (default: `choose_mhar_H`).
    `more_runs`: generator name -> further run folders that generator alone reads beside RUNS_DIR
    (e.g. {"table_lr_sweep": [second-rate runs]}); every other generator reads RUNS_DIR only."""
    registry = load_generators()
    more = {name: tuple(Path(p) for p in folders) for name, folders in (more_runs or {}).items()}
    for names in (only or [], more):
        unknown = [n for n in names if n not in registry]
        if unknown:
            raise UserError(f"unknown figure/table name(s) {', '.join(unknown)}; known: {', '.join(registry)}")
    runs = Path(runs_dir) if runs_dir is not None else None
    if runs is not None and not runs.is_dir():
        raise UserError(f"runs directory {runs} does not exist")
    if more and runs is None:
        raise UserError("further run folders need a runs directory beside them")
    for folder in {p for folders in more.values() for p in folders}:
        if not folder.is_dir():
            raise UserError(f"runs directory {folder} does not exist")
    out = Path(out)
    if (out / "index.json").exists() and not overwrite:
        raise UserError(f"{out} already holds figures (index.json); pass --overwrite to regenerate them")
    ctx = Context(runs_dir=runs, out=out, overwrite=overwrite, mhar_heads=mhar_heads,
                  benchmarks=[Path(b) for b in benchmarks] if benchmarks else default_benchmark_dirs(runs),
                  evals=Path(evals) if evals else (runs / "evals" if runs and (runs / "evals").is_dir() else None))
    report = BuildReport(out=out)
    for name, gen in registry.items():
        if only and name not in only:
            continue
        try:  # a generator with further folders gets its own context (its own runs dataset)
            report.made[name] = gen.make(replace(ctx, more_runs=more[name]) if more.get(name) else ctx)
        except Skip as skip:
            report.skipped[name] = skip
        except UserError:
            raise
        except Exception as exc:  # a bug in one generator must not hide the others' output
            report.failed[name] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"
    write_index(report, registry)
    return report


def write_index(report: BuildReport, registry: dict) -> None:
    """index.json and index.md in the output directory (replaced atomically)."""
    out = report.out
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "index.json", report.as_dict())
    lines = ["# Figures and tables", ""]
    for name, outputs in report.made.items():
        gen = registry[name]
        for o in outputs:
            lines.append(f"## {o.name} ({gen.kind}; paper: {gen.paper_ref})")
            lines.append("")
            png = [p for p in o.paths if p.suffix == ".png"]
            md = [p for p in o.paths if p.suffix == ".md"]
            if png:
                lines.append(f"![{o.name}]({png[0].name})")
            if md:
                lines.append(md[0].read_text())
            lines += [f"- {n}" for n in o.notes] + [""]
    if report.skipped:
        lines += ["## Skipped", ""]
        lines += [f"- **{k}**: {s.reason}" + (f" (needs: {'; '.join(s.needs)})" if s.needs else "")
                  for k, s in report.skipped.items()]
    if report.failed:
        lines += ["", "## Failed", ""] + [f"- **{k}**: {v.splitlines()[0]}" for k, v in report.failed.items()]
    write_text(out / "index.md", "\n".join(lines).rstrip() + "\n")
