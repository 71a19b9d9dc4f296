"""The README's command lines, read from README.md itself so the two cannot drift.

* fast: every `mhar` command line of every bash block names a real subcommand and only options
  that subcommand has, and the Layout section names every module of the package;
* slow: a small study made by `run_demo` (the demo's stages on a model of a few thousand
  parameters), then every README line that reads `demo_out/` run on it, as a shell runs it.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mhar_probe.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def bash_lines(text: str = README) -> list[str]:
    """Every command of the ```bash blocks: continuations joined, comments dropped."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            command = line.split(" #")[0].strip()
            if command and not command.startswith("#"):
                lines.append(command)
    return lines


def mhar_argv(line: str) -> list[str] | None:
    """The argv after `mhar` (or `-m mhar_probe.cli`) of a command line, else None."""
    words = shlex.split(line)
    if words[:1] == ["mhar"]:
        return words[1:]
    if "mhar_probe.cli" in words:
        return words[words.index("mhar_probe.cli") + 1:]
    return None


def subparser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The deepest subcommand parser `argv` names (`stats ceg` -> the ceg parser)."""
    while parser._subparsers is not None:
        choices = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
        if not argv or argv[0] not in choices:
            break
        parser, argv = choices[argv[0]], argv[1:]
    return parser


def test_the_readme_has_mhar_command_lines():
    assert len([ln for ln in bash_lines() if mhar_argv(ln) is not None]) >= 25


@pytest.mark.parametrize("line", [ln for ln in bash_lines() if mhar_argv(ln) is not None])
def test_every_readme_command_names_a_real_command_and_real_options(line):
    argv = mhar_argv(line)
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert argv and argv[0] in commands, line
    sub = subparser(parser, argv)
    known = {s for a in sub._actions for s in a.option_strings}
    unknown = [w.split("=")[0] for w in argv if w.startswith("--") and w.split("=")[0] not in known]
    assert not unknown, f"{line}: mhar {argv[0]} has no {unknown}"


def test_the_layout_names_every_module():
    layout = README.split("## Layout", 1)[1].split("\n## ", 1)[0]
    package = ROOT / "mhar_probe"
    names = [p.name for p in package.glob("*.py") if p.name != "__init__.py"]
    names += [f"{p.name}/" for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    missing = [n for n in names if n not in layout]
    assert not missing, f"README Layout leaves out {missing}"


# ------------------------------------------------------------------------------------- slow
def mini_plan():
    """The demo's stages on a model small enough to train in seconds (same grids' shape)."""
    from mhar_probe.demo.plan import Plan

    return Plan(name="mini", title="README check", preset="tiny", steps=40,
                recipe=dict(lr=2e-3, batch_size=2, seq_len=16, eval_every=1, eval_batches=1, checkpoint_every=100,
                            corpus_max_bytes=60000, vocab_size=300),
                model=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=64),
                grids=dict(main=dict(methods=["baseline", "attnres", "mhar"], heads=[2], seeds=[42]),
                           seeds=dict(methods=["baseline", "attnres", "mhar"], heads=[2], seeds=[43])),
                ladder_widths=(16,), eval_tasks=("mhar_heldout_ppl", "mhar_lastword"), eval_limit=16,
                eval_batch_size=8, capture_tokens=256, mcnemar_bootstrap=50)


@pytest.mark.slow
def test_the_readme_commands_on_the_demos_output(tmp_path, monkeypatch):
    from mhar_probe.demo.run import run_demo

    monkeypatch.setenv("MHAR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    assert run_demo(tmp_path / "demo_out", plan=mini_plan()) == 0
    lines = [ln for ln in bash_lines() if "demo_out/" in ln and mhar_argv(ln) is not None]
    assert len(lines) >= 6
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    mhar = f"mhar() {{ {shlex.quote(sys.executable)} -m mhar_probe.cli \"$@\"; }}"
    for line in lines:
        proc = subprocess.run(["bash", "-c", f"{mhar}\nset -e\n{line}"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
        assert "Traceback" not in proc.stderr, line
    assert (tmp_path / "demo_out" / "tasks" / "mhar_nextline.yaml").exists()
    assert (tmp_path / "demo_out" / "my_figures" / "index.md").exists()


def test_the_readme_ceg_line_is_the_reports_computation():
    """Issue 54, item 6: the README's `stats ceg` once averaged both seeds without the α columns while the
    report read seed 42 with them; the line now names the demo's main seed, its ladder and its alphas."""
    from mhar_probe.demo.plan import DEMO

    (line,) = [ln for ln in bash_lines() if (mhar_argv(ln) or [None, None])[:2] == ["stats", "ceg"] and "demo_out" in ln]
    argv = mhar_argv(line)
    runs = [w for w in argv[2:] if not w.startswith("--")]
    assert f"demo_out/runs/*-s{DEMO.main_seed}-*" in runs and "demo_out/ladder/d*/tiny-*" in runs
    alphas = argv[argv.index("--alpha") + 1:]
    assert [float(a) for a in alphas] == list(DEMO.ceg_alphas)
