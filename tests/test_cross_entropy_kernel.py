"""The fused cross-entropy (`mhar_probe/kernels/cross_entropy/fused.py`) against a float64 reference and
`F.cross_entropy`: on the CPU in Triton's interpreter (fp32 / fp16 logits), on a GPU as is.

Outputs are poisoned before the kernels write them; V = 9,000 spans three forward iterations
and three backward column blocks, with a ragged last one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

triton = pytest.importorskip("triton")

from mhar_probe.kernels.cross_entropy.fused import BWD_BLOCK_V, FWD_BLOCK_V, fused_cross_entropy  # noqa: E402
from mhar_probe.kernels.cross_entropy.naive import cross_entropy_reference_f64  # noqa: E402

from kernel_checks import DEV, rel  # noqa: E402


def poisoned_ce(logits, targets, **kwargs):
    """The fused kernel pair with every output NaN-filled before the kernels write it."""
    return fused_cross_entropy(logits, targets, poison=True, **kwargs)


def make(N, V, dtype, scale=3.0, seed=0, ignore=()):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(N, V, generator=g) * scale).to(DEV, dtype).requires_grad_(True)
    targets = torch.randint(0, V, (N,), generator=g)
    targets[list(ignore)] = -100
    return logits, targets.to(DEV)


def loss_and_grad(fn, logits, targets):
    x = logits.detach().clone().requires_grad_(True)
    loss = fn(x, targets)
    loss.backward()
    return loss.detach(), x.grad


def test_the_shape_spans_several_blocks():
    assert 9000 > 2 * FWD_BLOCK_V and 9000 % BWD_BLOCK_V


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-6), (torch.float16, 2e-3)])
def test_loss_and_gradient_match_float64(dtype, tol):
    logits, targets = make(5, 9000, dtype)
    loss, grad = loss_and_grad(poisoned_ce, logits, targets)
    ref_loss, ref_grad = cross_entropy_reference_f64(logits.detach(), targets)
    assert loss.dtype == torch.float32 and grad.dtype == dtype and grad.shape == logits.shape
    assert abs(loss.double().item() - ref_loss.item()) < 1e-5 * abs(ref_loss.item())
    assert rel(grad, ref_grad) < tol


def test_matches_torch_cross_entropy_on_upcast_logits():
    logits, targets = make(6, 700, torch.float32, seed=1)
    ours = loss_and_grad(poisoned_ce, logits, targets)
    torch_ = loss_and_grad(lambda x, t: F.cross_entropy(x.float(), t), logits, targets)
    assert torch.allclose(ours[0], torch_[0], rtol=1e-6, atol=0)
    assert rel(ours[1], torch_[1]) < 1e-6


def test_ignored_rows_leave_the_mean_and_get_no_gradient():
    logits, targets = make(6, 300, torch.float32, seed=2, ignore=(1, 4))
    loss, grad = loss_and_grad(poisoned_ce, logits, targets)
    ref = F.cross_entropy(logits.detach().double(), targets, ignore_index=-100)
    assert abs(loss.item() - ref.item()) < 1e-5 * ref.item()
    assert torch.equal(grad[[1, 4]], torch.zeros_like(grad[[1, 4]]))
    kept = [0, 2, 3, 5]
    sub_loss, sub_grad = loss_and_grad(poisoned_ce, logits[kept], targets[kept])
    assert abs(sub_loss.item() - loss.item()) < 1e-6 * loss.item()
    assert rel(grad[kept], sub_grad) < 1e-6


def test_every_row_ignored_gives_nan_as_torch_and_a_zero_gradient():
    logits, targets = make(3, 50, torch.float32, ignore=(0, 1, 2))
    loss, grad = loss_and_grad(poisoned_ce, logits, targets)
    assert torch.isnan(loss) and torch.isnan(F.cross_entropy(logits.detach(), targets))
    assert torch.equal(grad, torch.zeros_like(grad))


def test_large_logits_do_not_overflow():
    logits, targets = make(4, 5000, torch.float32, scale=400.0, seed=3)
    loss, grad = loss_and_grad(poisoned_ce, logits, targets)
    ref_loss, ref_grad = cross_entropy_reference_f64(logits.detach(), targets)
    assert torch.isfinite(loss) and abs(loss.item() - ref_loss.item()) < 1e-5 * ref_loss.item()
    assert rel(grad, ref_grad) < 1e-5


def test_batched_logits_and_upstream_gradient_scale():
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(2, 3, 257, generator=g).to(DEV).requires_grad_(True)  # [B, T, V]
    targets = torch.randint(0, 257, (2, 3), generator=g).to(DEV)
    (2.5 * poisoned_ce(logits, targets)).backward()
    _, ref_grad = cross_entropy_reference_f64(logits.detach().reshape(6, 257), targets.reshape(6))
    assert rel(logits.grad.reshape(6, 257), 2.5 * ref_grad) < 1e-6


def test_mismatched_shapes_are_refused():
    logits, targets = make(4, 10, torch.float32)
    with pytest.raises(ValueError, match="disagree"):
        poisoned_ce(logits, targets[:3])
