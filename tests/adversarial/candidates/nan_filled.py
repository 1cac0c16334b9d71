"""Cheat (3 fake outputs: NaN): compute nothing and return an output of the right shape and
dtype filled with NaN. Every comparison with NaN is false, so a check written as "fail if any
error exceeds the tolerance" (`(err > tol).any()`, or a max error taken with a NaN-ignoring
max) finds nothing to fail: a correct-looking verdict for one fill per call."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.full((x.shape[0], self.lin.out_features), float("nan"))
