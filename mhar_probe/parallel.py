"""Multi-process training helpers: DDP / FSDP2 wrapping, activation checkpointing, gradient
sync during accumulation, clipping over sharded gradients, and full (unsharded) state dicts.

Wrapping policy (`shard_units`): FSDP2 `fully_shard` is applied to every decoder layer, then
to the root. A unit must be *called* (its `__call__` runs FSDP's unshard / reshard hooks), so:

    Hugging Face decoders (Llama, Qwen3, ..., and `MHARDeltaForCausalLM`'s base)
        unit = each element of the decoder's `layers` (called by the decoder loop)
    from-scratch `MHARForCausalLM` (its residual wiring calls `layer.attn` / `layer.ffn`)
        units = each layer's `self_attn` and `mlp` (called inside those methods)

Everything else -- embeddings, the tied LM head, norms outside units, routing queries, gates
and the null source -- belongs to the root group, which is unsharded for the whole forward
and backward, so hooks inside a layer may read root parameters (the delta routing does).
`fully_shard` refuses 0-d parameters (the delta gates): those stay replicated plain tensors
(`ignored_params`) whose gradients `sync_replicated_grads` averages over ranks, as FSDP's
reduce-scatter does for the rest.

Checkpoints written through `save_full_checkpoint` hold *full* tensors keyed by parameter
name (Hugging Face names; FSDP2 keeps them), and the optimizer state keyed by the same names
(`torch.distributed.checkpoint.state_dict` full-state-dict helpers), so a run saved with any
world size and wrapping resumes under any other.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any, Iterable, Iterator

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from transformers.dynamic_module_utils import custom_object_save

from . import atomic
from .distributed import DistInfo
from .errors import UserError
from .rundir import _untie, read_checkpoint_state, write_checkpoint
from .runfiles import CHECKPOINT, STATE, WEIGHTS

try:  # torch >= 2.6
    from torch.distributed.tensor import DTensor, distribute_tensor
except ImportError:  # pragma: no cover
    from torch.distributed._tensor import DTensor, distribute_tensor  # type: ignore


# ---------------------------------------------------------------------------- wrapping
def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The stack of decoder layers: `get_decoder().layers`, else the first `layers` ModuleList."""
    get = getattr(model, "get_decoder", None)
    if callable(get):
        try:
            layers = getattr(get(), "layers", None)
        except Exception:  # some models have no decoder getter that works
            layers = None
        if isinstance(layers, nn.ModuleList):
            return layers
    for name, module in model.named_modules():
        if name.split(".")[-1] == "layers" and isinstance(module, nn.ModuleList):
            return module
    raise UserError(f"{type(model).__name__} has no decoder `layers` list to shard")


def shard_units(model: nn.Module) -> list[nn.Module]:
    """The modules `apply_fsdp` shards before the root (see the module docstring)."""
    from .model.modeling import DecoderLayer

    units: list[nn.Module] = []
    for layer in decoder_layers(model):
        if isinstance(layer, DecoderLayer):  # called piecewise: shard the called submodules
            units += [layer.self_attn, layer.mlp]
        else:
            units.append(layer)
    return units


def apply_fsdp(model: nn.Module, info: DistInfo, reshard_after_forward: bool = True) -> nn.Module:
    """FSDP2: `fully_shard` every unit of `shard_units(model)`, then the root; in place.

    Parameters become DTensors sharded on dim 0 over all ranks (a 1-D mesh); a CPU model is
    moved to the mesh's device unit by unit, so the full model never sits on one GPU.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if not dist.is_initialized():
        raise UserError("--fsdp needs a process group: launch with torchrun (even --nproc_per_node 1)")
    mesh = init_device_mesh(info.device.type, (info.world_size,))
    scalars = replicated_params(model)  # fully_shard cannot shard 0-dim parameters
    for unit in shard_units(model):
        fully_shard(unit, mesh=mesh, reshard_after_forward=reshard_after_forward,
                    ignored_params=set(scalars) or None)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward, ignored_params=set(scalars) or None)
    model._replicated_params = scalars  # type: ignore[attr-defined]
    return model.to(info.device)  # buffers and replicated parameters outside any unit


def replicated_params(model: nn.Module) -> list[nn.Parameter]:
    """The 0-dim parameters (delta gates), in `named_parameters` order.

    The order must be the same on every rank because `sync_replicated_grads` all-reduces them
    as one flat tensor; memory addresses (`id`) differ between processes and are no order.
    """
    return [p for _, p in model.named_parameters() if p.ndim == 0]


def sync_replicated_grads(model: nn.Module) -> None:
    """Average the gradients of the parameters FSDP2 left replicated (`apply_fsdp`) over ranks."""
    params = [p for p in getattr(model, "_replicated_params", []) if p.grad is not None]
    if not params:
        return
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    for p, g in zip(params, flat.split([p.numel() for p in params])):
        p.grad.copy_(g.view_as(p.grad))


def wrap_ddp(model: nn.Module, info: DistInfo, for_graphs: bool = False,
             stream: "torch.cuda.Stream | None" = None) -> nn.parallel.DistributedDataParallel:
    """DDP around `model`. `for_graphs`: as a captured step needs it (`step.GraphStep`) --
    gradients as views of DDP's buckets (fixed addresses, no copy), no buffer broadcast in
    forward (a collective per forward; the buffers are the same on every rank anyway), and, with
    `stream`, built on that stream (the one the step warms up and captures on)."""
    kwargs: dict[str, Any] = dict(device_ids=[info.device.index] if info.device.type == "cuda" else None)
    if for_graphs:
        kwargs.update(gradient_as_bucket_view=True, broadcast_buffers=False)
    if stream is None:
        return nn.parallel.DistributedDataParallel(model, **kwargs)
    stream.wait_stream(torch.cuda.current_stream(stream.device))
    with torch.cuda.stream(stream):
        ddp = nn.parallel.DistributedDataParallel(model, **kwargs)
    torch.cuda.current_stream(stream.device).wait_stream(stream)
    return ddp


def is_fsdp(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def enable_checkpointing(model: nn.Module) -> None:
    """Activation checkpointing of every decoder layer (Hugging Face, non-reentrant): each
    layer's activations are recomputed in backward instead of stored."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise UserError(f"{type(model).__name__} does not support activation checkpointing")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


