import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    """
    The hand-written expression is exactly PyTorch's tanh-approximate GELU, which
    PyTorch implements as one fused, vectorized kernel (on CPU and on CUDA): the
    tensor is read once and written once instead of about eight times, and no
    temporaries are allocated.
    """

    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")
