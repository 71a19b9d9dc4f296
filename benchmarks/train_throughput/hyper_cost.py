"""What one hyper-connection costs: aten ops and bytes moved per (hyper-connection + sublayer)
call, eager against one compiled region, on the CPU.

A hyper-connection model (`residual_method="hyper"`, n streams, the `hyper-connections` package)
wraps every sublayer as `x, add = hc(streams); streams = add(sublayer(x))` (see
`mhar_probe.model.modeling.hyper_sublayer`). This script runs one such call, forward and backward,
at a preset's width (d, n) on a small B x T, and counts

- eager: every aten op that runs (a dispatch mode: each non-view op is one kernel on a GPU) and
  the bytes it reads and writes (its tensor inputs and outputs), split into the hyper-connection's
  own work and the sublayer's (the sublayer run alone, subtracted);
- compiled (`--compiled`, inductor on the CPU: slow to build): the call all eager, with the
  sublayer compiled alone (the wiring eager) and as one compiled region (the way the training
  step compiles it on CUDA): the kernels inductor generates (`torch._inductor.metrics`) and the
  wall time per call.

    python benchmarks/train_throughput/hyper_cost.py --preset 100m --batch 2 --seq 256 [--compiled]

Bytes scale with B x T: the table reports them per token and as multiples of one bf16 pass over
the n-stream residual (n d 2 bytes per token), then extrapolates to a step at --step-batch x
--step-seq over all 2 L hyper-connections (the lower bound on its time at --bandwidth GB/s).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from mhar_probe.compiled import compile_sublayers, uncompile_sublayers
from mhar_probe.model import MHARConfig, MHARForCausalLM
from mhar_probe.model.config import PRESETS


class OpCounter(TorchDispatchMode):
    """Counts every non-view aten op and the bytes of its tensor inputs and outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # views (`_unsafe_view` too, which aten does not mark as one) and detach move nothing
        if not func.is_view and not func.__name__.startswith(("detach", "_unsafe_view")):
            tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
            name = func.__name__.split(".")[0]
            self.ops[name] += 1
            self.bytes[name] += sum(t.numel() * t.element_size() for t in tensors)
        return out


def one_call(model, which: str, streams: torch.Tensor, cos, sin, autocast: bool, region: bool):
    """Forward and backward of layer 0's `which` ("attn" / "ffn") sublayer, with its hyper-connection
    (`region`) or alone."""
    inner = model.model
    layer = inner.layers[0]
    hc = inner.hyper[0 if which == "attn" else 1]
    sub = layer.attn if which == "attn" else layer.ffn
    args = (cos, sin, None, None) if which == "attn" else ()
    # fp32 streams also under autocast, as in training: the mixing einsum rounds them to bf16, but the
    # depth connection's beta * y (a broadcast multiply with fp32 beta) adds them back up to fp32
    x = streams.detach().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        if region:
            out = inner.hyper_sublayer(hc, sub, x, *args)
        else:
            out = sub(x[: x.shape[0] // model.config.hyper_streams], *args)
    out.float().sum().backward()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="100m")
    p.add_argument("--batch", type=int, default=2, help="(B = 1 lays some operands out so that copies vanish)")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--vocab", type=int, default=512, help="(only the embedding's size; not timed)")
    p.add_argument("--step-batch", type=int, default=32)
    p.add_argument("--step-seq", type=int, default=2048)
    p.add_argument("--bandwidth", type=float, default=4800.0, help="GB/s for the lower bound (H200: 4800)")
    p.add_argument("--compiled", action="store_true",
                   help="also time eager / compiled sublayers / compiled region with inductor (CPU, slow to build)")
    p.add_argument("--reps", type=int, default=10, help="with --compiled: calls timed per variant")
    args = p.parse_args()
    torch.manual_seed(0)
    cfg = MHARConfig.from_preset(args.preset, residual_method="hyper", vocab_size=args.vocab, num_hidden_layers=1,
                                 max_position_embeddings=max(args.seq, 256))
    model = MHARForCausalLM(cfg)
    with torch.no_grad():  # move the package's parameters off their init so every op is exercised
        for p_ in model.model.hyper.parameters():
            p_.add_(0.01 * torch.randn_like(p_))
    n, d, BT = cfg.hyper_streams, cfg.hidden_size, args.batch * args.seq
    L = PRESETS[args.preset]["num_hidden_layers"]  # the full model's depth: L calls of each sublayer kind
    streams = torch.randn(args.batch * n, args.seq, d)  # [(B n), T, d]
    pos = torch.arange(args.seq).expand(args.batch, -1)
    cos, sin = model.model.rotary_emb(streams, pos)
    unit = n * d * 2  # bytes per token of one bf16 pass over the n-stream residual
    print(f"# preset {args.preset}: d={d}, n={n}, B x T = {args.batch} x {args.seq}; "
          f"one bf16 residual pass = {unit} B/token")
    print("| sublayer | precision | hyper-conn. ops (fwd+bwd) | its bytes / token | in residual passes | "
          f"per step ({args.step_batch}x{args.step_seq}, {L} of this kind) GB | "
          f"at {args.bandwidth:.0f} GB/s ms |")
    print("|---|---|---:|---:|---:|---:|---:|")
    detail = {}
    for which in ("attn", "ffn"):
        for autocast in (False, True):
            counts = {}
            for region in (True, False):
                with OpCounter() as c:
                    one_call(model, which, streams, cos, sin, autocast, region)
                counts[region] = c
            ops = counts[True].ops - counts[False].ops
            nbytes = sum(counts[True].bytes.values()) - sum(counts[False].bytes.values())
            per_tok = nbytes / BT
            calls = L
            step_gb = per_tok * args.step_batch * args.step_seq * calls / 1e9
            prec = "bf16 autocast" if autocast else "fp32"
            print(f"| {which} | {prec} | {sum(ops.values())} | {per_tok:,.0f} | {per_tok / unit:.1f} | "
                  f"{step_gb:.1f} | {step_gb / args.bandwidth * 1e3:.1f} |")
            detail[(which, prec)] = ops
    for (which, prec), ops in detail.items():
        print(f"# {which}, {prec}: " + ", ".join(f"{k} x{v}" for k, v in sorted(ops.items(), key=lambda kv: -kv[1])))
    if args.compiled:
        compiled_variants(model, streams, cos, sin, args.reps)


def compiled_variants(model, streams: torch.Tensor, cos, sin, reps: int) -> None:
    """One (hyper-connection + sublayer) call, fp32 forward and backward, three ways: all eager,
    the sublayer compiled alone (`compile_sublayers(hyper="sublayers")`, the wiring eager) and one
    compiled region (`hyper="region"`); inductor's generated kernels and the median wall time."""
    from torch._inductor import metrics

    print(f"| sublayer | variant | inductor kernels (fwd+bwd) | ms per call (median of {reps}) |")
    print("|---|---|---:|---:|")
    for which in ("attn", "ffn"):
        for variant in ("eager", "sublayers", "region"):
            torch._dynamo.reset()
            metrics.reset()
            uncompile_sublayers(model)
            if variant != "eager":
                compile_sublayers(model, backend="inductor", hyper=variant)
            one_call(model, which, streams, cos, sin, False, True)  # builds
            kernels = metrics.generated_kernel_count
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                one_call(model, which, streams, cos, sin, False, True)
                times.append(time.perf_counter() - t0)
            print(f"| {which} | {variant} | {kernels if variant != 'eager' else '-'} | "
                  f"{1e3 * statistics.median(times):.2f} |")
    uncompile_sublayers(model)

if __name__ == "__main__":
    main()
