import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Residual add followed by RMSNorm (LLaMA-style pre-norm block entry):

        h = x + residual
        out = weight * h / sqrt(mean(h**2, dim=-1) + eps)

    Written the usual eager way, this is seven kernels (five over the full tensor) and several full-size
    temporaries.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super(Model, self).__init__()
        # Non-trivial gains (as after training) so the weight multiply matters.
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h = x + residual
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.eps)
        return self.weight * h


batch_size = 8192
hidden_size = 4096


def get_inputs():
    x = torch.randn(batch_size, hidden_size)
    residual = torch.randn(batch_size, hidden_size)
    return [x, residual]


def get_init_inputs():
    return [hidden_size]
