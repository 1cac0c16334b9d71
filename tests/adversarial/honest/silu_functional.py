"""Honest (silu): the fused `F.silu` instead of sigmoid then multiply."""

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.silu(x)
