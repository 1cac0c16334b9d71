"""Pattern 5, reference passthrough via the name `Model`: KernelBench exec's the candidate in
the reference's namespace, so a bare `Model` resolves there. Here it must not."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.inner = Model(dim)  # noqa: F821 - relies on the reference's namespace

    def forward(self, x):
        return self.inner(x)
