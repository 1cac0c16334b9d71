import torch
import torch.nn as nn


class Model(nn.Module):
    """A matmul with a long reduction: (256 x 65536) @ (65536 x 256)."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a @ b


M = 256
K = 65536
N = 256


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
