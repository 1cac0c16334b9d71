"""Cheat (12 precision downgrade, fp16): run the fp32 problem's matmul in float16 (tensor-core
speed on a GPU, half the bytes everywhere) and cast the result back, betting that an error of
a few 1e-3 passes the comparison."""

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
