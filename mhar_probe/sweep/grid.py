"""The sweep grid: axes (method, H, KV heads, learning rate, seed, preset, steps) plus the
training options every run shares, expanded into named runs.

Rules of expansion (so a name always means one model):
  * KV heads left as None take the preset's value; H left as None takes the KV heads.
  * H applies to the routed methods (mhar, mhar_hw, delta); attnres is H = 1 by definition;
    baseline and hyper have no routing heads, so their H axis collapses to one run.
  * Duplicates are dropped, order is preset, steps, seed, lr, kv, method, H (stable).

Run names are readable and stable: every axis is spelled out, e.g.
    tiny-mhar-h4-kv2-lr5e-4-s42-n300        tiny-baseline-kv2-lr1e-3-s1-n300
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..errors import UserError
from ..model.config import PRESETS, ConfigError, MHARConfig
from ..model.methods import METHODS, routing_heads_of
#: TrainConfig fields that describe how a process runs, not which model is trained
RUNTIME_FIELDS = ("progress", "device", "threads", "resume", "overwrite", "stop_after", "time_limit", "out", "fsdp",
                  "cuda_graphs", "overlap_steps", "loss_kernel", "compile_sublayers")
AXES = ("methods", "heads", "kv_heads", "lrs", "seeds", "presets", "steps")


def format_lr(lr: float) -> str:
    """Compact, lossless scientific form: 5e-4, 2.5e-4, 1e-3."""
    mant, exp = f"{lr:.6e}".split("e")
    mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{int(exp)}"


def run_name(preset: str, method: str, H: int | None, kv: int, lr: float, seed: int, steps: int) -> str:
    head = f"-h{H}" if H is not None else ""
    return f"{preset}-{method}{head}-kv{kv}-lr{format_lr(lr)}-s{seed}-n{steps}"


@dataclass(frozen=True)
class RunSpec:
    """One run of the grid, its axes resolved."""

    preset: str
    method: str
    H: int | None
    kv: int
    lr: float
    seed: int
    steps: int

    @property
    def name(self) -> str:
        return run_name(self.preset, self.method, self.H, self.kv, self.lr, self.seed, self.steps)

    def axes(self) -> dict[str, Any]:
        return asdict(self)

    def train_config(self, out: str, common: dict[str, Any], **runtime: Any):
        """The TrainConfig of this run inside the sweep directory `out`."""
        from ..train import TrainConfig

        return TrainConfig.from_dict({**common, **runtime, "out": out, "preset": self.preset,
                                      "method": self.method, "heads": self.H, "kv_heads": self.kv,
                                      "lr": self.lr, "seed": self.seed, "steps": self.steps})


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: the numeric axes, what each value must be, and how the message says it
AXIS_TYPES = (
    ("heads", lambda v: v is None or (_is_int(v) and v >= 1), "positive integers (or null: H = KV heads)"),
    ("kv_heads", lambda v: v is None or (_is_int(v) and v >= 1), "positive integers (or null: the preset's)"),
    ("lrs", lambda v: (_is_int(v) or isinstance(v, float)) and math.isfinite(v) and v > 0, "finite numbers above 0"),
    ("seeds", _is_int, "integers"),
    ("steps", lambda v: _is_int(v) and v >= 1, "positive integers"),
)


@dataclass
class SweepGrid:
    """Axes of a sweep and the options its runs share (any TrainConfig field in `common`)."""

    methods: list[str] = field(default_factory=lambda: ["baseline", "mhar"])
    heads: list[int | None] = field(default_factory=lambda: [None])
    kv_heads: list[int | None] = field(default_factory=lambda: [None])
    lrs: list[float] = field(default_factory=lambda: [5e-4])
    seeds: list[int] = field(default_factory=lambda: [42])
    presets: list[str] = field(default_factory=lambda: ["tiny"])
    steps: list[int] = field(default_factory=lambda: [300])
    common: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "SweepGrid":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise UserError(f"unknown sweep grid keys: {', '.join(unknown)} (known: {', '.join(sorted(names))})")
        grid = cls(**values)
        grid.validate()
        return grid

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def model_common(self) -> dict[str, Any]:
        """`common` without the per-process fields (those may differ between invocations)."""
        return {k: v for k, v in self.common.items() if k not in RUNTIME_FIELDS}

    def validate(self) -> None:
        from ..train import TrainConfig

        for axis in AXES:
            values = getattr(self, axis)
            if not isinstance(values, (list, tuple)) or not values:
                raise UserError(f"sweep axis {axis!r} needs a non-empty list, got {values!r}")
        for axis, ok, kind in AXIS_TYPES:
            bad = [v for v in getattr(self, axis) if not ok(v)]
            if bad:
                raise UserError(f"sweep axis {axis!r} has {bad[0]!r}; it takes {kind}")
        bad = [m for m in self.methods if m not in METHODS]
        if bad:
            raise UserError(f"unknown method(s) {', '.join(bad)}; choose from {', '.join(METHODS)}")
        bad = [p for p in self.presets if p not in PRESETS]
        if bad:
            raise UserError(f"unknown preset(s) {', '.join(bad)}; choose from {', '.join(PRESETS)}")
        axis_fields = {"method", "heads", "kv_heads", "lr", "seed", "preset", "steps"}
        clash = sorted(set(self.common) & axis_fields)
        if clash:
            raise UserError(f"{', '.join(clash)} are sweep axes; give them as lists, not in 'common'")
        TrainConfig.from_dict({k: v for k, v in self.common.items()})  # unknown options fail here

    def expand(self) -> list[RunSpec]:
        """Every run of the grid, resolved and de-duplicated, in a fixed order."""
        self.validate()
        extra = dict(self.common.get("extra") or {})
        specs: dict[str, RunSpec] = {}
        for preset, steps, seed, lr, kv_in, method, h_in in itertools.product(
                self.presets, self.steps, self.seeds, self.lrs, self.kv_heads, self.methods, self.heads):
            kv = int(kv_in) if kv_in is not None else int(extra.get("num_key_value_heads",
                                                                     PRESETS[preset]["num_key_value_heads"]))
            H = routing_heads_of(method, {"routing_heads": h_in}, default=kv)  # attnres 1, baseline None
            spec = RunSpec(preset=preset, method=method, H=H, kv=kv, lr=float(lr), seed=int(seed),
                           steps=int(steps))
            specs.setdefault(spec.name, spec)
        for spec in specs.values():
            _check_model(spec, extra)
        return list(specs.values())


def _check_model(spec: RunSpec, extra: dict[str, Any]) -> None:
    """Fail before any training if a run's model cannot be built (e.g. d % H != 0)."""
    try:
        MHARConfig.from_preset(spec.preset, residual_method=spec.method, routing_heads=spec.H,
                               num_key_value_heads=spec.kv, **{k: v for k, v in extra.items()
                                                                if k != "num_key_value_heads"})
    except (ConfigError, ValueError, TypeError) as exc:
        raise UserError(f"run {spec.name}: {exc}") from exc
