"""torch.compile of the model's sublayers: the regions between two routing calls.

Each decoder layer's attention sublayer (input RMSNorm, Q/K/V, q/k norms, RoPE, SDPA, output
projection) and MLP sublayer (RMSNorm, SwiGLU) is compiled on its own, so inductor fuses their
element-wise work (norm statistics, casts, RoPE, SiLU * up) into a few kernels, while the
residual wiring between them -- additive adds, the Triton routing calls, hyper-connections --
runs as before, untraced. All layers share one compiled graph per sublayer (the code is the
same and the parameters are graph inputs), so the compile cost does not grow with depth.

A hyper-connection model (`residual_method="hyper"`) compiles larger regions by default
(`hyper="region"`): each sublayer together with its hyper-connection, one call of
`MHARModel.hyper_sublayer` (stream norm, the dynamic alpha / beta projections and tanh, the width
mixing of the n streams into the branch input and the n new residuals, the sublayer, the depth
connection that adds beta times its output to every stream). Uncompiled, that wiring is 66 aten
ops per sublayer, forward and backward (94 under bf16 autocast), most of them full passes over the
n-times-wider residual (`benchmarks/train_throughput/hyper_cost.py`); in one region inductor fuses
them. The package's parameters stay where they are (names and state-dict keys unchanged).
`hyper="region-pointwise"` also lowers the mixing's small batched matmuls to fusible pointwise
work; `hyper="sublayers"` compiles attention and MLP alone, as for the other methods (how the
wiring ran before; the throughput benchmark times all three).

The compiled functions are instance attributes that shadow `DecoderLayer.attn` / `.ffn` (or
`MHARModel.hyper_sublayer`); `uncompile_sublayers` removes them. Shapes are static (`dynamic=False`): a new batch shape
compiles once more (evaluation batches, the last short batch).

What `mhar cpt` trains is a Hugging Face Llama / Qwen3-family model (the plain control, or the
base inside a converted delta model): there each layer's attention module (`self_attn`: Q/K/V,
q/k norms, RoPE, SDPA, output projection) and MLP module (`mlp`: SwiGLU) is compiled in place
(`nn.Module.compile`, so parameter names and checkpoints are unchanged), and the pre-sublayer
RMSNorms stay eager: a converted model routes through their forward pre-hooks.
"""

from __future__ import annotations

import torch
from torch import nn

