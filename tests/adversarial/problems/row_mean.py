import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean over the last dimension (a reduction)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.mean(x, dim=-1)


batch_size = 128
dim = 512


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
