"""`mhar convert SRC DST`: graft the delta form of MHAR onto a pretrained Llama / Qwen3 checkpoint.

Wired into `mhar` by `add_convert_subparser(subparsers)`; the handler `cmd_convert(args)` returns
the exit status (0 done, 2 for a `ConversionError`, printed on one line).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Sequence

from .args import leading_words, require_existing


def early_check(words: Sequence[str]) -> None:
    """SRC exists, checked in `mhar convert`'s words before its parser is built (its options come
    from the model package, which loads torch) where SRC comes first, as in `mhar convert SRC DST`."""
    require_existing("source model", *leading_words(words, 1))


def add_convert_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the `convert` subcommand; its handler is `args.func` (= `cmd_convert`)."""
    from ..model.delta_config import DEFAULT_ROUTING_HEADS, SUPPORTED_MODEL_TYPES
    from ..model.routing import ROUTING_BACKENDS

    p = subparsers.add_parser(
        "convert", help="identity-preserving conversion of a pretrained Llama/Qwen3 model to MHAR (delta form)",
        description=f"Graft delta-form multi-head attention residuals onto a Hugging Face causal LM saved "
                    f"on disk ({', '.join(SUPPORTED_MODEL_TYPES)}). The result computes exactly what SRC "
                    f"computes until training opens the zero-initialised gates.")
    p.add_argument("src", metavar="SRC", help="pretrained model directory (config.json + weights)")
    p.add_argument("dst", metavar="DST", help="output directory (written atomically)")
    p.add_argument("--num-blocks", type=int, default=None,
                   help="block-aggregated sources: one delta per block of consecutive layers (default L//4)")
    p.add_argument("--heads", type=int, default=DEFAULT_ROUTING_HEADS,
                   help=f"routing heads H; must divide the hidden size (default {DEFAULT_ROUTING_HEADS})")
    p.add_argument("--routing-backend", default="eager", choices=ROUTING_BACKENDS,
                   help="routing backend of the step-0 check (default eager); not saved: the backend is "
                        "chosen where the model runs")
    p.add_argument("--no-verify", action="store_true",
                   help="skip the step-0 check that converted and base logits are identical")
    p.add_argument("--overwrite", action="store_true", help="replace an existing DST")
    p.set_defaults(func=cmd_convert)
    return p


def cmd_convert(args: argparse.Namespace) -> int:
    """Run the conversion; a `ConversionError` becomes one line on stderr and exit status 2."""
    require_existing("source model", args.src)  # (before the imports: torch takes seconds)
    from .. import convert as package
    from ..convert.convert import convert_checkpoint
    from ..convert.errors import ConversionError

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            report = convert_checkpoint(args.src, args.dst, num_blocks=args.num_blocks, heads=args.heads,
                                        routing_backend=args.routing_backend, overwrite=args.overwrite,
                                        verify=not args.no_verify)
    except ConversionError as exc:
        print(f"mhar convert: error: {exc}", file=sys.stderr)
        return 2
    for w in caught:
        if w.filename.startswith(str(Path(package.__file__).parent)):  # ours; others' pass through as usual
            print(f"mhar convert: warning: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    check = ("not checked" if report.max_logit_deviation is None
             else f"max |logit deviation| at step 0 = {report.max_logit_deviation:g}")
    print(f"{report.dst}: {report.base_type} L={report.num_layers} -> mhar_delta "
          f"(num_blocks={report.num_blocks}, H={report.routing_heads}, +{report.new_parameters:,} parameters, "
          f"{report.dtype}); {check}; tokenizer {'copied' if report.tokenizer_copied else 'MISSING'}")
    return 0
