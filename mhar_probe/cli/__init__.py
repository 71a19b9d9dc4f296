"""`mhar`: the command line, the top floor of the house. One module per subcommand
(`train`, `info`, `demo`, `sweep`, `capture`, `probe`, `eval`, `stats`, `figures`, `convert`,
`import`, `cpt`, `bench`, `corpus`), shared argument helpers in `args`, and the one error handler in `errors`
(user errors become one line on stderr and exit status 2). Nothing below imports this package.

Command modules are imported lazily: `mhar --help` lists the commands from `COMMANDS` alone
(no torch, no transformers), and `mhar CMD ...` imports only CMD's module (`build_parser(only=CMD)`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, Sequence

from .args import OneLineParser
from .errors import run_command

Registrar = Callable[[argparse._SubParsersAction], object]

#: every subcommand, in the order `mhar --help` lists them: (name, "module:registrar", one-line help);
#: each help is the one its module registers (tests/test_cli_help.py checks they agree)
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("train", "mhar_probe.cli.train:add_train_subparser", "train one model from scratch"),
    ("info", "mhar_probe.cli.info:add_info_subparser",
     "parameters by part, FLOPs per token and config of a run or preset"),
    ("demo", "mhar_probe.cli.demo:add_demo_subparser", "the end-to-end demo on the embedded corpus (or another plan)"),
    ("sweep", "mhar_probe.cli.sweep:add_sweep_subparser",
     "train a grid of runs (method x H x KV x lr x seed x preset x steps)"),
    ("capture", "mhar_probe.cli.capture:add_capture_subparser",
     "capture per-head routing weights of a run into a netCDF dataset"),
    ("probe", "mhar_probe.cli.probe:add_probe_subparser",
     "forced-compromise probes of runs / routing datasets as tables"),
    ("eval", "mhar_probe.cli.evaluate:add_eval_subparser",
     "run lm-eval (offline) on a trained run; writes results_*.json + samples_*.jsonl"),
    ("stats", "mhar_probe.cli.stats:add_stats_subparser", "statistics on eval outputs and training curves"),
    ("figures", "mhar_probe.cli.figures:add_figures_subparser", "regenerate the paper's figures and tables from your runs"),
    ("convert", "mhar_probe.cli.convert:add_convert_subparser",
     "identity-preserving conversion of a pretrained Llama/Qwen3 model to MHAR (delta form)"),
    ("import", "mhar_probe.cli.importing:add_import_subparser",
     "import a checkpoint in the paper authors' format (llama_attnres / qwen3_attnres)"),
    ("cpt", "mhar_probe.cli.cpt:add_cpt_subparser", "mid-train a converted model (or its plain-base control)"),
    ("bench", "mhar_probe.cli.bench:add_bench_subparser", "GPU benchmarks: `mhar bench routing --help`"),
    ("corpus", "mhar_probe.cli.corpus:add_corpus_subparser", "build or pack the study corpus folder"),
)


def registrar(target: str) -> Registrar:
    """The `add_*_subparser` function named by "module:function" (imports its module)."""
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def refuse_early(command: str, argv: Sequence[str]) -> int:
    """2 (one line on stderr) when `command`'s module has an `early_check(words)` that refuses the
    words after the command's name, else 0. It runs before the command's parser is built: the
    options of train, sweep, cpt, convert and eval come from the model's presets, methods and
    backends, which load torch (seconds), and a mistyped path should be refused at once. The
    command checks the same again once parsed (the early check sees only the usual spellings).
    Not with -h/--help: help is shown whatever else is on the line."""
    at = list(argv).index(command)
    words = list(argv[at + 1:])
    target = next(target for name, target, _ in COMMANDS if name == command)
    check = getattr(importlib.import_module(target.partition(":")[0]), "early_check", None)
    if check is None or {"-h", "--help"} & set(words):
        return 0
    return run_command(command, lambda _: check(words), argparse.Namespace(), debug="--debug" in argv[:at])


def _registrars() -> list[Registrar]:
    """Every subcommand's registrar, in the order `mhar --help` lists them (imports them all)."""
    return [registrar(target) for _, target, _ in COMMANDS]


def build_parser(only: str | None = "*") -> argparse.ArgumentParser:
    """The `mhar` parser; each subcommand sets `func`, its handler.

    only="*": every subcommand fully registered (imports every command module);
    only=NAME: NAME fully registered, the others as names with their one-line help;
    only=None: all as names and help (what `mhar --help` needs; imports nothing heavy)."""
    parser = OneLineParser(
        prog="mhar", description="Train, capture, probe and compare Multi-Head Attention Residuals models.",
        epilog="`mhar COMMAND --help` shows a command's options.")
    parser.add_argument("--debug", action="store_true", help="show the traceback of a refused input")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, target, help_text in COMMANDS:
        if only in ("*", name):
            registrar(target)(sub)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def command_of(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` names (the first word that is not the global --debug), if known."""
    names = {name for name, _, _ in COMMANDS}
    for word in argv:
        if word == "--debug":
            continue
        return word if word in names else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """`mhar ARGV`: parse, run the subcommand, return its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = command_of(argv)
    status = refuse_early(command, argv) if command is not None else 0
    if status:
        return status
    parser = build_parser(only=command)
    args = parser.parse_args(argv)
    if args.command in ("train", "cpt"):  # --resume checks only what the user set against the saved run
        from .args import given_options

        sub = parser._subparsers._group_actions[0].choices[args.command]  # type: ignore[union-attr]
        args.explicit = given_options(sub, argv[argv.index(args.command) + 1:])
    return run_command(args.command, args.func, args, debug=args.debug)


__all__ = ["COMMANDS", "build_parser", "command_of", "main"]
