"""Global RNG tampering: reseed torch inside `forward`, which makes whatever the harness draws
next predictable."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        torch.manual_seed(0)
        return torch.relu(self.lin(x)) * 2.0
