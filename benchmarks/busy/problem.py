import torch
import torch.nn as nn

# RMSNorm + SwiGLU MLP + residual (the problem of issue 41): many small ops in eager.


class Model(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.Parameter(torch.ones(dim))
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


STRATAGEM = {"validators": ["static_checks", "load", "correctness", "integrity", "shapes", "timing"]}

batch, seq, dim, hidden = 2, 128, 512, 1376


def get_inputs():
    return [torch.randn(batch, seq, dim)]


def get_init_inputs():
    return [dim, hidden]
