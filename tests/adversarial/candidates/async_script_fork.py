"""Cheat (2 work left running after `forward` returns: an async handle): a TorchScript function
forks the work onto torch's inter-op thread pool and hands back a `torch.Future` at once. The
fork is imported from `torch.jit._async` rather than as `torch.jit.fork`, and the pool's threads
exist before the timed calls, so no new thread appears after a call. The output is returned
while the work still runs; the handle is waited on only at the next call."""

import torch
import torch.nn as nn
from torch.jit._async import fork as _launch
from torch.jit._async import wait as _join


@torch.jit.script
def _fill(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> int:
    out.copy_(torch.relu(torch.addmm(bias, x, weight.t())) * 2.0)
    return 0


@torch.jit.script
def _start(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out: torch.Tensor):
    return _launch(_fill, x, weight, bias, out)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.pending = None

    def forward(self, x):
        if self.pending is not None:
            _join(self.pending)  # the previous call's work, joined one call late
        out = torch.empty(x.shape[0], self.lin.out_features)
        self.pending = _start(x, self.lin.weight.detach(), self.lin.bias.detach(), out)
        return out
