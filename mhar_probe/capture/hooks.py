"""TransformerLens-style hooks on the routing sites.

Hook names are the module paths of the `HookPoint`s relative to the decoder (`model.model`):

    sites.{s}.hook_sources   [N_s, B, T, d]   the sources site s reads (materialised only when hooked)
    sites.{s}.hook_weights   [N_s, B, T, H]   its routing weights (H = G query groups at mhar_hw
                                              attention sites)
    sites.{s}.hook_out       [B, T, d]        its routed output ([G, B, T, d] at mhar_hw attention
                                              sites; for delta sites partial + gate * routed)

`s` is the site index: 2l = attention input of layer l, 2l+1 = MLP input, 2L = final. The
same names exist for every routing backend. A hook is `fn(activation, hook) -> Tensor | None`
(`hook.name` is the name above). Returning a tensor replaces the activation only at
`hook_out`; `hook_sources` and `hook_weights` are observation points (the site has already
used the values), so what a hook returns there is ignored.

Cost when nothing is attached: `hook_sources` is not stacked and `hook_weights` is not
called (the sites check `HookPoint.active`); `hook_out` is an identity module call.
"""

from __future__ import annotations

import contextlib
import fnmatch
import re
from typing import Callable, Iterator, Sequence, Union

import torch
from torch import Tensor, nn

from ..model.hooks import HookPoint
from .errors import CaptureError

HookFn = Callable[[Tensor, HookPoint], Union[Tensor, None]]
NameFilter = Union[str, Sequence[str], Callable[[str], bool], None]


def _decoder(model: nn.Module) -> nn.Module:
    """The module the hook names are relative to (`MHARModel`)."""
    inner = getattr(model, "model", None)
    return inner if isinstance(inner, nn.Module) else model


def routing_sites(model: nn.Module) -> nn.ModuleList:
    """The model's routing sites in call order: `model.model.sites` (MHARForCausalLM) or
    `model.sites` (a converted / imported delta model, whose decoder is the wrapped base)."""
    return _decoder(model).sites


def hook_points(model: nn.Module) -> dict[str, HookPoint]:
    """All hook points of `model` by name (`sites.3.hook_weights`, ...), in module order."""
    root = _decoder(model)
    points: dict[str, HookPoint] = {}
    for name, module in root.named_modules():
        if isinstance(module, HookPoint):
            module.name = name
            points[name] = module
    return points


def _matcher(names: NameFilter) -> Callable[[str], bool]:
    """A name, a glob (`sites.*.hook_weights`), a list of names, a predicate, or None (all)."""
    if names is None:
        return lambda _: True
    if callable(names):
        return names
    if isinstance(names, str):
        names = [names]
    patterns = [re.compile(fnmatch.translate(n)) for n in names]
    return lambda name: any(p.match(name) for p in patterns)


def resolve(model: nn.Module, names: NameFilter) -> list[str]:
    """Hook names selected by `names`; an explicit name that matches nothing is an error."""
    points = hook_points(model)
    chosen = [n for n in points if _matcher(names)(n)]
    if isinstance(names, (str, list, tuple)) and not chosen:
        raise CaptureError(f"no hook point matches {names!r}; names look like "
                           f"'sites.0.hook_weights' (this model has {len(points)} hook points)")
    return chosen


@contextlib.contextmanager
def hooks(model: nn.Module, fwd_hooks: Sequence[tuple[NameFilter, HookFn]] = ()) -> Iterator[nn.Module]:
    """Attach forward hooks for the duration of the block; they are removed on exit (also on error).

        with hooks(model, [("sites.*.hook_weights", fn)]):
            model(input_ids)

    Each entry is (name, glob, list of names or predicate on names, fn(activation, hook)).
    """
    points = hook_points(model)
    handles = []
    try:
        for names, fn in fwd_hooks:
            for name in resolve(model, names):
                point = points[name]
                handles.append(point.register_forward_hook(
                    lambda mod, args, out, fn=fn: fn(out, mod)))
        yield model
    finally:
        for h in handles:
            h.remove()


class ActivationCache(dict):
    """name -> activation (detached). A plain dict with a readable repr."""

    def __repr__(self) -> str:
        items = ", ".join(f"{k}: {tuple(v.shape)}" for k, v in self.items())
        return f"ActivationCache({items})"


def run_with_cache(model: nn.Module, input_ids: Tensor, names_filter: NameFilter = None,
                   device: str | torch.device | None = None, **forward_kwargs) -> tuple[object, ActivationCache]:
    """Run `model(input_ids, **forward_kwargs)` under no_grad, caching every selected activation.

    Returns (model output, cache). Activations are detached (and moved to `device` if given).
    A hook point that fires several times in one call (generation) keeps the last value.
    """
    cache = ActivationCache()

    def save(act: Tensor, hook: HookPoint) -> None:
        cache[hook.name] = act.detach() if device is None else act.detach().to(device)

    with hooks(model, [(names_filter, save)]), torch.no_grad():
        out = model(input_ids, **forward_kwargs)
    return out, cache
