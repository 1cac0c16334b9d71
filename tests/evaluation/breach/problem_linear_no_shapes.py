import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear -> ReLU -> scale, with the shapes stage (and timing after it) left out of the
    problem's validators: only the visible sizes are checked by the harness."""

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


STRATAGEM = {"validators": ["static_checks", "load", "correctness", "integrity"]}
