"""Pattern 20-ish: change the intra-op thread count, which also changes how fast the reference
runs in the same process."""

import torch
import torch.nn as nn

torch.set_num_threads(1)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2.0
