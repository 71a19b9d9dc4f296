"""`mhar_probe.loss`: the training objective's cross-entropy, one definition for training and the
benchmarks. The torch path is `F.cross_entropy` on fp32 logits; the fused path (Triton's
interpreter on the CPU, the kernels on a GPU) gives the same loss and gradient; the default
follows the device."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mhar_probe.loss import choose_loss_kernel, next_token_cross_entropy

from kernel_checks import DEV


def _logits_and_targets():
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, 5, 300, generator=g).requires_grad_(True), torch.randint(0, 300, (2, 5), generator=g)


def test_torch_path_is_cross_entropy_on_fp32_logits():
    logits, targets = _logits_and_targets()
    ours = next_token_cross_entropy(logits.half().float(), targets, "torch")
    ref = F.cross_entropy(logits.half().float().reshape(10, 300), targets.reshape(10))
    assert torch.equal(ours, ref)


def test_fused_path_matches_the_torch_path():
    pytest.importorskip("triton")
    logits, targets = (t.to(DEV) for t in _logits_and_targets())
    grads = []
    for kernel in ("torch", "fused"):
        x = logits.detach().clone().requires_grad_(True)
        loss = next_token_cross_entropy(x, targets, kernel)
        loss.backward()
        grads.append((loss.detach(), x.grad))
    torch.testing.assert_close(grads[1][0], grads[0][0], rtol=1e-6, atol=0)
    torch.testing.assert_close(grads[1][1], grads[0][1], rtol=1e-5, atol=1e-8)


def test_an_unknown_kernel_is_refused():
    logits, targets = _logits_and_targets()
    with pytest.raises(ValueError, match="choose from fused, torch"):
        next_token_cross_entropy(logits, targets, "liger")


def test_default_follows_the_device_and_fused_needs_cuda():
    assert choose_loss_kernel(None, torch.device("cuda")) == "fused"
    assert choose_loss_kernel(None, torch.device("cpu")) == "torch"
    assert choose_loss_kernel("torch", torch.device("cuda")) == "torch"
    with pytest.raises(ValueError, match="needs a CUDA device"):
        choose_loss_kernel("fused", torch.device("cpu"))
    with pytest.raises(ValueError, match="must be one of"):
        choose_loss_kernel("fast", torch.device("cuda"))
