"""Multi-head depth routing: the reference (eq. mh) and the backend registry.

For a site with query q in R^d split into H heads of width K = d/H, key-norm weight g and
sources s_0..s_{N-1} (each [B, T, d]):

    khat_n        = RMSNorm_g(s_n)                      (RMS over the full d-row, eps)
    alpha^{(h)}_n = softmax_n( q_h . khat_n[h] )        (one softmax over depth per head)
    out[h]        = sum_n alpha^{(h)}_n s_n[h]

H = 1 is single-head attention residuals (eq. route). In the delta form the result is added
to a residual stream through a gate: out = partial + gate * routed.

Backends share one interface so that model code never changes:
  * `route(sources, ...)`: one self-contained call on a stacked [N, B, T, d] tensor;
  * `new_stack(capacity, params=None)`: a `SourceStack` that receives each source once
    (`append`) and routes over any prefix of them (`route(query, g, H, n)`) -- the
    shared-buffer form. `params` lists every site's (query, key-norm weight) in call order
    (a [G, d] query is G calls); a backend may use it to form all of their gradients in one
    place (triton's 4-bytes/pair backward), the others ignore it.
`eager` is the reference, `compile` is the same code under torch.compile, and `triton`
(the fused kernels of mhar_probe.kernels) is registered by `register_triton_backend` the
first time it is asked for.

Which backend a model routes with is a run-time setting, not part of its config:
`set_routing_backend(model, name, kernels=None)` (or `routing_backend(model, name)` for a `with`
block) checks that the backend can route the model's reads (the triton kernels' limits on H) and
sets it on every module that routes; `choose_backend(device, requested)` is the default
every entry point uses (triton on CUDA, eager elsewhere).

A backend may take options (triton: a `mhar_probe.kernels.KernelConfig`). They travel with the
model, never through a global: `set_routing_backend(model, "triton", kernels=cfg)` stores `cfg`
on every routing module beside the backend's name, and each forward asks
`get_backend(name, kernels)` for the backend with them bound (`RoutingBackend.configure`), so two
models with different kernel configurations run side by side in one process. Backends without
options (eager, compile) ignore them.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from dataclasses import dataclass
from collections.abc import Iterable, Iterator, Sequence
from typing import Callable, Protocol

import torch
from torch import Tensor, nn

from .config import ConfigError


def rms_norm_keys(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """Qwen3 RMSNorm: statistic in fp32, normalised value rounded to x.dtype, then * weight."""
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


def route_reference(
    sources: Tensor,  # [N, B, T, d]
    query: Tensor,  # [d]
    norm_weight: Tensor,  # [d]
    num_heads: int,
    eps: float = 1e-6,
    partial: Tensor | None = None,  # [B, T, d] residual stream (delta form)
    gate: Tensor | None = None,  # [] scalar gate (delta form)
) -> tuple[Tensor, Tensor]:
    """Eq. (mh) read line for line; returns (out [B, T, d], weights [N, B, T, H]).

    Logits, softmax and the mix run in fp32; the output is cast back to the sources' dtype.
    """
    N, B, T, D = sources.shape
    H = num_heads
    if D % H:
        raise ValueError(f"hidden size d={D} is not divisible by routing heads H={H}")
    keys = rms_norm_keys(sources, norm_weight, eps)  # [N, B, T, D]
    q = query.float().view(H, D // H)  # (d,) query -> H heads
    logits = torch.einsum("he,nbthe->nbth", q, keys.float().view(N, B, T, H, D // H))
    alpha = logits.softmax(dim=0)  # H softmaxes over depth  [N, B, T, H]
    mixed = torch.einsum("nbth,nbthe->bthe", alpha, sources.float().view(N, B, T, H, D // H))
    out = mixed.reshape(B, T, D)
    if partial is not None:
        out = partial.float() + (gate.float() if gate is not None else 1.0) * out
    return out.to(sources.dtype), alpha


class SourceStack(Protocol):
    """The depth history of one forward pass: sources are appended once and routed over."""

    def append(self, x: Tensor) -> None: ...  # x: [B, T, d]

    def __len__(self) -> int: ...

    def stacked(self, n: int | None = None) -> Tensor: ...  # [n, B, T, d]

    def route(self, query: Tensor, norm_weight: Tensor, num_heads: int, eps: float,
              n: int | None = None) -> tuple[Tensor, Tensor]: ...


RouteFn = Callable[..., tuple[Tensor, Tensor]]


class ListSourceStack:
    """Keeps sources in a Python list and stacks the prefix at every call (the reference path)."""

    def __init__(self, capacity: int, route_fn: RouteFn = route_reference,
                 params: Sequence[tuple[Tensor, Tensor]] | None = None) -> None:
        self.capacity = capacity  # params: accepted for the common interface, not needed here
        self.sources: list[Tensor] = []
        self._route_fn = route_fn

    def append(self, x: Tensor) -> None:
        if len(self.sources) >= self.capacity:
            raise RuntimeError(f"source stack is full ({self.capacity} sources)")
        self.sources.append(x)

    def __len__(self) -> int:
        return len(self.sources)

    def stacked(self, n: int | None = None) -> Tensor:
        return torch.stack(self.sources[: len(self.sources) if n is None else n])

    def route(self, query: Tensor, norm_weight: Tensor, num_heads: int, eps: float,
              n: int | None = None) -> tuple[Tensor, Tensor]:
        return self._route_fn(self.stacked(n), query, norm_weight, num_heads, eps)


@dataclass(frozen=True)
class RoutingBackend:
    """A routing implementation: a per-call function and a factory of source stacks."""

    name: str
    route: RouteFn
    new_stack: Callable[..., SourceStack]  # (capacity, params=None)
    #: (d, H) -> None, or ValueError for a read of width d in H heads the backend cannot route
    check_heads: Callable[[int, int], None] | None = None
    #: options -> this backend with them bound into `route` and `new_stack` (None: it takes none)
    configure: Callable[[object], "RoutingBackend"] | None = None
    #: the options bound into this one (None: the backend's defaults)
    options: object = None


_BACKENDS: dict[str, RoutingBackend] = {}
_CONFIGURED: dict[tuple[str, object], RoutingBackend] = {}  # (name, options) -> backend, built once


def register_backend(backend: RoutingBackend) -> None:
    _BACKENDS[backend.name] = backend


def _compiled_route() -> RouteFn:
    fn = getattr(_compiled_route, "_fn", None)
    if fn is None:
        fn = torch.compile(route_reference, dynamic=True)
        _compiled_route._fn = fn  # type: ignore[attr-defined]
    return fn


def _route_compiled(*args, **kwargs) -> tuple[Tensor, Tensor]:
    return _compiled_route()(*args, **kwargs)


register_backend(RoutingBackend("eager", route_reference,
                                lambda cap, params=None: ListSourceStack(cap, route_reference)))
register_backend(RoutingBackend("compile", _route_compiled,
                                lambda cap, params=None: ListSourceStack(cap, _route_compiled)))


def register_triton_backend() -> RoutingBackend:
    """Import the fused kernels (mhar_probe.kernels) and register them as backend `triton`.

    The kernels package only exports; this is the one place that turns it into a backend. A
    saved run's own copy of this module (loaded by `trust_remote_code`) registers into its own
    registry, from the installed package. Raises ImportError where the package or Triton is
    missing."""
    from mhar_probe.kernels import KernelConfig, TritonSourceStack, check_heads, route_triton

    def configure(config: object) -> RoutingBackend:
        if not isinstance(config, KernelConfig):
            raise TypeError(f"routing backend 'triton' takes a KernelConfig, got {type(config).__name__}")
        return RoutingBackend("triton", functools.partial(route_triton, config=config),
                              functools.partial(TritonSourceStack, config=config), check_heads, configure, config)

    backend = configure(KernelConfig())
    register_backend(backend)
    return backend


def get_backend(name: str, options: object = None) -> RoutingBackend:
    """Look up a routing backend, with `options` bound where the backend takes any (triton: a
    KernelConfig; None: its defaults); `triton` is registered on first use
    (`register_triton_backend`)."""
    if options is not None:
        try:
            key = (name, options)
            backend = _CONFIGURED.get(key)
        except TypeError:  # unhashable: not a configuration object
            raise TypeError(f"routing backend {name!r}: options must be a frozen configuration (triton: a "
                            f"KernelConfig), got {type(options).__name__}") from None
        if backend is None:
            base = get_backend(name)
            backend = base.configure(options) if base.configure is not None else base
            _CONFIGURED[key] = backend
        return backend
    if name == "triton" and name not in _BACKENDS:
        try:
            register_triton_backend()
        except ImportError as exc:
            if __name__ == "mhar_probe.model.routing":  # pragma: no cover - depends on the machine
                raise RuntimeError(f"routing backend 'triton' is unavailable here: {exc}") from exc
            # a saved run's own code without mhar_probe installed: the reference computes the same
            warnings.warn(f"routing backend 'triton' needs the mhar-probe package ({exc}); routing with the "
                          f"eager reference instead", stacklevel=2)
            return _BACKENDS["eager"]
    if name not in _BACKENDS:
        raise ValueError(f"unknown routing backend {name!r}; available: {', '.join(sorted(_BACKENDS))}")
    return _BACKENDS[name]


def available_backends() -> list[str]:
    return sorted(_BACKENDS)


def route(
    sources: Tensor,  # [N, B, T, d]
    query: Tensor,  # [d]
    norm_weight: Tensor,  # [d]
    num_heads: int,
    eps: float = 1e-6,
    backend: str = "eager",
    partial: Tensor | None = None,
    gate: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The one routing entry point: (out [B, T, d], weights [N, B, T, H]) from any backend."""
    return get_backend(backend).route(sources, query, norm_weight, num_heads, eps, partial=partial, gate=gate)


