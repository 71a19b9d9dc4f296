"""Run the generators: every figure and table the inputs make possible, a list of what was
skipped and why, and an index (index.md, index.json) of both in the output directory.

Everything is built in a staging folder beside the output and renamed into place at the end
(`mhar_probe.atomic.replace_dir`), so a call that refuses, raises or makes nothing leaves nothing
behind; `--overwrite` replaces an earlier output of `mhar figures` (one with index.json) whole."""

from __future__ import annotations

import contextlib
import shutil
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from mhar_probe.atomic import give_new_file_modes, replace_dir, staging_dir, write_json, write_text
from mhar_probe.errors import UserError
from mhar_probe.outputs import OutputKind, check_output

from .context import Context
from .registry import Output, Skip, load_generators


@dataclass
class BuildReport:
    out: Path
    made: dict[str, list[Output]] = field(default_factory=dict)
    skipped: dict[str, Skip] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    written: bool = False  # whether `out` was written (nothing is when nothing could be made)

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
        return out + ([f"index: {self.out / 'index.md'}"] if self.written else [])


#: what `mhar figures` writes: --overwrite replaces only one of these
FIGURES_OUTPUT = OutputKind("figures folder", directory=True, is_own=lambda p: (p / "index.json").is_file(),
                            marker="index.json")


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
        raise UserError(f"runs directory {runs} " + ("is not a directory" if runs.exists() else "does not exist"))
    if more and runs is None:
        raise UserError("further run folders need a runs directory beside them")
    for folder in {p for folders in more.values() for p in folders}:
        if not folder.is_dir():
            raise UserError(f"runs directory {folder} does not exist")
    if evals is not None and not Path(evals).is_dir():
        raise UserError(f"--evals {evals} " + ("is not a directory" if Path(evals).exists() else "does not exist"))
    out = Path(out)
    if (out / "index.json").exists() and not overwrite:
        raise UserError(f"{out} already holds figures (index.json); pass --overwrite to regenerate them")
    check_output(out, FIGURES_OUTPUT, overwrite=overwrite, inputs=[("runs directory", runs)])
    made_parents = [p for p in out.parents if not p.exists()]  # the staging folder's parents, made for it
    staging = staging_dir(out)
    try:
        ctx = Context(runs_dir=runs, out=staging, mhar_heads=mhar_heads,
                      benchmarks=[Path(b) for b in benchmarks] if benchmarks else default_benchmark_dirs(runs),
                      evals=Path(evals) if evals else (runs / "evals" if runs and (runs / "evals").is_dir() else None))
        report = BuildReport(out=staging)
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
        report.made = {name: [replace(o, paths=[out / p.relative_to(staging) for p in o.paths]) for o in outputs]
                       for name, outputs in report.made.items()}
        report.out = out
        if report.made or report.failed:
            write_index(report, registry, staging)
            give_new_file_modes(staging)
            replace_dir(staging, out)
            report.written = True
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        for parent in made_parents if not out.exists() else ():  # nothing written: no empty folders left
            with contextlib.suppress(OSError):
                parent.rmdir()
    return report


def write_index(report: BuildReport, registry: dict, into: Path) -> None:
    """index.json and index.md into the folder `into` (the staging folder of `report.out`)."""
    write_json(into / "index.json", report.as_dict())
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
                lines.append((into / md[0].name).read_text())
            lines += [f"- {n}" for n in o.notes] + [""]
    if report.skipped:
        lines += ["## Skipped", ""]
        lines += [f"- **{k}**: {s.reason}" + (f" (needs: {'; '.join(s.needs)})" if s.needs else "")
                  for k, s in report.skipped.items()]
    if report.failed:
        lines += ["", "## Failed", ""] + [f"- **{k}**: {v.splitlines()[0]}" for k, v in report.failed.items()]
    write_text(into / "index.md", "\n".join(lines).rstrip() + "\n")
