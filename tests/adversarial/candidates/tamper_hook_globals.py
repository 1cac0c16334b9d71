"""Tamper (process-wide hook through a bound method's globals): the global forward-hook
registry reached as `self.lin.forward.__func__.__globals__` of torch's own module code and
written into directly, as a native extension would (no registration function called). The hook
serves the reference a zero output... or anything else; here it only counts calls. Seen at run
time: the registry's entries differ from the worker's snapshot."""

import torch
import torch.nn as nn


def _count(module, args, output):
    return output


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self._hooked = False

    def forward(self, x):
        if not self._hooked:
            registry = self.lin.register_forward_hook.__func__.__globals__["_global_forward" + "_hooks"]
            registry[10**9] = _count
            self._hooked = True
        return torch.relu(self.lin(x)) * 2.0
