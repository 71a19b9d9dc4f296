"""Import a checkpoint in the paper authors' format (`mhar import SRC DST`) into the workbench's own.

The authors' code (public: Zimmer061310/multi-head-attention-residuals-test-stuff,
Attention-Residuals/modeling_{llama,qwen3}_attnres.py) saves a Llama or Qwen3 causal LM whose
config.json says model_type `llama_attnres` / `qwen3_attnres` and carries `attnres_mode`,
`attnres_num_blocks`, `attnres_num_heads`, `attnres_use_null_source`, `attnres_gate_type`; each
layer l adds `attn_res_proj` [Q, d] and `attn_res_norm` [d] (Q = 1; G = KV heads for full_hw),
`mlp_res_proj` [1, d], `mlp_res_norm` [d], and with null sources `attn_null_source` /
`mlp_null_source` [d]; the replacement modes add `final_res_proj` / `final_res_norm`.

What each supported mode becomes (site 2l: layer l's attention input, 2l+1: its MLP input):

    delta_mh, delta_block   `mhar_delta` (MHARDeltaForCausalLM) around the unchanged HF base
      (Llama or Qwen3), delta_sources="boundary_chain", null_per_site=True:
        x_s = h + gate_s * route_H([null_s, c_0 .. c_{j_s-1}])
        query_s <- {attn,mlp}_res_proj.view(d), key norm_s <- {attn,mlp}_res_norm,
        null_s  <- {attn,mlp}_null_source, gate_s <- 1 ("bias": h + routed),
        sigmoid(gate_logit) ("sigmoid_scalar"), alpha ("learnable_alpha"): each is
        (1 - g) h + g (h + routed) = h + g routed. H = attnres_num_heads (delta_mh), 1 (delta_block).
        The final site 2L does not exist in the authors' delta modes: it gets gate 0 (exactly
        the final norm of h), query 0, key norm 1, null 0.
    full, full_mh, full_hw  `mhar` (MHARForCausalLM, the Qwen3-style decoder) with method
      attnres / mhar / mhar_hw: sources [emb, attn_0, mlp_0, ...], site s reads [0, s+1);
        query_s <- {attn,mlp}_res_proj (full_hw attention: [G, d]), final site <- final_res_*.

A plain `llama` / `qwen3` checkpoint (the paper's schedule-matched control) is imported as it is
(mode "plain", method baseline): the same checks, streaming load and provenance, the model
unchanged, so that both arms of a comparison come through one command.

Refused with one line: the other modes (block and block_mh, whose site plan this workbench does
not have, and the V-stream, split, hyper-connection and depth-attention variants), gates other
than the ones above, delta_block without null sources (its first attention site reads no source
at all), replacement modes on a Llama base (the decoder has per-head q/k norm) or on a Qwen3
base it cannot express (RoPE scaling, attention bias, sliding windows), full_hw with one KV head.

Weights are read from the safetensors headers first (every name, shape and dtype checked, one
line naming the tensor when one is missing, extra or mis-shaped), then shard by shard into a
model whose parameters start on the meta device (`parameters_on_meta`): a shard's tensors are
assigned into it (no copy when the dtype matches) and the next shard is read only then, so the
model is never held twice in host memory.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import Tensor, nn

from ..atomic import build_dir
from ..model.config import MHARConfig
from ..model.delta_config import MHARDeltaConfig
from ..model.saved import FLOAT_DTYPES, check_config_values, weight_index
from ..outputs import OutputKind, check_output
from ..runfiles import read_json_object
from .errors import ConversionError

#: the authors' model types and the Hugging Face base each one extends
AUTHOR_TYPES = {"llama_attnres": "llama", "qwen3_attnres": "qwen3"}
#: plain bases imported unchanged (the control arm)
PLAIN_TYPES = ("llama", "qwen3")
#: supported attnres_mode -> our method
MODES = {"delta_mh": "delta", "delta_block": "delta", "full": "attnres", "full_mh": "mhar", "full_hw": "mhar_hw"}
DELTA_GATES = ("bias", "sigmoid_scalar", "learnable_alpha")
ATTNRES_FIELDS = ("attnres_mode", "attnres_num_blocks", "attnres_num_heads", "attnres_use_null_source",
                  "attnres_gate_type", "attnres_init_bias", "attnres_gate_init")
#: config.json keys that describe the authors' class, not the base architecture
CLASS_FIELDS = ("model_type", "architectures", "auto_map", "transformers_version")
PROVENANCE = "import.json"
TORCH_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def supported_text() -> str:
    return (f"supported attnres_mode: {', '.join(MODES)} (full, full_mh, full_hw on qwen3_attnres only) of "
            f"model_type {' or '.join(AUTHOR_TYPES)}, or a plain {' or '.join(PLAIN_TYPES)} model")


@dataclass(frozen=True)
class AuthorsConfig:
    """What an authors' config.json says, checked."""

    model_type: str  # llama_attnres | qwen3_attnres
    mode: str
    base: Any  # the Hugging Face config of the base architecture
    num_blocks: int
    heads: int
    null: bool
    gate: str

    @property
    def method(self) -> str:
        return "baseline" if self.mode == "plain" else MODES[self.mode]

    @property
    def delta(self) -> bool:
        return self.method == "delta"


