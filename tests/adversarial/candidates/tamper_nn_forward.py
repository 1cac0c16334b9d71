"""Tamper (monkeypatching torch's modules): `nn.Linear.forward` rebound, through names built at
run time, to a version that sleeps before the real one, so the reference (built of
`nn.Linear`) is slower while the candidate, which calls `F.linear`, is not. Seen at run time:
the worker's snapshot holds every `torch.nn` module's `forward`."""

import time

import torch
import torch.nn as nn
import torch.nn.functional as F

_real = vars(nn.Linear)["for" + "ward"]


def _slow(self, x):
    time.sleep(0.001)
    return _real(self, x)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        type.__setattr__(nn.Linear, "for" + "ward", _slow)

    def forward(self, x):
        return torch.relu(F.linear(x, self.lin.weight, self.lin.bias)) * 2.0
