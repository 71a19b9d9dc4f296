"""The options of a training run, declared once: `RunOptions` (what every trainer takes: steps,
schedule, batches, data, the GPU step, the run directory) and `TrainConfig` (from-scratch
training adds the model and the tokenizer). Mid-training's `CPTConfig` (`mhar_probe.cpt.config`)
is the other subclass.

Each field is an `options.option`: its help, its one check and its flag. `mhar train`, `mhar cpt`
and `mhar sweep` make their flags from these fields (`mhar_probe.cli.flags`), and the same
checks run when a configuration is built from a saved train_config.json or a sweep grid.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from .data.load import resolve_cap
from .errors import UserError
from .kernels.config import FORWARDS, ROUTING_DOUTS, STACK_BACKWARDS  # the triton kernels' choices
from .loss import LOSS_KERNELS
from .model.config import PRESETS
from .model.methods import METHODS
from .model.routing import ROUTING_BACKENDS
from .options import (at_least, check_options, finite_above_zero, in_unit_interval, non_negative, option,
                      options_from_dict)
from .outputs import refuse_together
from .runfiles import RunFiles


def _vocab(value: int) -> str | None:
    return None if value >= 257 else "must be at least 257 (256 bytes + <|endoftext|>)"


_positive = at_least(1)


@dataclass
class RunOptions:
    """Every option a trainer (`mhar_probe.train.Trainer`) takes, saved as train_config.json.
    Subclasses give some of them other defaults (`default_of`) and add their own."""

    out: str = option("runs/run", "run directory", group="output", required=True)
    steps: int = option(300, "optimizer steps", check=_positive, group="basics")
    seed: int = option(42, "fixes init and data order (paired runs)", group="basics")
    corpus: str | None = option(None, "text/jsonl/parquet file or directory, or 'installed' (the text of every "
                                      "installed package; default: embedded, the standard library)", group="data")
    corpus_max_bytes: int | None = option(None, "cap on the corpus size in bytes; 0: no cap (default: "
                                                "4,000,000 for the embedded corpus, no cap for any other)",
                                          check=non_negative, group="data")
    seq_len: int | None = option(None, "sequence length (default: the preset's)", check=_positive, group="data")
    lr: float = option(5e-4, "peak learning rate", check=finite_above_zero, group="schedule")
    warmup: int | None = option(None, "warm-up steps (default 5%% of steps)", check=non_negative,
                                group="schedule")
    weight_decay: float = option(0.1, "AdamW weight decay", check=non_negative, group="schedule")
    betas: tuple[float, float] = option((0.9, 0.95), "AdamW betas", flag=None)
    adam_eps: float = option(1e-8, "AdamW epsilon", flag=None)
    grad_clip: float = option(1.0, "global-norm gradient clipping threshold", check=finite_above_zero,
                              group="schedule")
    batch_size: int = option(16, "global batch in sequences", check=_positive, group="schedule")
    micro_batch: int | None = option(None, "per-process micro-batch; gradients accumulate (default: the whole "
                                           "per-process batch)", check=_positive, group="schedule")
    eval_every: int = option(25, "steps between validation-loss evaluations (the tail-mean averages the last 11)",
                             check=_positive, group="schedule")
    eval_batches: int = option(4, "validation batches per evaluation", check=_positive, group="schedule")
    checkpoint_every: int = option(100, "steps between checkpoints (--resume continues from the last)",
                                   check=_positive, group="schedule")
    device: str | None = option(None, "torch device, e.g. cpu, cuda, cuda:1 (default: cuda if available, "
                                      "else cpu)", group="GPU step")
    threads: int | None = option(None, "CPU threads for a step's operations (default: on a CPU, the idle CPUs "
                                       "this process may use, split between torchrun's ranks on the host; "
                                       "torch's own choice on CUDA)", check=_positive, group="GPU step")
    routing_backend: str | None = option(None, "routing implementation: fused Triton kernels, torch.compile or "
                                               "the eager reference (default: triton on CUDA, eager on CPU)",
                                         choices=ROUTING_BACKENDS, group="GPU step")
    fsdp: bool = option(False, "FSDP2 full sharding under torchrun (default: DDP)", group="GPU step")
    routing_douts: str = option("promoted", "upstream gradients the triton backward reads: 'promoted' (fp32 under "
                                            "autocast, the reference's gradients) or 'storage' (bf16 under "
                                            "autocast: fewer bytes, rounded)",
                                choices=ROUTING_DOUTS, group="GPU step")
    routing_forward: str = option("lookahead", "the triton stack's forward: 'lookahead' (a call also folds the rows "
                                               "it reads into the next call's softmax, which then reads only the "
                                               "rows appended since; the measured default) or 'plain' (every call "
                                               "reads all its rows); the same terms in another order",
                                  choices=FORWARDS, group="GPU step")
    routing_backward: str = option("fold", "the triton stack's backward: 'fold' (each block of calls' upstream "
                                           "gradients folded into per-source accumulators; the measured "
                                           "default) or 'gather' (every source re-reads all its readers'); the "
                                           "same terms in another order",
                                   choices=STACK_BACKWARDS, group="GPU step")
    cuda_graphs: bool | None = option(None, "replay each training step from CUDA graphs (default: on on CUDA, "
                                            "one process or DDP; FSDP2 steps eagerly; --no-cuda-graphs steps "
                                            "eagerly)", group="GPU step")
    overlap_steps: bool | None = option(None, "launch each training step before reading the previous step's loss "
                                              "back, so the GPU does not wait for the host between steps "
                                              "(default: on on CUDA, one process; not under torchrun)",
                                        group="GPU step")
    loss_kernel: str | None = option(None, "the training cross-entropy: 'fused' (Triton; default on CUDA) or "
                                           "'torch' (fp32 softmax)", choices=LOSS_KERNELS, group="GPU step")
    compile_sublayers: bool | None = option(None, "torch.compile each attention and MLP sublayer (default: on "
                                                  "on CUDA, one process, DDP or FSDP2)", group="GPU step")
    resume: bool = option(False, "continue the run in --out from its checkpoint", group="output")
    overwrite: bool = option(False, "replace an existing --out", group="output")
    progress: bool = option(True, "no progress bar (logs and CI)", flag="--no-progress", group="output")
    stop_after: int | None = option(None, "testing aid: stop (as if killed) after this many steps", flag=None)
    time_limit: float | None = option(
        None, "stop cleanly once SECONDS of wall clock have passed since the command started: at the first step "
              "boundary where one more step, an evaluation and a checkpoint write (as long as the last ones took) "
              "would pass the limit, with a checkpoint there (with overlapped steps, two more steps: the one "
              "already launched stops the run); --resume continues exactly there. Checked after "
              "every step (under torchrun rank 0's clock decides, its verdict carried by the all-reduce of the "
              "step's loss, so every rank stops at the same step); the last step is never cut: a run that "
              "reaches it finishes (summary, weights) however late. Give room for the first checkpoint write",
        check=finite_above_zero, group="output")
    # the options the user set on the command line; on --resume only these are checked against
    # the saved run (None: every option is); not a setting, not saved
    explicit: tuple[str, ...] | None = option(None, "the options given on the command line", flag=None)

    #: what the error messages call these options
    WHAT = "training"

    def __post_init__(self) -> None:
        check_options(self, self.WHAT)
        refuse_together(resume=self.resume, overwrite=self.overwrite)
        # the cap as the run trains with it (an unset cap is the corpus's default; 0: none), so a resumed
        # run's saved value and a sweep's unset one compare equal
        self.corpus_max_bytes = resolve_cap(self.corpus, self.corpus_max_bytes)
        self.check()

    def check(self) -> None:
        """Checks between options (each option's own check has run); raise `UserError`."""

    @classmethod
    def from_dict(cls, values: dict[str, Any]):
        """The options in `values` (JSON-like: a saved train_config.json, a sweep grid)."""
        return options_from_dict(cls, values, cls.WHAT)

    @classmethod
    def default_of(cls, name: str, default: Any, help: str | None = None) -> Any:
        """Field `name` of this class again, with another default (and help): for a subclass."""
        f = cls.__dataclass_fields__[name]
        return option(default, help or f.metadata["help"], **{k: v for k, v in f.metadata.items() if k != "help"})


@dataclass
class TrainConfig(RunOptions):
    """Every option of a from-scratch training run (saved as train_config.json)."""

    out: str = RunOptions.default_of("out", "runs/tiny-mhar")
    preset: str = option("tiny", f"model size: {', '.join(PRESETS)}", choices=tuple(PRESETS), group="basics")
    method: str = option("mhar", f"residual method: {', '.join(METHODS)}", choices=tuple(METHODS), group="basics")
    heads: int | None = option(None, "routing heads H (default: 8 at the paper's presets 100m-1b, KV heads at "
                                     "tiny; mhar info says which and why)", check=_positive, group="basics")
    kv_heads: int | None = option(None, "override the preset's KV heads", check=_positive, group="model")
    extra: dict[str, Any] = option(
        None, "extra MHARConfig overrides", check=_positive, group="model", default_factory=dict, flag=None,
        entries=dict(layers=("num_hidden_layers", "override the preset's number of layers L"),
                     hidden_size=("hidden_size", "override the preset's width d"),
                     attn_heads=("num_attention_heads", "override the preset's attention heads"),
                     ffn=("intermediate_size", "override the preset's MLP width")))
    tokenizer: str | None = option(None, "a tokenizer saved in Hugging Face format (default: a BPE trained on "
                                         "the corpus, cached)", group="data")
    vocab_size: int = option(4096, "vocabulary of the BPE trained on the corpus (ignored with --tokenizer)",
                             check=_vocab, group="data")
    min_lr_ratio: float = option(0.1, "floor of the cosine decay, a fraction of the peak", check=in_unit_interval,
                                 flag=None)


#: what a resumed run may do differently: more steps, another machine or display
RESUME_MAY_CHANGE = ("steps", "device", "threads", "routing_backend", "progress", "micro_batch", "fsdp",
                     "cuda_graphs", "overlap_steps", "loss_kernel", "compile_sublayers", "routing_forward",
                     "routing_backward")
#: bookkeeping fields of a run's options, not settings of the run
NOT_SETTINGS = ("out", "resume", "overwrite", "stop_after", "time_limit", "explicit")


def jsonable(obj: Any) -> Any:
    """`obj` as JSON reads it back (tuples as lists; anything else JSON lacks as its str)."""
    return json.loads(json.dumps(obj, default=str))


def saved_settings(cfg: RunOptions) -> dict[str, Any]:
    """The options `cfg` as train_config.json records them."""
    return jsonable({k: v for k, v in asdict(cfg).items() if k != "explicit"})


def settings_for_resume(cfg: RunOptions) -> RunOptions:
    """`cfg` (with resume=True) with every setting taken from the run's saved train_config.json
    (see `resumed_options`); `cfg` itself when it does not resume or there is no saved run."""
    path = RunFiles(Path(cfg.out)).train_config_path  # read whole: every option, checked by `from_dict`
    if not (cfg.resume and path.exists()):
        return cfg
    try:
        raw = json.loads(path.read_text())
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        saved = type(cfg).from_dict({k: v for k, v in raw.items() if k not in NOT_SETTINGS})
    except (OSError, ValueError, TypeError) as exc:
        raise UserError(f"cannot resume: {path} is unreadable ({exc}); use --overwrite to start over") from exc
    return resumed_options(cfg, saved)


def resumed_options(cfg: RunOptions, saved: RunOptions) -> RunOptions:
    """`cfg` (resume=True) continuing a run whose saved options are `saved`: an option the user
    set that contradicts the saved run is refused; of `RESUME_MAY_CHANGE` the user's values win,
    and --steps may only grow."""
    names = {f.name for f in fields(cfg)}
    given = set(cfg.explicit) if cfg.explicit is not None else names
    clashes = []
    for name in sorted(given & names - set(NOT_SETTINGS) - set(RESUME_MAY_CHANGE)):
        mine, theirs = getattr(cfg, name), getattr(saved, name)
        if name == "extra":  # model overrides: only the ones given
            mine, theirs = mine, {k: theirs.get(k) for k in mine}
        if mine != theirs:
            clashes.append(f"--{name.replace('_', '-')} {mine} (the run has {theirs})")
    if clashes:
        raise UserError(f"--resume continues {cfg.out} with its saved settings, and these options contradict "
                        f"them: {'; '.join(clashes)}. Drop them, or start a new run (another --out, or --overwrite)")
    changes = {n: getattr(cfg, n) for n in RESUME_MAY_CHANGE if n in given}
    if "steps" in changes and changes["steps"] < saved.steps:
        raise UserError(f"--steps {changes['steps']} is fewer than the run's {saved.steps}; a resumed run "
                        f"can only be extended")
    return replace(saved, **changes, out=cfg.out, resume=True, overwrite=False, stop_after=cfg.stop_after,
                   time_limit=cfg.time_limit, explicit=None)
