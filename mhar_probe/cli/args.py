"""Argument helpers shared by the `mhar` subcommands: the parser class, value types, the
training options (`mhar train` and `mhar sweep` share them) and which options the user gave."""

from __future__ import annotations

import argparse
import math
from typing import Callable, NoReturn, Sequence

from ..errors import UserError


class OneLineParser(argparse.ArgumentParser):
    """Bad command-line input is one line on stderr and exit status 2 (no usage block); help
    shows defaults (`DefaultsHelpFormatter`) unless a command picks another formatter."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

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


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Help that shows each option's default, "(default: X)", unless the text already says it,
    the default is None (the help then says what is used) or the option is an on/off switch."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" in text or action.default in (None, False, argparse.SUPPRESS)
                or isinstance(action, argparse.BooleanOptionalAction)):
            return text
        return super()._get_help_string(action)


#: the argument groups of `mhar train` (and `mhar sweep`), in the order --help shows them
TRAIN_GROUPS = {
    "basics": "what to train",
    "model": "override the preset's shape",
    "data": "corpus and tokenizer",
    "schedule": "steps, learning rate, batches, evaluation and checkpoints",
    "GPU step": "where and how a step runs (the defaults suit the device: CUDA graphs, fused loss and "
                "compiled sublayers on one CUDA process, the eager reference on a CPU)",
    "output": "the run directory",
}


def train_groups(p: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """The `TRAIN_GROUPS` of parser `p`, made on first use (so a command can add to them)."""
    have = {g.title: g for g in p._action_groups}
    return {title: have.get(title) or p.add_argument_group(title, description)
            for title, description in TRAIN_GROUPS.items()}


def add_train_arguments(p: argparse.ArgumentParser) -> dict[str, argparse._ArgumentGroup]:
    """The options of one training run (`mhar train`; `mhar sweep` replaces the axes), in the
    groups of `TRAIN_GROUPS`; returns the groups so a command adds its own options to them."""
    from ..kernels.config import ROUTING_DOUTS
    from ..loss import LOSS_KERNELS
    from ..model.config import PRESETS
    from ..model.methods import METHODS
    from ..model.routing import ROUTING_BACKENDS

    g = train_groups(p)
    basics, model, data, schedule, gpu, output = (g[t] for t in TRAIN_GROUPS)
    basics.add_argument("--preset", default="tiny", help=f"model size: {', '.join(PRESETS)}")
    basics.add_argument("--method", default="mhar", help=f"residual method: {', '.join(METHODS)}")
    basics.add_argument("--heads", type=positive_int, default=None,
                        help="routing heads H (default: 8 at the paper's presets 100m-1b, KV heads at tiny; "
                             "mhar info says which and why)")
    basics.add_argument("--steps", type=positive_int, default=300, help="optimizer steps")
    basics.add_argument("--seed", type=int, default=42, help="fixes init and data order (paired runs)")
    model.add_argument("--kv-heads", type=positive_int, default=None, help="override the preset's KV heads")
    model.add_argument("--layers", type=positive_int, default=None, help="override the preset's number of layers L")
    model.add_argument("--hidden-size", type=positive_int, default=None, help="override the preset's width d")
    model.add_argument("--attn-heads", type=positive_int, default=None,
                       help="override the preset's attention heads")
    model.add_argument("--ffn", type=positive_int, default=None, help="override the preset's MLP width")
    data.add_argument("--corpus", default=None,
                      help="text/jsonl/parquet file or directory, or 'installed' (the text of every installed "
                           "package; default: embedded, the standard library)")
    data.add_argument("--corpus-max-bytes", type=nonnegative_int, default=4_000_000,
                      help="cap on the corpus size in bytes (0: no cap)")
    data.add_argument("--tokenizer", default=None,
                      help="a tokenizer saved in Hugging Face format (default: a BPE trained on the corpus, cached)")
    data.add_argument("--vocab-size", type=bounded_int(257), default=4096,
                      help="vocabulary of the BPE trained on the corpus (ignored with --tokenizer)")
    data.add_argument("--seq-len", type=positive_int, default=None, help="sequence length (default: the preset's)")
    schedule.add_argument("--lr", type=positive_float, default=5e-4, help="peak learning rate")
    schedule.add_argument("--warmup", type=nonnegative_int, default=None, help="warm-up steps (default 5%% of steps)")
    schedule.add_argument("--batch-size", type=positive_int, default=16, help="global batch in sequences")
    schedule.add_argument("--micro-batch", type=positive_int, default=None,
                          help="per-process micro-batch; gradients accumulate (default: the whole per-process batch)")
    schedule.add_argument("--eval-every", type=positive_int, default=25,
                          help="steps between validation-loss evaluations (the tail-mean averages the last 11)")
    schedule.add_argument("--eval-batches", type=positive_int, default=4,
                          help="validation batches per evaluation")
    schedule.add_argument("--checkpoint-every", type=positive_int, default=100,
                          help="steps between checkpoints (--resume continues from the last)")
    gpu.add_argument("--device", default=None, help="torch device, e.g. cpu, cuda, cuda:1 (default: cuda if "
                                                    "available, else cpu)")
    gpu.add_argument("--routing-backend", default=None, choices=ROUTING_BACKENDS,
                     help="routing implementation: fused Triton kernels, torch.compile or the eager "
                          "reference (default: triton on CUDA, eager on CPU)")
    gpu.add_argument("--fsdp", action="store_true", help="FSDP2 full sharding under torchrun (default: DDP)")
    gpu.add_argument("--routing-douts", choices=ROUTING_DOUTS, default="promoted",
                     help="upstream gradients the triton backward reads: 'promoted' (fp32 under autocast, "
                          "the reference's gradients) or 'storage' (bf16 under autocast: fewer bytes, rounded)")
    gpu.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=None,
                     help="replay each training step from CUDA graphs (default: on for one CUDA process; "
                          "--no-cuda-graphs steps eagerly)")
    gpu.add_argument("--loss-kernel", choices=LOSS_KERNELS, default=None,
                     help="the training cross-entropy: 'fused' (Triton; default on CUDA) or 'torch' (fp32 softmax)")
    gpu.add_argument("--compile-sublayers", action=argparse.BooleanOptionalAction, default=None,
                     help="torch.compile each attention and MLP sublayer (default: on for one CUDA process)")
    output.add_argument("--no-progress", action="store_true", help="no progress bar (logs and CI)")
    return g


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