@contextlib.contextmanager
def grad_sync(model: nn.Module, ddp: nn.parallel.DistributedDataParallel | None, sync: bool) -> Iterator[None]:
    """Skip the gradient all-reduce / reduce-scatter of a non-final micro-batch (accumulation)."""
    if ddp is not None and not sync:
        with ddp.no_sync():
            yield
    elif is_fsdp(model):
        model.set_requires_gradient_sync(sync)  # type: ignore[attr-defined]
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)  # type: ignore[attr-defined]
    else:
        yield


def clip_grad_norm(params: Iterable[nn.Parameter], max_norm: float) -> float:
    """Global-norm clipping, g <- g * min(1, max_norm / (||g|| + 1e-6)); returns ||g||.

    Sharded (DTensor) gradients contribute their full norm (the squares of the local shards
    are summed over ranks); replicated ones are counted once."""
    params = list(params)
    grads = [p.grad for p in params if p.grad is not None]
    if not any(isinstance(g, DTensor) for g in grads):
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    squares = torch.stack([g.to_local().float().square().sum() for g in grads if isinstance(g, DTensor)]).sum()
    dist.all_reduce(squares)
    plain = [g for g in grads if not isinstance(g, DTensor)]
    if plain:
        squares = squares + torch.stack([g.float().square().sum() for g in plain]).sum().to(squares.device)
    total = squares.sqrt()
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        local = g.to_local() if isinstance(g, DTensor) else g
        local.mul_(coef.to(device=local.device, dtype=local.dtype))
    return float(total)


def full_tensor(t: Tensor) -> Tensor:
    """The whole tensor of a (possibly sharded) DTensor; a collective when sharded."""
    return t.full_tensor() if isinstance(t, DTensor) else t


def shard_like(full: Tensor, like: Tensor) -> Tensor:
    """`full` laid out as `like` (a DTensor's local shard, or a plain copy on its device)."""
    if isinstance(like, DTensor):
        return distribute_tensor(full.to(like.device_mesh.device_type), like.device_mesh, like.placements)
    return full.to(device=like.device, dtype=like.dtype)


# ---------------------------------------------------------------------------- state dicts
def _options(**kw: Any):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(**kw)


def full_model_state(model: nn.Module) -> dict[str, Tensor]:
    """Full CPU state dict on rank 0 ({} on the others under FSDP); a collective under FSDP."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    if not is_fsdp(model):
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return get_model_state_dict(model, options=_options(full_state_dict=True, cpu_offload=True))


def full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Optimizer state keyed by parameter name, full tensors on CPU (rank 0 under FSDP)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=_options(full_state_dict=True, cpu_offload=True))


def load_full_model_state(model: nn.Module, state: dict[str, Tensor]) -> None:
    """Load a full state dict on every rank (each keeps its shard); tied keys may be absent."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    own = set(model.state_dict())
    tied = {"lm_head.weight", "base.lm_head.weight"} if getattr(getattr(model, "config", None),
                                                                "tie_word_embeddings", False) else set()
    missing, unexpected = (own - set(state)) - tied, set(state) - own
    if missing or unexpected:
        raise UserError(f"checkpoint does not match the model (missing {sorted(missing)[:3]}, "
                        f"unexpected {sorted(unexpected)[:3]})")
    set_model_state_dict(model, state, options=_options(full_state_dict=True, strict=False))


def load_full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=_options(full_state_dict=True))


# ---------------------------------------------------------------------------- checkpoints
def save_full_checkpoint(out: Path, model_state: dict[str, Tensor], optim_state: dict[str, Any],
                         state: dict[str, Any], extra: dict[str, dict[str, Tensor]] | None = None) -> None:
    """RUN/checkpoint/: model.safetensors, optimizer.pt (name-keyed), state.json and one
    `{name}.safetensors` per extra tensor dict (e.g. the EMA), swapped in atomically. Rank 0 only."""
    def fill(tmp: Path) -> None:
        save_file(_untie(dict(model_state)), tmp / WEIGHTS)
        torch.save(optim_state, tmp / "optimizer.pt")
        for name, tensors in (extra or {}).items():
            save_file(_untie(dict(tensors)), tmp / f"{name}.safetensors")
        atomic.write_json(tmp / STATE, {**state, "optimizer_keys": "names", "extra": sorted(extra or {})})

    write_checkpoint(out, fill)


