"""Cheat (12 precision downgrade within a loose tolerance): the fp16 matmul of `precision_fp16.py`
on a problem that declares KernelBench's 2025 tolerance (atol = rtol = 1e-2 for float32,
`problems/linear_relu_loose.py`). fp16's error, about 1e-3 here, stays well inside it, so the
fixed rule admits an answer computed with half of float32's mantissa bits dropped, and its
speedup (tensor cores, half the bytes) is measured against a float32 reference."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        w, b = self.lin.weight.half(), self.lin.bias.half()
        y = torch.addmm(b, x.half(), w.t())
        return (torch.relu(y) * 2.0).float()
