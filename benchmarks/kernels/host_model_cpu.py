"""Host time MHAR adds per routing call inside the model, on the CPU, with kernel launches stubbed.

On the GPU machine the 350M and 1B training steps are host-bound (`benchmarks/profile_train_step.py`:
the GPU is busy 79-113 ms of a 252-399 ms 1B step), so what MHAR costs end to end there is mostly
host time. This times that host work without a GPU: a narrow model (d = 64, the preset's depth)
with the `triton` routing backend runs its Python and autograd work on tiny CPU tensors while
`Launcher.__call__` does nothing. Baseline and MHAR arms alternate round by round (this CPU's
speed drifts too), and the figure is (MHAR - baseline) / routing calls, forward and backward
separately, as medians over rounds. It is the glue only: the GPU machine adds the launches
themselves and its allocator, so its absolute numbers are larger (measured there: about 0.5 ms
forward and 0.75 ms backward per call with the earlier backward).

    python benchmarks/kernels/host_model_cpu.py --layers 36 --rounds 20 --out host_model_cpu.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time

os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU tensors pass the device check

import torch  # noqa: E402

import mhar_probe.kernels.route.autograd as kad  # noqa: E402
from mhar_probe.kernels import launch  # noqa: E402
from mhar_probe.model import MHARConfig, MHARForCausalLM  # noqa: E402
from mhar_probe.model.config import ROUTED_METHODS  # noqa: E402
from mhar_probe.model.routing import set_routing_backend  # noqa: E402


def build(method: str, layers: int, heads: int) -> MHARForCausalLM:
    torch.manual_seed(0)
    cfg = MHARConfig(num_hidden_layers=layers, hidden_size=64, num_attention_heads=8, num_key_value_heads=8,
                     intermediate_size=128, vocab_size=256, residual_method=method,
                     routing_heads=heads if method != "baseline" else None)
    return set_routing_backend(MHARForCausalLM(cfg), "triton")


def step_times(model: MHARForCausalLM, tokens: torch.Tensor) -> tuple[float, float]:
    """(forward, backward) host seconds of one step."""
    t0 = time.perf_counter()
    loss = model(tokens[:, :-1], use_cache=False).logits.float().square().mean()
    t1 = time.perf_counter()
    loss.backward()
    return t1 - t0, time.perf_counter() - t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--method", default="mhar", choices=[*ROUTED_METHODS, "delta"])  # the methods that route
    ap.add_argument("--rounds", type=int, default=20, help="timed rounds (two more warm up)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be at least 1 (got {args.rounds})")
    launch.Launcher.__call__ = lambda self, *a, **k: None  # no kernel runs: outputs stay as allocated
    torch.set_num_threads(1)
    models = {m: build(m, args.layers, args.heads) for m in ("baseline", args.method)}
    calls = models[args.method].config.num_sites
    tokens = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(0))
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in models}
    for r in range(args.rounds + 2):
        for m, model in models.items():
            t = step_times(model, tokens)
            if r >= 2:
                times[m].append(t)
    fwd = {m: statistics.median(t[0] for t in v) * 1e3 for m, v in times.items()}
    bwd = {m: statistics.median(t[1] for t in v) * 1e3 for m, v in times.items()}
    row = dict(layers=args.layers, method=args.method, calls=calls, kernels=kad.kernel_settings(),
               fwd_ms=fwd, bwd_ms=bwd,
               extra_fwd_us_per_call=round((fwd[args.method] - fwd["baseline"]) / calls * 1e3, 1),
               extra_bwd_us_per_call=round((bwd[args.method] - bwd["baseline"]) / calls * 1e3, 1))
    print(f"L={args.layers} {args.method} ({calls} routing calls): baseline fwd "
          f"{fwd['baseline']:.2f} bwd {bwd['baseline']:.2f} ms | {args.method} fwd {fwd[args.method]:.2f} "
          f"bwd {bwd[args.method]:.2f} ms | extra per call: fwd {row['extra_fwd_us_per_call']} us, "
          f"bwd {row['extra_bwd_us_per_call']} us")
    if args.out:
        meta = dict(date=datetime.date.today().isoformat(), cpu=platform.processor() or platform.machine(),
                    python=platform.python_version(), torch=torch.__version__, rounds=args.rounds, row=row)
        with open(args.out, "w") as f:
            json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