COMPILED_METHODS = ("attn", "ffn")
#: the sublayer modules of a Hugging Face decoder layer (Llama / Qwen3 family)
HF_SUBLAYERS = ("self_attn", "mlp")
#: a hyper-connection model's compiled region (`MHARModel.hyper_sublayer`) and the ways to compile it
HYPER_REGION = "hyper_sublayer"
HYPER_COMPILES = ("region", "sublayers", "region-pointwise")
#: inductor's options for "region-pointwise": its post-grad pass that lowers memory-bound batched
#: matmuls (on CUDA: batch >= 10240, two of m, k, n < 32) to pointwise multiply-and-sum, so the
#: stream mixing's [1+n, n] @ [n, d] per token fuses with the norm before it and the add after it
POINTWISE_MIXING = {"post_grad_fusion_options": {"decompose_mm_pass": {}}}


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of an `MHARForCausalLM` (or of its inner `MHARModel`), of a Hugging Face
    causal LM, or of a converted delta model's base (`get_decoder()`)."""
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    get = getattr(model, "get_decoder", None)
    if not isinstance(layers, nn.ModuleList) and callable(get):
        layers = getattr(get(), "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise TypeError(f"{type(model).__name__} has no decoder layers to compile")
    return layers


def _is_hf_layer(layer: nn.Module) -> bool:
    """A Hugging Face decoder layer (sublayer modules), not this package's `DecoderLayer` (methods)."""
    return not all(callable(getattr(type(layer), name, None)) for name in COMPILED_METHODS) and all(
        isinstance(getattr(layer, name, None), nn.Module) for name in HF_SUBLAYERS)


def hyper_model(model: nn.Module) -> nn.Module | None:
    """The inner `MHARModel` of a hyper-connection model (the one that has `hyper_sublayer`), else None."""
    inner = getattr(model, "model", model)
    has = isinstance(getattr(inner, "hyper", None), nn.ModuleList) and callable(getattr(type(inner), HYPER_REGION, None))
    return inner if has else None


def compile_sublayers(model: nn.Module, backend: str = "inductor", hyper: str = "region") -> nn.Module:
    """Compile every decoder layer's `attn` and `ffn` (in place) with torch.compile's `backend`
    (inductor: fused Triton kernels on CUDA; "aot_eager" traces without generating code, which is
    how the CPU tests check the wiring); returns the model. For a hyper-connection model, `hyper`
    picks the regions: "region" compiles each sublayer with its hyper-connection as one region
    (`MHARModel.hyper_sublayer`), "region-pointwise" the same with the stream mixing's small
    batched matmuls lowered to fusible pointwise work (inductor only: `POINTWISE_MIXING`; on CUDA,
    where the batch is B T >= 10240), "sublayers" the sublayers alone (the wiring eager);
    compiling again in another mode replaces the first."""
    if hyper not in HYPER_COMPILES:
        raise ValueError(f"hyper={hyper!r}: choose from {', '.join(HYPER_COMPILES)}")
    # every model shape, grad mode and batch shape a process trains or evaluates (a sweep's runs)
    # is one more graph of the same two functions: allow more than dynamo's default of 8 before
    # it falls back to running them uncompiled
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    inner = hyper_model(model)
    if inner is not None and hyper != "sublayers":
        uncompile_sublayers(model)  # attention and MLP are traced inside the region
        # einops finds its backend per tensor type on first use and caches it in a dict the graphs
        # guard on: filled inside the first trace, it would fail that graph's guard once and compile
        # it again; the package rearranges tensors and parameters
        import einops

        for t in (torch.zeros(1), nn.Parameter(torch.zeros(1))):
            einops.rearrange(t, "a -> a")
        options = POINTWISE_MIXING if hyper == "region-pointwise" and backend == "inductor" else None
        # one graph per sublayer kind, shared by every layer (the modules are inputs to the region)
        setattr(inner, HYPER_REGION, torch.compile(getattr(inner, HYPER_REGION), backend=backend, dynamic=False,
                                                   options=options))
        return model
    if inner is not None:
        vars(inner).pop(HYPER_REGION, None)
    for layer in decoder_layers(model):
        if _is_hf_layer(layer):
            for name in HF_SUBLAYERS:
                module = getattr(layer, name)
                if module._compiled_call_impl is None:
                    module.compile(backend=backend, dynamic=False)
            continue
        for name in COMPILED_METHODS:
            if name not in vars(layer):
                setattr(layer, name, torch.compile(getattr(layer, name), backend=backend, dynamic=False))
    return model


def uncompile_sublayers(model: nn.Module) -> nn.Module:
    """Undo `compile_sublayers` (in place); returns the model."""
    inner = hyper_model(model)
    if inner is not None:
        vars(inner).pop(HYPER_REGION, None)
    for layer in decoder_layers(model):
        if _is_hf_layer(layer):
            for name in HF_SUBLAYERS:
                getattr(layer, name)._compiled_call_impl = None
            continue
        for name in COMPILED_METHODS:
            vars(layer).pop(name, None)
    return model


def choose_compile_sublayers(requested: bool | None, device: torch.device) -> bool:
    """Whether a run compiles its sublayers: by default on CUDA, on one process, under DDP and
    under FSDP2 alike (the compiled regions lie inside the modules DDP wraps and FSDP2 shards:
    DDP's gradient hooks fire after each compiled backward, FSDP2's all-gather / reduce-scatter
    hooks run around each sharded unit's call; both passed their 2-GPU tests on 2x H200);
    `--no-compile-sublayers` (False) runs them eagerly. Asked for off CUDA, a `ValueError` that
    says why not (the caller turns it into a user error)."""
    if requested and device.type != "cuda":
        raise ValueError(f"--compile-sublayers needs a CUDA device (this run trains on {device.type}: "
                         f"inductor's CPU code is slower to build than the step it saves)")
    return device.type == "cuda" if requested is None else requested


def sublayers_compiled(model: nn.Module) -> bool:
    """Whether `compile_sublayers` has been applied (to every layer, or as a hyper-connection
    model's regions)."""
    inner = hyper_model(model)
    if inner is not None and HYPER_REGION in vars(inner):
        return True
    def compiled(layer: nn.Module) -> bool:
        if _is_hf_layer(layer):
            return all(getattr(layer, name)._compiled_call_impl is not None for name in HF_SUBLAYERS)
        return all(name in vars(layer) for name in COMPILED_METHODS)
    return all(compiled(layer) for layer in decoder_layers(model))
