"""Reading a saved model directory (a run, a converted model, a base to convert), checked:

    read_config(dir)         config.json: UTF-8 JSON whose size fields are integers a real model
                             can have (`config.SIZE_LIMITS`), checked on the raw file before
                             transformers builds anything from it (a 10^9-layer config would
                             otherwise be looped over), then the Hugging Face config
    weight_index(dir)        the safetensors headers: name -> (dtype, shape), each tensor's bytes
                             inside its file (a truncated file is caught here, nothing loaded)
    check_weights(dir, cfg)  those tensors against the model `cfg` builds: every name, its shape,
                             a floating dtype
    check_finite(model, dir) every loaded floating tensor is finite
    load_model(dir, what)    all of the above around `from_pretrained`
    position_limit(cfg)      the model's position limit, also where a converted model nests it

Each failure is one `ConfigError` line naming the file and what is wrong. Not imported by the
model's own modules: a saved run's remote code does not carry it.
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from ..rundir import load_pretrained
from ..runfiles import CONFIG, read_json_object, read_model_config
from .config import SIZE_LIMITS, ConfigError, check_size

#: safetensors dtypes a model's weights may have, and their bytes per element
FLOAT_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
OTHER_DTYPES = {"I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "U16": 2, "U32": 4, "U64": 8}
#: a safetensors header larger than this is no header (a large model's is a few MB)
MAX_HEADER_BYTES = 100 << 20


def check_config_values(doc: Mapping[str, Any], where: str) -> None:
    """The size fields of a raw config dict (and of its nested `text_config`) within
    `SIZE_LIMITS`, and its epsilon a positive finite number; `ConfigError` "WHERE: field=...". """
    nested = doc.get("text_config")
    for part in (doc, nested if isinstance(nested, dict) else {}):
        for name in SIZE_LIMITS:
            if part.get(name) is not None:
                try:
                    check_size(name, part[name])
                except ConfigError as exc:
                    raise ConfigError(f"{where}: {exc}") from None
        eps = part.get("rms_norm_eps")
        if eps is not None and (not isinstance(eps, (int, float)) or isinstance(eps, bool)
                                or not 0 < eps < math.inf):
            raise ConfigError(f"{where}: rms_norm_eps={eps!r:.80} must be a finite number above 0")


def position_limit(config: Any) -> int | None:
    """`max_position_embeddings` of the model's text config: the config itself for a plain model,
    the nested base config (`get_text_config()`) for a converted delta model; None if neither says."""
    limit = getattr(config, "max_position_embeddings", None)
    get_text = getattr(config, "get_text_config", None)
    if limit is None and callable(get_text):
        limit = getattr(get_text(), "max_position_embeddings", None)
    return int(limit) if limit else None


def read_config(model_dir: str | os.PathLike, what: str = "model config") -> Any:
    """The checked Hugging Face config of `model_dir` (the Auto classes of this project must be
    registered: `import mhar_probe`, and `mhar_probe.convert` for converted models)."""
    from transformers import AutoConfig

    path = Path(model_dir) / CONFIG
    if not path.is_file():
        raise ConfigError(f"{model_dir} is not a model directory (no {CONFIG})")
    read_model_config(path, check_config_values)
    return load_pretrained(AutoConfig.from_pretrained, model_dir, what, local_files_only=True)


def _header(path: Path) -> dict[str, Any]:
    """The JSON header of one safetensors file, its byte ranges checked against the file size."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ConfigError(f"{path}: truncated ({size} bytes), not a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, MAX_HEADER_BYTES):
            raise ConfigError(f"{path}: header of {n} bytes in a file of {size}: truncated or not a safetensors file")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise ConfigError(f"{path}: its header is not JSON: damaged or not a safetensors file") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{path}: its header is not a JSON object: not a safetensors file")
    data = size - 8 - n
    for name, info in header.items():
        if name == "__metadata__":
            continue
        ok = (isinstance(info, dict) and info.get("dtype") in {**FLOAT_DTYPES, **OTHER_DTYPES}
              and isinstance(info.get("shape"), list)
              and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in info["shape"])
              and isinstance(info.get("data_offsets"), list) and len(info["data_offsets"]) == 2
              and all(isinstance(o, int) and not isinstance(o, bool) for o in info["data_offsets"]))
        if not ok:
            raise ConfigError(f"{path}: tensor {name!r} has a damaged header entry {str(info)[:120]}")
        begin, end = info["data_offsets"]
        itemsize = {**FLOAT_DTYPES, **OTHER_DTYPES}[info["dtype"]]
        if not 0 <= begin <= end <= data or end - begin != math.prod(info["shape"]) * itemsize:
            raise ConfigError(f"{path}: tensor {name!r} lies outside the file's {data} data bytes "
                              f"(offsets {begin}..{end}): the file is truncated or damaged")
    return header