def read_authors_config(src: Path) -> AuthorsConfig:
    """The checked authors' config of `src`; `ConversionError` (one line) for anything unsupported."""
    from transformers import AutoConfig

    path = src / "config.json"
    if not path.is_file():
        raise ConversionError(f"{src} is not a model directory (no config.json)")
    raw = read_json_object(path, "a model config")
    check_config_values(raw, str(path))
    model_type = raw.get("model_type")
    if model_type in PLAIN_TYPES:  # the control arm: a plain base, imported unchanged
        try:
            base = AutoConfig.for_model(model_type, **{k: v for k, v in raw.items() if k not in CLASS_FIELDS})
        except (ValueError, KeyError, TypeError) as exc:
            raise ConversionError(f"{path}: not a valid {model_type} config ({type(exc).__name__}: {exc})") from None
        return AuthorsConfig(model_type, "plain", base, 1, 1, False, "bias")
    if model_type not in AUTHOR_TYPES:
        raise ConversionError(f"{path}: model_type {model_type!r} is not the authors' format; {supported_text()}"
)
    mode = raw.get("attnres_mode", "block")
    if mode not in MODES:
        raise ConversionError(f"{path}: attnres_mode {mode!r} cannot be imported; {supported_text()}")
    gate = raw.get("attnres_gate_type", "bias")
    null = bool(raw.get("attnres_use_null_source", False)) or mode == "delta_mh"  # delta_mh always has them
    heads = raw.get("attnres_num_heads", 8) if mode in ("delta_mh", "full_mh", "full_hw") else 1
    blocks = raw.get("attnres_num_blocks", 8)
    for name, value in (("attnres_num_heads", heads), ("attnres_num_blocks", blocks)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConversionError(f"{path}: {name}={value!r:.40} must be a positive integer")
    base_type = AUTHOR_TYPES[model_type]
    rest = {k: v for k, v in raw.items() if k not in ATTNRES_FIELDS + CLASS_FIELDS}
    try:
        base = AutoConfig.for_model(base_type, **rest)
    except (ValueError, KeyError, TypeError) as exc:
        raise ConversionError(f"{path}: not a valid {base_type} config ({type(exc).__name__}: {exc})") from None
    cfg = AuthorsConfig(model_type, mode, base, blocks, heads, null, gate)
    _check_expressible(cfg, path)
    return cfg


def _check_expressible(cfg: AuthorsConfig, path: Path) -> None:
    """Refuse (one line) a checkpoint this workbench's models cannot compute exactly."""
    where = f"{path}: {cfg.model_type} {cfg.mode}"
    d = cfg.base.hidden_size
    if d % cfg.heads:
        raise ConversionError(f"{where}: attnres_num_heads={cfg.heads} does not divide hidden_size={d}")
    if cfg.delta:
        if cfg.gate not in DELTA_GATES:
            raise ConversionError(f"{where}: attnres_gate_type {cfg.gate!r} cannot be imported; a delta mode "
                                  f"takes one of {', '.join(DELTA_GATES)}")
        if not cfg.null:
            raise ConversionError(f"{where}: without null sources (attnres_use_null_source false) its first "
                                  f"attention site reads no source at all, which the delta form cannot express; "
                                  f"only delta_block with attnres_use_null_source true is supported")
        return
    if cfg.gate != "bias":
        raise ConversionError(f"{where}: attnres_gate_type {cfg.gate!r} cannot be imported; replacement modes "
                              f"take only 'bias' (the routed mix is the sublayer input)")
    if cfg.model_type != "qwen3_attnres":
        raise ConversionError(f"{where}: the replacement modes map onto this workbench's Qwen3-style decoder "
                              f"(per-head q/k norm), which a Llama base does not have; for llama_attnres "
                              f"only delta_mh and delta_block are supported")
    base = cfg.base
    rope = getattr(base, "rope_parameters", None) or {}
    problems = [
        f"rope_type {rope.get('rope_type')!r}" if rope.get("rope_type", "default") != "default" else "",
        "attention_bias" if getattr(base, "attention_bias", False) else "",
        "use_sliding_window" if getattr(base, "use_sliding_window", False) else "",
        f"hidden_act {base.hidden_act!r}" if getattr(base, "hidden_act", "silu") != "silu" else "",
    ]
    problems = [p for p in problems if p]
    if problems:
        raise ConversionError(f"{where}: the Qwen3-style decoder cannot express {', '.join(problems)}")
    if cfg.mode == "full_hw" and base.num_key_value_heads < 2:
        raise ConversionError(f"{where}: full_hw with one KV head routes its attention site with one "
                              f"full-width query, which mhar_hw (H heads there) does not; not supported")


def target_config(cfg: AuthorsConfig) -> Any:
    """Our config for the authors' checkpoint (the mapping in the module docstring); a plain
    base keeps its own."""
    base = cfg.base
    if cfg.mode == "plain":
        return base
    if cfg.delta:
        return MHARDeltaConfig(text_config=base, num_blocks=cfg.num_blocks, routing_heads=cfg.heads,
                               routing_eps=float(base.rms_norm_eps), delta_sources="boundary_chain",
                               null_per_site=True)
    rope = getattr(base, "rope_parameters", None) or {}
    theta = rope.get("rope_theta", getattr(base, "rope_theta", 1e4))
    return MHARConfig(
        vocab_size=base.vocab_size, hidden_size=base.hidden_size, num_hidden_layers=base.num_hidden_layers,
        num_attention_heads=base.num_attention_heads, num_key_value_heads=base.num_key_value_heads,
        head_dim=getattr(base, "head_dim", None), intermediate_size=base.intermediate_size,
        max_position_embeddings=base.max_position_embeddings, rms_norm_eps=base.rms_norm_eps,
        rope_theta=float(theta), tie_word_embeddings=bool(base.tie_word_embeddings),
        residual_method=cfg.method, routing_heads=cfg.heads, bos_token_id=base.bos_token_id,
        eos_token_id=base.eos_token_id, pad_token_id=base.pad_token_id)


# ---------------------------------------------------------------------------- the weight plan
@dataclass(frozen=True)
class Entry:
    """Where one tensor of the authors' checkpoint goes: our name, its shape in their file, and
    the map from their value to ours."""

    target: str | None  # None: read and dropped (an lm_head tied to the embedding)
    shape: tuple[int, ...]
    convert: Callable[[Tensor], Tensor] = lambda t: t


ROUTING_KEY = re.compile(r"model\.layers\.(\d+)\.(attn|mlp)_(res_proj\.weight|res_norm\.weight|null_source|"
                         r"res_gate_logit|res_alpha)")


def weight_plan(cfg: AuthorsConfig, ours: dict[str, tuple[int, ...]], alpha_shapes: dict[str, tuple[int, ...]]
                ) -> tuple[dict[str, Entry], dict[str, Tensor]]:
    """(their name -> `Entry` for every tensor their checkpoint must hold, our name -> value of
    the parameters their checkpoint has no tensor for). `ours`: our model's state-dict shapes;
    `alpha_shapes`: the gate tensors' shapes as stored (learnable_alpha is [1] or [])."""
    L, d = cfg.base.num_hidden_layers, cfg.base.hidden_size
    plan: dict[str, Entry] = {}
    constants: dict[str, Tensor] = {}
    prefix = "base." if cfg.delta else ""
    sites = "sites" if cfg.delta else "model.sites"
    if cfg.mode == "plain":
        L = 0  # no routing tensors
    routing = {n for n in ours if n.startswith(sites + ".") or n == "null_source"}
    tied = bool(cfg.base.tie_word_embeddings)
    for name, shape in ours.items():
        if name in routing or not name.startswith(prefix):
            continue
        theirs = name[len(prefix):]
        if tied and theirs == "lm_head.weight":
            continue  # tied to the embedding: absent from their file, or read and dropped
        plan[theirs] = Entry(name, shape)
    if tied:
        plan["lm_head.weight?"] = Entry(None, ours[f"{prefix}lm_head.weight"])
    for layer in range(L):
        for s, kind in ((2 * layer, "attn"), (2 * layer + 1, "mlp")):
            key = f"model.layers.{layer}.{kind}_"
            q_shape = ours[f"{sites}.{s}.query"]
            plan[key + "res_proj.weight"] = Entry(f"{sites}.{s}.query", q_shape if len(q_shape) == 2 else (1, d),
                                                  lambda t, shape=q_shape: t.reshape(shape))
            plan[key + "res_norm.weight"] = Entry(f"{sites}.{s}.key_norm.weight", (d,))
            if not cfg.delta:
                continue
            plan[key + "null_source"] = Entry(f"{sites}.{s}.null", (d,))
            if cfg.gate == "bias":
                constants[f"{sites}.{s}.gate"] = torch.ones(())
            elif cfg.gate == "sigmoid_scalar":
                plan[key + "res_gate_logit"] = Entry(f"{sites}.{s}.gate", (),
                                                     lambda t: torch.sigmoid(t.float()).reshape(()))
            else:  # learnable_alpha: [1] in the Llama code, [] in the Qwen3 code
                shape = alpha_shapes.get(key + "res_alpha", (1,))
                plan[key + "res_alpha"] = Entry(f"{sites}.{s}.gate", shape if shape in ((), (1,)) else (1,),
                                                lambda t: t.reshape(()))
    final = 2 * L
    if cfg.mode == "plain":
        pass
    elif cfg.delta:  # no final routing in the authors' delta modes: the final site passes h through
        constants.update({f"{sites}.{final}.query": torch.zeros(d), f"{sites}.{final}.key_norm.weight": torch.ones(d),
                          f"{sites}.{final}.gate": torch.zeros(()), f"{sites}.{final}.null": torch.zeros(d)})
    else:
        plan["model.final_res_proj.weight"] = Entry(f"{sites}.{final}.query", (1, d), lambda t: t.reshape(d))
        plan["model.final_res_norm.weight"] = Entry(f"{sites}.{final}.key_norm.weight", (d,))
    return plan, constants


def check_weights_against(src: Path, cfg: AuthorsConfig, plan: dict[str, Entry]
                          ) -> dict[str, tuple[str, tuple[int, ...], Path]]:
    """Every tensor of the plan is in `src` with its shape and a floating dtype, and `src` holds
    nothing else; one `ConversionError` line otherwise. Reads the safetensors headers only."""
    found = weight_index(src)
    where = f"{src} ({cfg.model_type} {cfg.mode})"
    optional = {k.rstrip("?") for k in plan if k.endswith("?")}
    needed = {k for k in plan if not k.endswith("?")}
    missing = sorted(needed - set(found))
    if missing:
        raise ConversionError(f"{where}: {len(missing)} tensor(s) a {cfg.mode} checkpoint must hold are missing, "
                              f"e.g. {', '.join(missing[:3])}")
    extra = sorted(set(found) - needed - optional)
    if extra:
        raise ConversionError(f"{where}: {len(extra)} tensor(s) that a {cfg.mode} model with gate "
                              f"{cfg.gate!r} does not have, e.g. {', '.join(extra[:3])}")
    for name, (dtype, shape, path) in sorted(found.items()):
        entry = plan.get(name) or plan[name + "?"]
        if shape != entry.shape:
            raise ConversionError(f"{path}: tensor {name} has shape {list(shape)}, its config.json needs "
                                  f"{list(entry.shape)}")
        if dtype not in FLOAT_DTYPES:
            raise ConversionError(f"{path}: tensor {name} is {dtype}, not a floating-point type")
    return found


# ---------------------------------------------------------------------------- streaming load
@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Build modules with every parameter on the meta device (no memory, no init cost) while
    buffers (RoPE frequencies) are computed for real: nn.Module.register_parameter moves each
    parameter to meta as it is registered."""
    register = nn.Module.register_parameter

    def on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None and param.device.type != "meta":
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = on_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]


def read_shards(files: list[Path]) -> Iterator[tuple[Path, dict[str, Tensor]]]:
    """One shard's tensors at a time, in file order."""
    from safetensors import safe_open

    for path in files:
        with safe_open(str(path), framework="pt") as f:
            tensors = {name: f.get_tensor(name) for name in f.keys()}
        yield path, tensors


def load_streaming(model: nn.Module, files: list[Path], plan: dict[str, Entry], constants: dict[str, Tensor],
                   dtype: torch.dtype, shards: Callable[[list[Path]], Iterator[tuple[Path, dict[str, Tensor]]]]
                   = read_shards) -> None:
    """Assign the checkpoint into `model` (parameters on meta) shard by shard: each shard's
    tensors are mapped by `plan`, cast to `dtype` and assigned (`load_state_dict(assign=True)`)
    before the next shard is read; then the `constants`."""
    for path, tensors in shards(files):
        part: dict[str, Tensor] = {}
        for name in list(tensors):
            entry = plan.get(name) or plan[name + "?"]
            value = tensors.pop(name)
            if entry.target is not None:
                part[entry.target] = entry.convert(value).to(dtype)
        model.load_state_dict(part, strict=False, assign=True)
        del part, tensors
    model.load_state_dict({k: v.to(dtype) for k, v in constants.items()}, strict=False, assign=True)
    if getattr(model.config, "tie_word_embeddings", False):
        model.get_output_embeddings().weight = model.get_input_embeddings().weight
    left = [n for n, p in model.named_parameters(remove_duplicate=False) if p.device.type == "meta"]
    if left:  # the plan covers every parameter: this is a bug, not a user error
        raise RuntimeError(f"import left {len(left)} parameter(s) unset, e.g. {', '.join(left[:3])}")


def build_model(config: Any) -> nn.Module:
    """Our model for `config` (or the plain base's) with its parameters on the meta device."""
    from transformers import AutoModelForCausalLM

    from ..model.delta_modeling import MHARDeltaForCausalLM
    from ..model.modeling import MHARForCausalLM

    with parameters_on_meta():
        if isinstance(config, MHARDeltaConfig):
            return MHARDeltaForCausalLM(config)
        if isinstance(config, MHARConfig):
            return MHARForCausalLM(config)
        return AutoModelForCausalLM.from_config(config)


# ---------------------------------------------------------------------------- the import
def is_imported_dir(path: Path) -> bool:
    """A directory `mhar import` wrote: it holds import.json."""
    return (path / PROVENANCE).is_file()


IMPORTED_MODEL = OutputKind("imported model", directory=True, is_own=is_imported_dir,
                            marker=PROVENANCE, error=ConversionError)


@dataclass(frozen=True)
class ImportReport:
    dst: Path
    model_type: str
    mode: str
    method: str
    routing_heads: int
    dtype: str
    parameters: int
    tokenizer_copied: bool


def resolve_source(src: str, revision: str | None = None) -> tuple[Path, dict[str, Any]]:
    """(local folder, provenance of where it came from): a local path as is (offline); anything
    else is a Hugging Face Hub id, downloaded with huggingface_hub's snapshot_download."""
    path = Path(src).expanduser()
    if path.exists():
        if revision is not None:
            raise ConversionError(f"--revision names a Hub revision; {src} is a local folder")
        return path, {"source": str(path.resolve()), "hub_id": None, "revision": None}
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", src):
        raise ConversionError(f"{src} is neither a local folder nor a Hugging Face Hub id (owner/name)")
    from huggingface_hub import constants, snapshot_download

    try:  # with network: the Hub's files (cached); without: the cached snapshot, if there is one
        local = Path(snapshot_download(src, revision=revision,
                                       allow_patterns=["*.json", "*.safetensors", "tokenizer*", "*.model"]))
    except Exception as exc:  # no network and no cache, no such repo or revision, no access: the hub's reason
        reason = " ".join(str(exc).split())[:240]
        at = f" at revision {revision}" if revision else ""
        network = ("unset HF_HUB_OFFLINE where there is network" if constants.HF_HUB_OFFLINE
                   else "check the network, the id and your access to it")
        raise ConversionError(
            f"cannot get {src}{at} from the Hugging Face Hub nor from its cache {constants.HF_HUB_CACHE} "
            f"({type(exc).__name__}: {reason}); {network}; or download it where there is network "
            f"(`hf download {src} --local-dir DIR`) and import the folder: `mhar import DIR DST`") from None
    return local, {"source": str(local), "hub_id": src, "revision": local.name}


#: the files of a Hugging Face tokenizer, copied byte for byte (loading it through AutoTokenizer
#: would read the authors' config.json, whose model_type transformers does not know)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "tokenizer.model", "vocab.json", "merges.txt", "spiece.model", "chat_template.jinja")


def copy_tokenizer_files(src: Path, dst: Path) -> bool:
    """Copy the tokenizer files of `src` into `dst`; False (and a warning) when it has none."""
    import shutil
    import warnings

    found = [name for name in TOKENIZER_FILES if (src / name).is_file()]
    for name in found:
        shutil.copyfile(src / name, dst / name)
    if not found:
        warnings.warn(f"{src} has no tokenizer ({', '.join(TOKENIZER_FILES[:3])}, ...); the imported model is "
                      f"saved without one: copy the base model's tokenizer files into it", stacklevel=4)
    return bool(found)


def sha256_of(path: Path, chunk: int = 1 << 24) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def import_checkpoint(src: str | Path, dst: str | Path, *, revision: str | None = None,
                      dtype: str | None = None, overwrite: bool = False,
                      shards: Callable[[list[Path]], Iterator[tuple[Path, dict[str, Tensor]]]] = read_shards
                      ) -> ImportReport:
    """Import the authors' checkpoint `src` (a folder, or a Hub id) into `dst` (written
    atomically): our model's config.json + safetensors, the tokenizer, and import.json (source,
    revision, mode, the mapping, sha256 of every source weight file). `dtype`: float32, bfloat16
    or float16 (default: the checkpoint's own)."""
    dst = Path(dst)
    local_hint = Path(str(src)).expanduser()
    check_output(dst, IMPORTED_MODEL, overwrite=overwrite,
                 inputs=[("model", local_hint if local_hint.exists() else None)])
    want = None
    if dtype is not None:
        want = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
        if want is None:
            raise ConversionError(f"--dtype {dtype!r}: choose float32, bfloat16 or float16")
    local, origin = resolve_source(str(src), revision)
    cfg = read_authors_config(local)
    config = target_config(cfg)
    model = build_model(config)
    ours = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    index = weight_index(local)
    alpha = {k: shape for k, (_, shape, _) in index.items() if k.endswith("res_alpha")}
    plan, constants = weight_plan(cfg, ours, alpha)
    found = check_weights_against(local, cfg, plan)
    files = sorted({path for _, _, path in found.values()})
    embed = "model.embed_tokens.weight"
    dtype_used = want or TORCH_DTYPES.get(found[embed][0], torch.float32)
    load_streaming(model, files, plan, constants, dtype_used, shards)
    model.eval()
    if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        raise ConversionError(f"{local}: the checkpoint holds non-finite values (NaN or infinity)")
    provenance = {
        **origin, "model_type": cfg.model_type, "attnres_mode": cfg.mode, "attnres_num_blocks": cfg.num_blocks,
        "attnres_num_heads": cfg.heads, "attnres_gate_type": cfg.gate, "attnres_use_null_source": cfg.null,
        "imported_as": {"model_type": config.model_type, "method": cfg.method, "routing_heads": cfg.heads,
                        **({"delta_sources": "boundary_chain", "null_per_site": True} if cfg.delta else {})},
        "dtype": str(dtype_used).removeprefix("torch."),
        "weights_sha256": {p.name: sha256_of(p) for p in files},
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    from .. import __version__

    provenance["package_version"] = __version__
    copied = False

    def fill(tmp: Path) -> None:
        nonlocal copied
        model.save_pretrained(tmp)
        copied = copy_tokenizer_files(local, tmp)
        (tmp / PROVENANCE).write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n")

    build_dir(dst, fill, replace=True, mode=0o755)
    return ImportReport(dst, cfg.model_type, cfg.mode, cfg.method, cfg.heads, provenance["dtype"],
                        sum(p.numel() for p in model.parameters()), copied)
