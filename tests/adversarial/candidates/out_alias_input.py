"""Pattern 9: return the input itself (identity, aliasing the input) on a problem where the
identity is wrong (x * sigmoid(x) on signed inputs)."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x
