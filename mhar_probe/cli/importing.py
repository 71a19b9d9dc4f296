"""`mhar import SRC DST`: a checkpoint in the paper authors' format (llama_attnres / qwen3_attnres)
as a model of this workbench, which `capture`, `probe`, `eval` and `figures` take as they are.

Wired into `mhar` by `add_import_subparser(subparsers)`; errors are `ConversionError` lines (exit 2).
"""

from __future__ import annotations

import argparse


def add_import_subparser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `import`; handler: cmd_import."""
    from ..convert.authors import MODES

    p = subparsers.add_parser(
        "import", help="import a checkpoint in the paper authors' format (llama_attnres / qwen3_attnres)",
        description=f"Import a model saved by the paper authors' code (model_type llama_attnres or "
                    f"qwen3_attnres; attnres_mode one of {', '.join(MODES)}) into DST as a model of this "
                    f"workbench, with import.json recording where it came from. SRC is a local folder "
                    f"(offline) or a Hugging Face Hub id (downloaded; needs network).")
    p.add_argument("src", metavar="SRC", help="the authors' checkpoint folder, or a Hub id such as owner/name")
    p.add_argument("dst", metavar="DST", help="output directory (written atomically)")
    p.add_argument("--revision", default=None, help="Hub revision (branch, tag or commit) of a Hub id SRC")
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="weights' dtype in DST (default: the checkpoint's own)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing DST written by `mhar import`")
    p.set_defaults(func=cmd_import)
    return p


def cmd_import(args: argparse.Namespace) -> int:
    from ..convert.authors import import_checkpoint

    report = import_checkpoint(args.src, args.dst, revision=args.revision, dtype=args.dtype,
                               overwrite=args.overwrite)
    print(f"{report.dst}: {report.model_type} {report.mode} -> {report.method} (H={report.routing_heads}, "
          f"{report.parameters:,} parameters, {report.dtype}); tokenizer "
          f"{'copied' if report.tokenizer_copied else 'MISSING: copy the base tokenizer into it'}")
    return 0
