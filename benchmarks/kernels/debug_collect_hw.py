import sys, torch
sys.path.insert(0, "tests/gpu")
import test_kernels_gpu as G
from mhar_probe.kernels import TritonSourceStack
for D, hw in [(1280, 4), (256, 4), (1280, 2)]:
    t = G.run_chain(TritonSourceStack, torch.float32, D=D, hw=hw, collect=True)
    r = G.run_chain(G._eager_stack, torch.float32, D=D, hw=hw, collect=True)
    errs = [G.rel(a, b) for a, b in zip(t, r)]
    S = 13; nw = len(t) - 1 - (1 + 2 * S)
    bad = [i for i, e in enumerate(errs) if not e < 1e-4]
    print(D, hw, "n", len(t), "weights", nw, "bad idx", bad[:12], "max", max(errs))
