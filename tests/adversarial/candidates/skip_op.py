"""Pattern 14: drop an operation the problem includes (the ReLU)."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return self.lin(x) * 2.0