def names_keyed_optimizer_state(optim_state: dict[str, Any], model: nn.Module,
                                optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """An `optimizer.state_dict()` (keyed by parameter index, as `rundir.save_checkpoint` writes it)
    keyed by parameter name instead, as `full_optimizer_state` writes it: index i is the i-th
    parameter of `optimizer`'s groups, which the trainer builds in the same order on every
    world size and wrapping, and its name is the model's (FSDP2 keeps Hugging Face names)."""
    name_of = {id(p): n for n, p in model.named_parameters()}
    order = [name_of[id(p)] for group in optimizer.param_groups for p in group["params"]]
    groups = optim_state["param_groups"]
    if [len(g["params"]) for g in groups] != [len(g["params"]) for g in optimizer.param_groups]:
        raise UserError("the checkpoint's optimizer state does not match the model's parameter groups")
    return {"state": {order[int(i)]: v for i, v in optim_state["state"].items()},
            "param_groups": [{**g, "params": [order[int(i)] for i in g["params"]]} for g in groups]}


def load_full_checkpoint(out: Path, steps: int | None = None, *, model: nn.Module | None = None,
                         optimizer: torch.optim.Optimizer | None = None
                         ) -> tuple[dict[str, Tensor], dict[str, Any], dict[str, Any], dict[str, dict[str, Tensor]]]:
    """(model state, optimizer state, trainer state, extras) of RUN/checkpoint/, or UserError;
    the state's step an integer in [0, steps] (`rundir.read_checkpoint_state`). Given `model` and
    `optimizer`, a checkpoint whose optimizer state is keyed by index (a DDP or one-process run of
    the plain trainer) is read too, its state re-keyed by name (`names_keyed_optimizer_state`):
    so an FSDP2 run resumes a DDP run's checkpoint."""
    ckpt = out / CHECKPOINT
    state = read_checkpoint_state(out, steps)
    convertible = model is not None and optimizer is not None
    try:
        if state.get("optimizer_keys") != "names" and not convertible:
            raise UserError(f"checkpoint in {ckpt} was written by a different trainer (optimizer state "
                            f"is not keyed by parameter name); use --overwrite to start over")
        model_state = load_file(ckpt / WEIGHTS)
        optim_state = torch.load(ckpt / "optimizer.pt", weights_only=True, map_location="cpu")
        if state.get("optimizer_keys") != "names":
            optim_state = names_keyed_optimizer_state(optim_state, model, optimizer)
        extra = {name: load_file(ckpt / f"{name}.safetensors") for name in state.get("extra", [])}
    except UserError:
        raise
    except FileNotFoundError as exc:
        raise UserError(f"checkpoint in {ckpt} is incomplete: {exc.filename} is missing") from exc
    except Exception as exc:  # corrupt json / safetensors / pickle
        raise UserError(f"checkpoint in {ckpt} is corrupt ({type(exc).__name__}: {exc}); "
                        f"use --overwrite to start over") from exc
    return model_state, optim_state, state, extra


def save_hf_dir(path: Path, config: Any, state: dict[str, Tensor], model_class: type,
                generation_config: Any = None, tokenizer: Any = None) -> None:
    """Write a Hugging Face model (config.json + model.safetensors [+ generation config,
    tokenizer]) into the directory `path`, each file through a temporary name and a rename.
    The tensors are saved as given (the float32 training weights); `config.dtype` says so.
    A model class registered for an Auto class (`register_for_auto_class`) also gets its code
    and `auto_map`, as `save_pretrained` writes them, so that `trust_remote_code` loads it."""
    path.mkdir(parents=True, exist_ok=True)
    tmp = atomic.staging_dir(path / ".hf-tmp", prefix=".hf-tmp-")  # inside `path`: rundir.TEMPORARY_GLOBS
    try:
        config = type(config).from_dict(config.to_dict())
        config.architectures = [model_class.__name__]
        dtypes = {t.dtype for t in state.values() if t.is_floating_point()}
        if len(dtypes) == 1:
            config.dtype = next(iter(dtypes))
        auto_class = getattr(model_class, "_auto_class", None)
        if auto_class is not None:
            module = model_class.__module__.rsplit(".", 1)[-1]
            config.auto_map = {**(getattr(config, "auto_map", None) or {}),
                               auto_class: f"{module}.{model_class.__name__}"}
            custom_object_save(model_class, tmp)  # the model's module and its relative imports
        config.save_pretrained(tmp)
        save_file({k: v.contiguous() for k, v in _untie(dict(state)).items()}, tmp / WEIGHTS,
                  metadata={"format": "pt"})
        if generation_config is not None:
            generation_config.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        atomic.move_entries(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
