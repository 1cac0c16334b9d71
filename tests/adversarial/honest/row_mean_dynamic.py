"""Honest (row_mean): sum then divide by the length read from the input, in place."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.sum(dim=-1).div_(x.shape[-1])
