import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Row-wise L2 norm: sqrt(sum(x * x, dim=1)).

    Eager PyTorch materializes x * x (a full-size temporary) before reducing it.
    """

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(torch.sum(x * x, dim=1))


batch_size = 16384
dim = 4096


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
