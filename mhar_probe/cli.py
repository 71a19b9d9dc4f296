"""`mhar`: the command line. Each subcommand lives beside the code it drives; this module only
wires them together and turns user errors into one line on stderr and exit status 2."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Callable, Sequence

from .errors import UserError
from .model.config import PRESETS
from .model.methods import METHODS
from .model.routing import ROUTING_BACKENDS


def _user_errors() -> tuple[type[BaseException], ...]:
    """The errors the library raises for input the user can fix: `UserError`, the one base."""
    return (UserError,)


class OneLineParser(argparse.ArgumentParser):
    """Bad command-line input is one line on stderr and exit status 2 (no usage block)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# ---------------------------------------------------------------------------- train
def bounded_int(low: int):
    """An argparse type: an integer >= `low` (argparse turns the error into one usage line)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} is too small; it must be at least {low}")
        return value
    parse.__name__ = f"integer >= {low}"
    return parse


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number above 0")
    return value


positive_int, nonnegative_int = bounded_int(1), bounded_int(0)


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="tiny", help=f"model size: {', '.join(PRESETS)}")
    p.add_argument("--method", default="mhar", help=f"residual method: {', '.join(METHODS)}")
    p.add_argument("--heads", type=positive_int, default=None,
                   help="routing heads H (default: 8 at the paper's presets 100m-1b, KV heads at tiny; "
                        "mhar info says which and why)")
    p.add_argument("--kv-heads", type=positive_int, default=None, help="override the preset's KV heads")
    p.add_argument("--layers", type=positive_int, default=None, help="override the preset's number of layers L")
    p.add_argument("--hidden-size", type=positive_int, default=None, help="override the preset's width d")
    p.add_argument("--attn-heads", type=positive_int, default=None, help="override the preset's attention heads")
    p.add_argument("--ffn", type=positive_int, default=None, help="override the preset's MLP width")
    p.add_argument("--steps", type=positive_int, default=300)
    p.add_argument("--lr", type=positive_float, default=5e-4, help="peak learning rate")
    p.add_argument("--warmup", type=nonnegative_int, default=None, help="warm-up steps (default 5%% of steps)")
    p.add_argument("--batch-size", type=positive_int, default=16, help="global batch in sequences")
    p.add_argument("--micro-batch", type=positive_int, default=None, help="per-process micro-batch (accumulates)")
    p.add_argument("--seq-len", type=positive_int, default=None, help="sequence length (default: the preset's)")
    p.add_argument("--eval-every", type=positive_int, default=25)
    p.add_argument("--eval-batches", type=positive_int, default=4)
    p.add_argument("--checkpoint-every", type=positive_int, default=100)
    p.add_argument("--seed", type=int, default=42, help="fixes init and data order (paired runs)")
    p.add_argument("--corpus", default=None, help="text/jsonl/parquet file or directory (default: embedded)")
    p.add_argument("--corpus-max-bytes", type=nonnegative_int, default=4_000_000,
                   help="cap on the corpus size in bytes (0: no cap)")
    p.add_argument("--tokenizer", default=None, help="a tokenizer saved in Hugging Face format")
    p.add_argument("--vocab-size", type=bounded_int(257), default=4096)
    p.add_argument("--routing-backend", default=None, choices=ROUTING_BACKENDS,
                   help="default: triton on CUDA, eager on CPU")
    p.add_argument("--device", default=None)
    p.add_argument("--fsdp", action="store_true", help="FSDP2 full sharding under torchrun (default: DDP)")
    p.add_argument("--routing-douts", choices=("promoted", "storage"), default="promoted",
                   help="upstream gradients the triton backward reads: 'promoted' (fp32 under autocast, "
                        "the reference's gradients) or 'storage' (bf16 under autocast: fewer bytes, rounded)")
    p.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=None,
                   help="replay each training step from CUDA graphs (default: on for one CUDA process; "
                        "--no-cuda-graphs steps eagerly)")
    p.add_argument("--no-progress", action="store_true")


def train_config_from_args(args: argparse.Namespace, out: str):
    from .train import TrainConfig

    return TrainConfig(
        out=out, preset=args.preset, method=args.method, heads=args.heads, kv_heads=args.kv_heads,
        steps=args.steps, lr=args.lr, warmup=args.warmup, batch_size=args.batch_size,
        micro_batch=args.micro_batch, seq_len=args.seq_len, eval_every=args.eval_every,
        eval_batches=args.eval_batches, checkpoint_every=args.checkpoint_every, seed=args.seed,
        corpus=args.corpus, corpus_max_bytes=args.corpus_max_bytes or None, tokenizer=args.tokenizer,
        vocab_size=args.vocab_size, routing_backend=args.routing_backend, device=args.device,
        resume=getattr(args, "resume", False), overwrite=getattr(args, "overwrite", False),
        progress=not args.no_progress, extra=model_overrides(args), fsdp=getattr(args, "fsdp", False),
        cuda_graphs=getattr(args, "cuda_graphs", None),
        routing_douts=getattr(args, "routing_douts", "promoted"), explicit=getattr(args, "explicit", None))


#: command-line destinations whose TrainConfig field has another name
_FIELD_OF_DEST = dict(no_progress="progress", layers="extra", hidden_size="extra", attn_heads="extra",
                      ffn="extra")


def given_options(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[str, ...]:
    """The options-dataclass fields (TrainConfig, CPTConfig) the user set on the command line
    (`argv` of one subcommand), told apart from defaults by parsing again with every default
    suppressed."""
    defaults = [(action, action.default) for action in parser._actions]
    try:
        for action, _ in defaults:
            action.default = argparse.SUPPRESS
        given, _ = parser.parse_known_args(list(argv))
    finally:
        for action, default in defaults:
            action.default = default
    return tuple(sorted({_FIELD_OF_DEST.get(dest, dest) for dest in vars(given) if dest != "func"}))


def model_overrides(args: argparse.Namespace) -> dict[str, int]:
    names = dict(layers="num_hidden_layers", hidden_size="hidden_size", attn_heads="num_attention_heads",
                 ffn="intermediate_size")
    return {field: getattr(args, arg) for arg, field in names.items() if getattr(args, arg, None) is not None}


def cmd_train(args: argparse.Namespace) -> int:
    from .train import train

    if args.method not in METHODS:
        raise UserError(f"unknown method {args.method!r}; choose one of {', '.join(METHODS)}")
    if args.preset not in PRESETS:
        raise UserError(f"unknown preset {args.preset!r}; choose one of {', '.join(PRESETS)}")
    if args.corpus is not None and not Path(args.corpus).exists():
        raise UserError(f"corpus path {args.corpus} does not exist")
    summary = train(train_config_from_args(args, args.out))
    if summary.get("finished"):
        print(f"{args.out}: tail-mean val loss {summary['tail_mean_val_loss']:.4f} "
              f"(step 0: {summary['initial_val_loss']:.4f}, final: {summary['final_val_loss']:.4f})")
    return 0


# ---------------------------------------------------------------------------- info
def cmd_info(args: argparse.Namespace) -> int:
    from .info import describe

    print(json.dumps(describe(args.run, preset=args.preset, method=args.method, heads=args.heads), indent=2)
          if args.json else describe(args.run, preset=args.preset, method=args.method, heads=args.heads,
                                     as_text=True))
    return 0


# ---------------------------------------------------------------------------- demo
def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(Path(args.out), steps=args.steps, overwrite=args.overwrite)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="mhar", description="Train, capture, probe and compare Multi-Head Attention Residuals models.")
    parser.add_argument("--debug", action="store_true", help="show the traceback of a refused input")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train one model from scratch")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    add_train_arguments(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("info", help="parameters by part, FLOPs per token and config of a run or preset")
    p.add_argument("run", nargs="?", default=None, help="run directory (or use --preset/--method)")
    p.add_argument("--preset", default=None)
    p.add_argument("--method", default=None)
    p.add_argument("--heads", type=int, default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("demo", help="the end-to-end demo on the embedded corpus")
    p.add_argument("--out", default="demo_out")
    p.add_argument("--steps", type=int, default=None, help="training steps per run (default: the demo's)")
    p.add_argument("--overwrite", action="store_true", help="redo finished work")
    p.set_defaults(func=cmd_demo)

    for register in _plugin_registrars():
        register(sub)
    return parser


def _plugin_registrars() -> list[Callable[[argparse._SubParsersAction], None]]:
    """Subcommands that live with the code they drive (capture, probes, stats, conversion)."""
    from analysis.stats.cli import add_stats_subparser

    from analysis.probes.cli import add_probe_subparser

    from .bench.cli import add_bench_subparser
    from .capture.cli import add_capture_subparser
    from .convert.cli import add_convert_subparser
    from .cpt.cli import add_cpt_subparser
    from .evaluate.cli import add_eval_subparser
    from .sweep.cli import add_sweep_subparser
    from figures.cli import add_figures_subparser

    return [add_sweep_subparser, add_capture_subparser, add_probe_subparser, add_eval_subparser,
            add_stats_subparser, add_figures_subparser, add_convert_subparser, add_cpt_subparser,
            add_bench_subparser]


def describe(exc: BaseException) -> str:
    """One line for an expected failure: the library's message, or the OS's with the path."""
    if isinstance(exc, OSError) and not isinstance(exc, _user_errors()) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return " ".join(str(exc).split())


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.command in ("train", "cpt"):  # --resume checks only what the user set against the saved run
        sub = parser._subparsers._group_actions[0].choices[args.command]  # type: ignore[union-attr]
        args.explicit = given_options(sub, argv[argv.index(args.command) + 1:])
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"mhar {args.command}: interrupted", file=sys.stderr)
        return 130
    except (*_user_errors(), OSError) as exc:  # input the user can fix, a file the OS refused
        if args.debug:
            raise
        print(f"mhar {args.command}: error: {describe(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
