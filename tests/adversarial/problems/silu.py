import torch
import torch.nn as nn


class Model(nn.Module):
    """x * sigmoid(x), written as two operations (elementwise)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sigmoid(x) * x


batch_size = 64
dim = 256


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
