"""The residual methods and what each one is: the one definition every other module reads.

    method    routes   sources its sites read       routing heads   in figures         other
    baseline  no       -                            none            Baseline           additive stream
    hyper     no       -                            none            Hyper-conn.        hyper-connection streams
    attnres   yes      2L+1 sublayer outputs        one (H = 1)     Single-head        replacement form
    mhar      yes      2L+1 sublayer outputs        free (H)        MHAR               replacement form
    mhar_hw   yes      2L+1 sublayer outputs        free (H)        MHAR (head-wise)   attention sites: one full-width
                                                                                       query per KV group
    delta     yes      null + block deltas          free (H)        MHAR (delta)       identity-preserving delta form

The head count of a run is recorded as `routing_heads` everywhere (model config, summaries,
routing datasets); `routing_heads_of` reads it from any record, old names included. A run is
named by `run_label`: its method and, where the method's head count is a free choice, its H.

This module is part of the code a saved run carries (`auto_map`): it imports only the
standard library, and the model files import it as `from .methods import ...`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Method:
    """One residual method's properties (see the module table)."""

    name: str
    #: what its routing sites read: "sublayers" (the replacement form over the token embedding
    #: and every sublayer output, N = 2L+1), "blocks" (the delta form: a null source and block
    #: deltas) or None (no routing sites)
    sources: Literal["sublayers", "blocks"] | None = None
    #: its routing head count: "free" (H, any divisor of d), "one" (fixed H = 1) or None
    head_count: Literal["free", "one"] | None = None
    #: attention sites hold one full-width query per KV group (G = num_key_value_heads)
    head_wise: bool = False
    #: the residual stream is split into hyper-connection streams (no routing)
    hyper_streams: bool = False
    #: its name in figures and tables (the paper's wording)
    display: str = ""

    @property
    def routes(self) -> bool:
        """It has routing sites: learned reads over depth."""
        return self.sources is not None

    @property
    def replaces(self) -> bool:
        """A replacement form: each site's read *is* the sublayer input (no additive stream)."""
        return self.sources == "sublayers"

    @property
    def delta(self) -> bool:
        """The delta form: x = h + gate * route([null, block deltas])."""
        return self.sources == "blocks"

    @property
    def has_routing_heads(self) -> bool:
        return self.head_count is not None

    @property
    def free_heads(self) -> bool:
        """The routing head count is a choice (--heads), not fixed by the method."""
        return self.head_count == "free"


_ALL = (
    Method("baseline", display="Baseline"),
    Method("hyper", hyper_streams=True, display="Hyper-conn."),
    Method("attnres", sources="sublayers", head_count="one", display="Single-head"),
    Method("mhar", sources="sublayers", head_count="free", display="MHAR"),
    Method("mhar_hw", sources="sublayers", head_count="free", head_wise=True, display="MHAR (head-wise)"),
    Method("delta", sources="blocks", head_count="free", display="MHAR (delta)"),
)

#: every method, in the paper's order
METHODS: tuple[str, ...] = tuple(m.name for m in _ALL)
_BY_NAME: dict[str, Method] = {m.name: m for m in _ALL}
#: the methods with routing sites (attnres, mhar, mhar_hw, delta)
ROUTED_METHODS: tuple[str, ...] = tuple(m.name for m in _ALL if m.routes)
#: the replacement forms over 2L+1 sources (attnres, mhar, mhar_hw)
REPLACEMENT_METHODS: tuple[str, ...] = tuple(m.name for m in _ALL if m.replaces)
#: the methods whose routing head count is a free choice (mhar, mhar_hw, delta)
FREE_HEAD_METHODS: tuple[str, ...] = tuple(m.name for m in _ALL if m.free_heads)


def method(name: str) -> Method:
    """The properties of method `name`; ValueError (naming the choices) for an unknown one."""
    found = _BY_NAME.get(name)
    if found is None:
        raise ValueError(f"unknown residual method {name!r}; choose one of {', '.join(METHODS)}")
    return found


#: the names the routing head count was recorded under, current name first: `heads` in
#: train_config.json (the --heads option), `H` in routing datasets before they said routing_heads
ROUTING_HEADS_KEYS = ("routing_heads", "heads", "H")


def routing_heads_of(method_name: str | None, *records: Mapping[str, Any],
                     default: int | None = None) -> int | None:
    """The routing head count of a run of `method_name`, read from its records.

    `records` (summary.json, config.json, train_config.json, routing-dataset attrs ...) are
    searched in the order given, each under every name in `ROUTING_HEADS_KEYS`; the first value
    set wins, else `default` (H = KV heads when nothing was set). Methods without routing heads
    give None whatever the records say, attnres gives 1. An unknown method name reads the
    records as a method with free heads (analysis of a run by a later version)."""
    found = _BY_NAME.get(method_name)
    if found is not None and not found.has_routing_heads:
        return None
    if found is not None and found.head_count == "one":
        return 1
    for record in records:
        for key in ROUTING_HEADS_KEYS:
            value = record.get(key)
            if value is not None:
                return int(value)
    return default


LabelStyle = Literal["plain", "display", "compact"]


def display_name(method_name: str) -> str:
    """The method's name in figures and tables ('Single-head'); an unknown method keeps its own name."""
    found = _BY_NAME.get(method_name)
    return found.display if found is not None else method_name


def run_label(method_name: str, heads: int | None, style: LabelStyle = "plain", *, note: str = "") -> str:
    """A run's method and head count, the one spelling every table, figure and claim uses.

    H is named iff the method's head count is a free choice (mhar, mhar_hw, delta) and `heads` is
    given (an unknown method: iff `heads` is given); attnres (H = 1 by definition), baseline and
    hyper are named by the method alone:

        plain    'mhar H=8'     'attnres'        (claims, statistics)
        display  'MHAR (H=8)'   'Single-head'    (figures; `note` joins the brackets: 'MHAR (H=8, head mean)',
                                                   and so does H a bracketed name: 'MHAR (head-wise, H=4)')
        compact  'mhar H8'      'attnres'        (probe columns)
    """
    found = _BY_NAME.get(method_name)
    shown = heads is not None and heads != 0 and (found is None or found.free_heads)
    if style == "display":
        name = display_name(method_name)
        if not shown:
            return name
        inside = f"H={heads}{f', {note}' if note else ''}"
        if name.endswith(")"):  # a name with its own brackets takes H inside them: 'MHAR (head-wise, H=4)'
            return f"{name[:-1]}, {inside})"
        return f"{name} ({inside})"
    if style == "compact":
        return f"{method_name} H{heads}" if shown else method_name
    if style == "plain":
        return f"{method_name} H={heads}" if shown else method_name
    raise ValueError(f"unknown label style {style!r}; choose plain, display or compact")
