"""Cheat (2 work left running after `forward` returns: an async handle hidden in a string): the
TorchScript source that forks the work onto torch's inter-op thread pool is a string compiled
by `torch.jit.CompilationUnit`, so no fork, thread or future is a name in the Python code. The
output is returned while the forked work still fills it; the handle is kept, never waited on."""

import torch
import torch.nn as nn

_SOURCE = """
def fill(x: Tensor, weight: Tensor, bias: Tensor, out: Tensor) -> int:
    out.copy_(torch.relu(torch.addmm(bias, x, weight.t())) * 2.0)
    return 0

def start(x: Tensor, weight: Tensor, bias: Tensor, out: Tensor):
    return torch.jit.fork(fill, x, weight, bias, out)
"""

_UNIT = torch.jit.CompilationUnit(_SOURCE)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.pending = []

    def forward(self, x):
        out = torch.empty(x.shape[0], self.lin.out_features)
        self.pending = [_UNIT.start(x, self.lin.weight.detach(), self.lin.bias.detach(), out)]
        return out
