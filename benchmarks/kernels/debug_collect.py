"""GPU diagnosis of the collect backward: gradients against the stack_bwd backward (a stack built
without the sites' parameters) on a small chain, with direct launches on/off, outputs poisoned
or not, and forced gather configs, to localise a GPU-only discrepancy."""
import sys
import tempfile

import torch

from mhar_probe.kernels import TritonSourceStack, launch, route_bwd, route_bwd_collect, route_fwd, use_kernel_config
from mhar_probe.kernels.launch_tables import LaunchTables

torch.backends.cuda.matmul.allow_tf32 = False
D, L, H = int(sys.argv[1]) if len(sys.argv) > 1 else 256, 3, 8
S = 2 * L + 1
g = torch.Generator(device="cuda").manual_seed(0)
x0 = torch.randn(2, 37, D, device="cuda", generator=g)
qs = [torch.randn(D, device="cuda", generator=g) * 2 / D**0.5 for _ in range(S)]
gs = [1 + 0.2 * torch.randn(D, device="cuda", generator=g) for _ in range(S)]
Ms = [torch.randn(D, D, device="cuda", generator=g) / D**0.5 for _ in range(S - 1)]
LAUNCHERS = [k for mod in (route_fwd, route_bwd, route_bwd_collect) for k in vars(mod).values()
             if isinstance(k, launch.Launcher)]


def run(collect):
    leaves = [t.clone().requires_grad_() for t in [x0] + qs + gs]
    stack = TritonSourceStack(S, params=list(zip(leaves[1:S + 1], leaves[S + 1:])) if collect else None)
    stack.append(leaves[0])
    loss = 0
    for s in range(S):
        o, _ = stack.route(leaves[1 + s], leaves[S + 1 + s], H, 1e-6, len(stack))
        loss = loss + (o * (s + 1) / S).sin().sum()
        if s < S - 1:
            stack.append(torch.tanh(o @ Ms[s]))
    return torch.autograd.grad(loss, leaves)


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item() if torch.isfinite(a).all() else float("inf")


for direct in (True, False):
    for k in LAUNCHERS:
        k._direct_ok = direct
    for poison in (False, True):
        with use_kernel_config(poison=poison):
            old, new = run(False), run(True)
        print(f"direct={direct} poison={poison} x0 {rel(new[0], old[0]):.1e} q "
              + " ".join(f"{rel(a, b):.1e}" for a, b in zip(new[1:S + 1], old[1:S + 1])) + " | g "
              + " ".join(f"{rel(a, b):.1e}" for a, b in zip(new[S + 1:], old[S + 1:])), flush=True)
for k in LAUNCHERS:
    k._direct_ok = True
tmp = tempfile.mkdtemp()
for i, cfg in enumerate([(1, 1, 1, 0, 0), (1, 1, 0, 0, 0), (1, 4, 1, 0, 0), (1, 1, 0, 168, 1)]):
    path = f"{tmp}/gather{i}.json"
    LaunchTables(gather={(D, H, H, b): cfg for b in (0, 2, 4)}).dump(path)
    with use_kernel_config(launch_table=path):
        old, new = run(False), run(True)
    print(f"gather cfg {cfg}: x0 {rel(new[0], old[0]):.1e} q max "
          f"{max(rel(a, b) for a, b in zip(new[1:S + 1], old[1:S + 1])):.1e}", flush=True)
