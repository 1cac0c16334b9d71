"""Cheat (12 reduced-precision accumulation): keep float32 inputs and outputs, but split the
matmul's reduction into chunks of 16 (split-K) whose partial sums are stored and added in
float16, as a kernel with a half-precision accumulator would: every partial is rounded to 11
bits, an error a loose tolerance would admit."""

import torch
import torch.nn as nn

SPLIT = 16


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        wt = self.lin.weight.t()
        acc = self.lin.bias.half().expand(x.shape[0], -1)
        for k in range(0, x.shape[1], SPLIT):
            acc = acc + (x[:, k:k + SPLIT] @ wt[k:k + SPLIT]).half()
        return torch.relu(acc.float()) * 2.0
