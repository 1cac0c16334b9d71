"""The off-distribution trial's rule: honest code that sums in another order passes on scaled
inputs, code that skips part of the computation outside the visible range does not."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from stratagem.domains.pytorch.worker import params

TOL = {"float32": {"atol": 1e-4, "rtol": 1e-4}}


def _worker():
    return SimpleNamespace(req={"tolerances": TOL})


def test_a_matmul_summed_in_another_order_passes_on_scaled_inputs() -> None:
    torch.manual_seed(0)
    x = params.off_distribution([torch.randn(512, 256)], 16.0, seed=3)[0]
    w = torch.randn(256, 1024)
    ref = torch.tanh(x @ w / 64) * 80 + x.sum(1, keepdim=True)
    # the same math in another order (blocked K, float32): a few 1e-4 of the output apart
    blocks = sum(x[:, k:k + 32] @ w[k:k + 32] for k in range(0, 256, 32))
    cand = torch.tanh(blocks / 64) * 80 + x.flip(1).sum(1, keepdim=True)
    assert not torch.allclose(cand, ref, atol=1e-4, rtol=1e-4)  # the fixed per-element rule would reject it
    cmp, grow = params.judge_off_distribution(_worker(), ref, cand, [x], visible_magnitude=5.0)
    assert cmp.ok, cmp.reason
    assert grow > 1


def test_a_clamp_never_reached_on_visible_inputs_fails_off_distribution() -> None:
    x = params.off_distribution([torch.randn(64, 512)], 16.0, seed=5)[0]
    ref = torch.clamp(torch.nn.functional.leaky_relu(x, 0.01), max=20.0)
    cheat = torch.nn.functional.leaky_relu(x, 0.01)  # right wherever |x| < 20, as on N(0, 1) inputs
    cmp, _ = params.judge_off_distribution(_worker(), ref, cheat, [x], visible_magnitude=3.0)
    assert not cmp.ok and "outside" in (cmp.reason or "")