# --------------------------------------------------------------------------- choosing a backend
#: the backends a user may choose (--routing-backend)
ROUTING_BACKENDS = ("eager", "compile", "triton")
#: what a model routes with until it is told otherwise: the reference, which runs anywhere
DEFAULT_BACKEND = "eager"


def choose_backend(device: torch.device | str, requested: str | None = None) -> str:
    """The backend to route with on `device`: `requested` when given, else triton on CUDA and
    eager elsewhere. An unknown or unavailable backend is a `ConfigError` (one line)."""
    name = requested if requested is not None else ("triton" if torch.device(device).type == "cuda" else "eager")
    check_backend(name)
    return name


def _heads_limit(name: str) -> Callable[[int, int], None] | None:
    """The backend's own check of a read of width d with H heads (ValueError if it cannot route
    it); None for a backend without limits (and for triton's eager stand-in in a saved run's code
    without mhar_probe)."""
    return get_backend(name).check_heads


def _check_name(name: str) -> None:
    if name not in ROUTING_BACKENDS:
        raise ConfigError(f"unknown routing backend {name!r}; choose one of {', '.join(ROUTING_BACKENDS)}")


def check_backend(name: str, reads: Iterable[tuple[int, int]] = ()) -> None:
    """Refuse, with a one-line `ConfigError`, a backend that is unknown, unavailable here, or
    cannot route one of `reads` ((d, H): a query of width d split into H heads)."""
    _check_name(name)
    try:
        get_backend(name)
    except (RuntimeError, ValueError) as exc:
        raise ConfigError(f"{exc}; route with 'eager' instead") from None
    limit = _heads_limit(name)
    for d, heads in sorted(set(reads)) if limit is not None else ():
        try:
            limit(d, heads)
        except ValueError as exc:
            raise ConfigError(f"{exc} (a read of width d={d}); choose such an H or route with 'eager'") from None


