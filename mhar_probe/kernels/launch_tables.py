"""Launch configurations of the kernels: data (launch_tables.json), looked up per shape.

A table file holds one list of rows per kernel, each row its key columns then its values
(the file's own `columns` entry names them):

    fwd     d, H, bytes      -> block_p, num_warps, maxnreg, stages       (route_fwd kernels)
    stack   d, H, HM         -> block_p, num_warps, programs_per_sm, maxnreg   (stack_bwd kernels)
    gather  d, H, HM, bytes  -> block_p, num_warps, prefetch, maxnreg, loads_first
                                                                           (stack_gather_kernel)
    fold    d, H, HM, bytes  -> block_p, num_warps, prefetch, maxnreg, loads_first, sources
                                                      (stack_fold_kernel; sources 0: stack_fold_held_kernel)
    pair_e  d, HM            -> block_c, block_p, num_warps, heads         (pair_e_kernel)

The fold kernel's row: the gather's values, prefetch 0 / 1 / 2 (2: the next reader's w, shift
and S' loaded with its dout as well), and `sources` 1 or 2 (sources per iteration of its reader
loop, sharing each dout load), or 0: `stack_fold_held_kernel` (the block's douts held, the loop
over sources; num_warps, prefetch 0 / 1 / 2 (2: the source loop under Triton's pipeliner, three
stages) and maxnreg are its own, block_p and loads_first unused),
where it serves the fold, else the reader loop with one source per iteration. Where a shape has
no fold row (tables written before the kind existed among them) the fold runs under the gather's
row with one source per iteration, as it did before it had a kind of its own. pair_e's `heads`
is the column blocks (one a head at the presets) a program takes, 1 or 2 (HB; more is taken as 2); a
pair_e row without it (files written before the column) takes 1.

`bytes` is the storage width a row was swept for (bytes per forward output / stored dout
element); 0 matches any width and is used where no row names the chain's width. maxnreg 0: no
register cap. The built-in table is `launch_tables.json` beside this module;
`KernelConfig(launch_table=path)` lays a tuned file (`mhar bench routing --sweep` writes one,
in the same format; it may hold some kernels only) over it, row by row. Shapes with no row
take the heuristics below.

Rows per card: a file's `devices` entry maps a card's name, exactly as
`torch.cuda.get_device_name` gives it (`"NVIDIA H200"`), to rows in the same per-kernel format,
laid over the file's own rows on that card alone. The top-level rows are the default (the
built-in ones were swept on an H100); a card with no entry, or the CPU interpreter, uses them.
On a card, `tables_for` gives: built-in rows < built-in rows of the card < the config file's
rows < the file's rows of the card (each laid over the one before, row by row).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mhar_probe.errors import UserError
from mhar_probe.kernels.config import KernelConfig
from mhar_probe.kernels.launch import next_pow2

BUILTIN = Path(__file__).with_name("launch_tables.json")
KINDS = ("fwd", "stack", "gather", "fold", "pair_e")
KEY_COLUMNS = {"fwd": ("d", "H", "bytes"), "stack": ("d", "H", "HM"), "gather": ("d", "H", "HM", "bytes"),
               "fold": ("d", "H", "HM", "bytes"), "pair_e": ("d", "HM")}
VALUE_COLUMNS = {"fwd": ("block_p", "num_warps", "maxnreg", "stages"),
                 "stack": ("block_p", "num_warps", "programs_per_sm", "maxnreg"),
                 "gather": ("block_p", "num_warps", "prefetch", "maxnreg", "loads_first"),
                 "fold": ("block_p", "num_warps", "prefetch", "maxnreg", "loads_first", "sources"),
                 "pair_e": ("block_c", "block_p", "num_warps", "heads")}
SCHEMA = "mhar-probe kernel launch tables, version 1"


@dataclass(frozen=True)
class LaunchTables:
    """kind -> {key tuple: value tuple} (ints; see the module docstring)."""

    fwd: dict[tuple[int, ...], tuple[int, ...]] = field(default_factory=dict)
    stack: dict[tuple[int, ...], tuple[int, ...]] = field(default_factory=dict)
    gather: dict[tuple[int, ...], tuple[int, ...]] = field(default_factory=dict)
    fold: dict[tuple[int, ...], tuple[int, ...]] = field(default_factory=dict)
    pair_e: dict[tuple[int, ...], tuple[int, ...]] = field(default_factory=dict)
    #: card name (torch.cuda.get_device_name) -> rows laid over these on that card (no nesting)
    devices: dict[str, "LaunchTables"] = field(default_factory=dict)

    def over(self, other: "LaunchTables") -> "LaunchTables":
        """These rows with `other`'s laid over them (other wins per key; per card likewise)."""
        cards = {name: self.devices.get(name, LaunchTables()).over(other.devices.get(name, LaunchTables()))
                 for name in {**self.devices, **other.devices}}
        return LaunchTables(**{k: {**getattr(self, k), **getattr(other, k)} for k in KINDS}, devices=cards)

    def for_device(self, name: str | None) -> "LaunchTables":
        """The rows a kernel on card `name` looks up: the card's rows (`devices[name]`) laid over
        the default rows; the default rows alone for a card with none, or `None` (the CPU)."""
        rows = LaunchTables(**{k: dict(getattr(self, k)) for k in KINDS})
        card = self.devices.get(name) if name is not None else None
        return rows if card is None else rows.over(card)

    def _rows_json(self) -> dict:
        return {k: [[*key, *val] for key, val in getattr(self, k).items()] for k in KINDS}

    def to_json(self) -> dict:
        doc = dict(schema=SCHEMA, columns={k: [*KEY_COLUMNS[k], *VALUE_COLUMNS[k]] for k in KINDS},
                   **self._rows_json())
        if self.devices:
            doc["devices"] = {name: card._rows_json() for name, card in sorted(self.devices.items())}
        return doc

    def dump(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")

    # -- lookups ---------------------------------------------------------------------
    def fwd_config(self, d: int, num_heads: int, out_bytes: int = 0) -> tuple[int, int, int, int | None, int]:
        """(BLOCK_K, BLOCK_P, num_warps, maxnreg, stages) of the forward for a [BLOCK_P, H,
        BLOCK_K] register tile; a row naming `out_bytes` (the output's bytes per element) wins
        over the one for any width."""
        block_k = next_pow2(d // num_heads)
        hit = self.fwd.get((d, num_heads, out_bytes)) or self.fwd.get((d, num_heads, 0))
        if hit is not None:
            return block_k, hit[0], hit[1], hit[2] or None, hit[3]
        width = num_heads * block_k  # 512 columns -> 1 warp ... 2048 -> 4, wider -> 8
        return block_k, 1, max(1, min(8, width // 512)), None, 3

    def stack_config(self, d: int, num_heads: int, max_heads: int) -> tuple[int, int, int, int | None]:
        """(BLOCK_P, num_warps, programs per SM, maxnreg) of the stack_bwd kernels."""
        hit = self.stack.get((d, num_heads, max_heads))
        if hit is not None:
            return hit[0], hit[1], hit[2], hit[3] or None
        width = num_heads * next_pow2(d // num_heads)
        # one warp per 1024 columns; register-heavy wider tiles spill (measured: 1B with (2, 1, 16)
        # took 453 ms against 31 ms with (1, 2, 8))
        cfg = (1, 1, 16) if width <= 1024 else (1, 2, 8) if width <= 2048 else (2, 4, 2)
        return (*cfg, None)

    def gather_config(self, d: int, num_heads: int, max_heads: int, dout_bytes: int = 0
                      ) -> tuple[int, int, bool, int | None, bool]:
        """(BLOCK_P, num_warps, prefetch, maxnreg, loads_first) of stack_gather_kernel; a row
        naming `dout_bytes` (the stored douts' bytes per element) wins over the one for any width."""
        hit = self.gather.get((d, num_heads, max_heads, dout_bytes)) or self.gather.get((d, num_heads, max_heads, 0))
        if hit is not None:
            return hit[0], hit[1], bool(hit[2]), hit[3] or None, bool(hit[4])
        if d < 1024:
            return 1, 2, False, None, False
        if d <= 1280:
            return 1, 1, True, None, False
        warps = 1 << max(0, (d // 256).bit_length() - 1)  # one warp per 256 columns, at most 8
        return 1, min(warps, 8), True, None, False

    def fold_config(self, d: int, num_heads: int, max_heads: int, dout_bytes: int = 0
                    ) -> tuple[int, int, int, int | None, bool, int]:
        """(BLOCK_P, num_warps, prefetch 0-2, maxnreg, loads_first, sources per iteration) of
        stack_fold_kernel: its own row (one naming `dout_bytes` first), else the gather's row
        (`gather_config`) with one source per iteration."""
        hit = self.fold.get((d, num_heads, max_heads, dout_bytes)) or self.fold.get((d, num_heads, max_heads, 0))
        if hit is not None:
            return hit[0], hit[1], hit[2], hit[3] or None, bool(hit[4]), hit[5]
        block_p, warps, prefetch, maxnreg, loads_first = self.gather_config(d, num_heads, max_heads, dout_bytes)
        return block_p, warps, int(prefetch), maxnreg, loads_first, 1

    def pair_e_config(self, d: int, max_heads: int) -> tuple[int, int, int, int]:
        """(BLOCK_C readers, BLOCK_P positions per dot step, num_warps, HB column blocks a program)
        of pair_e_kernel."""
        hit = self.pair_e.get((d, max_heads))
        return (hit[0], hit[1], hit[2], hit[3]) if hit is not None else (16, 16, 4, 1)


def load_tables(path: str | Path) -> LaunchTables:
    """A table file (module docstring); a row of the wrong width or a forward row with fewer
    than two stages is refused with the file's name (and the card's, for a `devices` row)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"launch table {path}: cannot read it ({exc})") from exc
    cards = data.get("devices", {})
    if not isinstance(cards, dict) or not all(isinstance(v, dict) for v in cards.values()):
        raise UserError(f"launch table {path}: `devices` maps a card's name to its rows per kernel "
                        f"({', '.join(KINDS)})")
    devices = {}
    for name, card in cards.items():
        odd = sorted(set(card) - set(KINDS))
        if odd:
            raise UserError(f"launch table {path}: device {name!r} has {', '.join(odd)}; a card's entry "
                            f"holds rows of {', '.join(KINDS)} only")
        devices[name] = LaunchTables(**_parse_rows(card, f"{path} (device {name!r})"))
    return LaunchTables(**_parse_rows(data, str(path)), devices=devices)


def _parse_rows(data: dict, path: str) -> dict[str, dict[tuple[int, ...], tuple[int, ...]]]:
    """kind -> {key: values} of one block of rows (a file's top level or one card's entry)."""
    tables = {}
    for kind in KINDS:
        nk, nv = len(KEY_COLUMNS[kind]), len(VALUE_COLUMNS[kind])
        rows = {}
        for row in data.get(kind, []):
            if kind == "pair_e" and isinstance(row, list) and len(row) == nk + nv - 1:
                row = [*row, 1]  # written before the `heads` column (2026-12-07): one column block a program
            if not isinstance(row, list) or len(row) != nk + nv or not all(isinstance(x, (int, bool)) for x in row):
                raise UserError(f"launch table {path}: a {kind} row is {row}; expected {nk + nv} integers "
                                f"({', '.join(KEY_COLUMNS[kind] + VALUE_COLUMNS[kind])})")
            key, val = tuple(int(x) for x in row[:nk]), tuple(int(x) for x in row[nk:])
            if kind == "fwd" and val[3] < 2:
                raise UserError(f"launch table {path}: fwd row {row} has {val[3]} stages; the forward's "
                                "loop runs under Triton's pipeliner with 2 or more")
            if kind == "fold" and (val[5] not in (0, 1, 2) or val[2] not in (0, 1, 2)):
                raise UserError(f"launch table {path}: fold row {row} has prefetch {val[2]} and sources "
                                f"{val[5]}; prefetch is 0, 1 or 2 and sources 0 (the held kernel), 1 or 2")
            rows[key] = val
        tables[kind] = rows
    return tables


_FILES: dict[str, LaunchTables] = {}
_TABLES: dict[tuple[str | None, str | None], LaunchTables] = {}


def _file(path: str | Path) -> LaunchTables:
    key = str(path)
    if key not in _FILES:
        _FILES[key] = load_tables(path)
    return _FILES[key]


def tables_for(config: KernelConfig, device: str | None = None) -> LaunchTables:
    """The rows kernels on card `device` (its name, `card_name`; None: the default rows, as on
    the CPU) look up: the built-in table's rows for that card with `config.launch_table`'s rows
    for it laid over them (module docstring). Each file is read once per process."""
    path = config.launch_table
    hit = _TABLES.get((path, device))
    if hit is None:
        hit = _file(BUILTIN).for_device(device)
        if path is not None:
            hit = hit.over(_file(path).for_device(device))
        _TABLES[(path, device)] = hit
    return hit


_CARDS: dict[int, str] = {}


def card_name(device) -> str | None:
    """The name a table's `devices` entry is keyed by for a tensor's `device` (a torch.device):
    torch.cuda.get_device_name of a CUDA device (once per device index), None otherwise."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    name = _CARDS.get(index)
    if name is None:
        name = _CARDS[index] = torch.cuda.get_device_name(index)
    return name
