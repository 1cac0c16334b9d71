import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """
    Fewer passes and no full-size temporaries beyond the output itself:
    h = x + residual goes into a fresh buffer that becomes the output; the mean of
    squares comes from a single vector_norm reduction (no h**2 tensor); the per-row
    factor is computed in place on the tiny (rows, 1) tensor; and the two scalings
    run in place on h.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super(ModelNew, self).__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h = torch.add(x, residual)
        n = h.shape[-1]
        # ||h||^2 / n == mean(h**2)
        inv_rms = torch.linalg.vector_norm(h, ord=2, dim=-1, keepdim=True)
        inv_rms.square_().div_(n).add_(self.eps).rsqrt_()
        return h.mul_(inv_rms).mul_(self.weight)
