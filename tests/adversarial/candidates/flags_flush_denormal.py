"""Pattern 12: flush denormals to zero process-wide (faster, different numerics), a global flag
outside the usual TF32/precision set."""

import torch
import torch.nn as nn

torch.set_flush_denormal(True)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2.0
