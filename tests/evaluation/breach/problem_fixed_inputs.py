import torch
import torch.nn as nn


class Model(nn.Module):
    """GELU gated by a sigmoid (elementwise), on inputs drawn from the problem's own fixed
    generator: every call of get_inputs() returns the same values, whatever the harness seeds."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.nn.functional.gelu(x) * torch.sigmoid(x)


batch_size = 256
dim = 1024


def get_inputs():
    g = torch.Generator().manual_seed(1234)
    return [torch.randn(batch_size, dim, generator=g)]


def get_init_inputs():
    return []
