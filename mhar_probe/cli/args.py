"""Argument helpers shared by the `mhar` subcommands: the parser class, value types, the
training options (`mhar train` and `mhar sweep` share them) and which options the user gave."""

from __future__ import annotations

import argparse
import math
from typing import Callable, NoReturn, Sequence

from ..errors import UserError


class OneLineParser(argparse.ArgumentParser):
    """Bad command-line input is one line on stderr and exit status 2 (no usage block)."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def bounded_int(low: int) -> Callable[[str], int]:
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
    """The options of one training run (`mhar train`; `mhar sweep` replaces the axes)."""
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
    p.add_argument("--corpus", default=None, help="text/jsonl/parquet file or directory, or 'installed' (the text of every installed package; default: embedded, the standard library)")
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
    p.add_argument("--loss-kernel", choices=LOSS_KERNELS, default=None,
                   help="the training cross-entropy: 'fused' (Triton; default on CUDA) or 'torch' (fp32 softmax)")
    p.add_argument("--compile-sublayers", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile each attention and MLP sublayer (default: on for one CUDA process)")
    p.add_argument("--no-progress", action="store_true")


#: command-line destinations whose TrainConfig field has another name
_FIELD_OF_DEST = dict(no_progress="progress", layers="extra", hidden_size="extra", attn_heads="extra",
                      ffn="extra")


def check_corpus(spec: str | None) -> None:
    """--corpus names a known corpus or an existing path (before any other work)."""
    from ..data.corpus import NAMED_CORPORA, is_corpus_spec

    if not is_corpus_spec(spec):
        raise UserError(f"corpus path {spec} does not exist (or name one of: {', '.join(NAMED_CORPORA)})")


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
    """The model-config fields set by --layers / --hidden-size / --attn-heads / --ffn."""
    names = dict(layers="num_hidden_layers", hidden_size="hidden_size", attn_heads="num_attention_heads",
                 ffn="intermediate_size")
    return {field: getattr(args, arg) for arg, field in names.items() if getattr(args, arg, None) is not None}
