import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear -> ReLU -> scale, with the off-distribution correctness trial turned off."""

    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2.0


batch_size = 32
dim = 64


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]


STRATAGEM = {"off_distribution": False}