def weight_index(model_dir: str | os.PathLike) -> dict[str, tuple[str, tuple[int, ...], Path]]:
    """name -> (safetensors dtype, shape, file) of the weights in `model_dir` (one file, or
    shards listed by model.safetensors.index.json)."""
    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json_object(index, "a safetensors index").get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ConfigError(f"{index}: 'weight_map' must map tensor names to file names")
        files = sorted(set(weight_map.values()))
    elif (model_dir / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise ConfigError(f"{model_dir} has no safetensors weights (model.safetensors)")
    out: dict[str, tuple[str, tuple[int, ...], Path]] = {}
    for name in files:
        path = model_dir / name
        if not path.is_file() or path.parent != model_dir:
            raise ConfigError(f"{index}: names the weights file {name!r}, which is not in {model_dir}")
        for key, info in _header(path).items():
            if key != "__metadata__":
                out[key] = (info["dtype"], tuple(info["shape"]), path)
    return out


def expected_weights(config: Any) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """(name -> shape of every tensor the model of `config` loads, names that may be absent
    because they are tied), from the model built on the meta device (nothing allocated)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    tied = {k for k in shapes if k.endswith("lm_head.weight")} if _ties(config) else set()
    return shapes, tied


def _ties(config: Any) -> bool:
    text = getattr(config, "text_config", None)
    return bool(getattr(config, "tie_word_embeddings", False) or getattr(text, "tie_word_embeddings", False))


def check_weights(model_dir: str | os.PathLike, config: Any, *, extra_ok: bool = False) -> None:
    """Every tensor the model of `config` needs is in `model_dir`'s safetensors with its shape
    and a floating dtype (`extra_ok`: names the model does not use are allowed, as for a base
    model from elsewhere); else one `ConfigError` naming the file and the first tensors wrong."""
    found = weight_index(model_dir)
    shapes, tied = expected_weights(config)
    where = next(iter({p for _, _, p in found.values()}), Path(model_dir) / "model.safetensors")
    missing = sorted(set(shapes) - set(found) - tied)
    if missing:
        raise ConfigError(f"{where}: {len(missing)} tensor(s) the model needs are missing, e.g. "
                          f"{', '.join(missing[:3])}")
    unexpected = sorted(set(found) - set(shapes))
    if unexpected and not extra_ok:
        raise ConfigError(f"{where}: {len(unexpected)} tensor(s) the model does not have, e.g. "
                          f"{', '.join(unexpected[:3])}")
    for name in sorted(set(found) & set(shapes)):
        dtype, shape, path = found[name]
        if shape != shapes[name]:
            raise ConfigError(f"{path}: tensor {name} has shape {list(shape)}, its config.json needs "
                              f"{list(shapes[name])}")
        if dtype not in FLOAT_DTYPES:
            raise ConfigError(f"{path}: tensor {name} is {dtype}, not a floating-point type")


def check_finite(model: torch.nn.Module, model_dir: str | os.PathLike) -> None:
    """Every floating parameter and buffer of the loaded `model` is finite."""
    for name, t in model.state_dict().items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise ConfigError(f"{Path(model_dir) / 'model.safetensors'}: tensor {name} holds {bad} non-finite "
                              f"value(s) (NaN or infinity) of {t.numel()}")


def load_model(model_dir: str | os.PathLike, what: str = "model", *, extra_ok: bool = False,
               loader: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """`AutoModelForCausalLM.from_pretrained(model_dir, **kwargs)` (or `loader`) with its config
    and weights checked first and its values checked after."""
    from transformers import AutoModelForCausalLM

    config = kwargs.pop("config", None) or read_config(model_dir)
    check_weights(model_dir, config, extra_ok=extra_ok)
    model = load_pretrained(loader or AutoModelForCausalLM.from_pretrained, model_dir, what, config=config,
                            **kwargs)
    check_finite(model, model_dir)
    return model
