import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """
    torch.linalg.vector_norm squares and accumulates inside a single reduction
    kernel, so x is read once and the full-size x * x temporary never exists.
    """

    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(x, ord=2, dim=1)
