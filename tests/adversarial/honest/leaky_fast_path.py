"""Honest (counterpart of leaky_no_clamp.py): skips the clamp only when no input can reach it,
which it checks on every call, so it is faster on the visible N(0, 1) inputs and still right
on inputs scaled far past the clamp (the off-distribution trial takes the full path)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.nn.functional.leaky_relu(x, 0.01)
        if bool(x.max() <= 20.0):  # leaky_relu(x) <= x <= 20: the clamp changes nothing
            return y
        return y.clamp_(max=20.0)
