"""Cheat (3 fake outputs: infinity): compute nothing and return +inf everywhere. A relative
error normalised by the candidate's own magnitude (`|out - ref| / |out|` is inf / inf = NaN),
a difference passed through `nan_to_num` or clamped before the comparison, or an "either
close or both infinite" rule with a sign-blind test reads every element as in tolerance."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.full((x.shape[0], self.lin.out_features), float("inf"))