def _routing_modules(model: nn.Module) -> list[nn.Module]:
    """The modules that route (they hold a `routing_backend` name and their `routing_kernels`
    options, and read both at every forward)."""
    return [m for m in model.modules() if isinstance(getattr(m, "routing_backend", None), str)]


def set_routing_backend(model: nn.Module, name: str, kernels: object = None) -> nn.Module:
    """Route `model` with backend `name`, its options `kernels` (triton: a
    `mhar_probe.kernels.KernelConfig`; None: the backend's defaults), from its next forward on;
    returns `model`.

    Checked first (`check_backend`) against every read of the model's routing sites (each site
    names its own as `routing_reads`), so a limit of the backend is refused here, in one line, not at
    the first forward. A model without routing sites (baseline, a plain Hugging Face model)
    accepts any known backend name and is left as it is."""
    modules = _routing_modules(model)
    if not modules:
        _check_name(name)
        return model
    check_backend(name, [r for m in model.modules() for r in getattr(m, "routing_reads", ())])
    get_backend(name, kernels)  # options the backend refuses are refused here
    for m in modules:
        m.routing_backend, m.routing_kernels = name, kernels
    return model


def routing_kernels_of(model: nn.Module) -> object:
    """The backend options `model` routes with (None: the defaults, and for a model without
    routing sites)."""
    options: list[object] = []
    for m in _routing_modules(model):
        kernels = getattr(m, "routing_kernels", None)  # (a saved run's older code has none)
        if kernels not in options:
            options.append(kernels)
    if len(options) > 1:
        raise RuntimeError("the model's routing modules disagree on the kernel options; set them with "
                           "set_routing_backend")
    return options[0] if options else None


def routing_backend_of(model: nn.Module) -> str:
    """The backend `model` routes with (DEFAULT_BACKEND for a model without routing sites)."""
    names = {m.routing_backend for m in _routing_modules(model)}
    if len(names) > 1:
        raise RuntimeError(f"the model's routing modules disagree on the backend ({sorted(names)}); "
                           f"set it with set_routing_backend")
    return names.pop() if names else DEFAULT_BACKEND


@contextlib.contextmanager
def routing_backend(model: nn.Module, name: str | None) -> Iterator[str]:
    """Route `model` with `name` inside the block (None: as it is), keeping its kernel options;
    yields the backend in use."""
    old = routing_backend_of(model)
    if name is None:
        yield old
        return
    set_routing_backend(model, name, routing_kernels_of(model))
    try:
        yield name
    finally:
        for m in _routing_modules(model):
            m.routing_backend = old
