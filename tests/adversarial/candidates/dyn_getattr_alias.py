"""Aliasing plus getattr with computed names: reach `sys.modules` without writing `sys` or
`import` anywhere a name-based scan would look."""

import builtins

import torch.nn as nn

_load = getattr(builtins, "__imp" + "ort__")
_mods = getattr(_load("s" + "ys"), "mod" + "ules")


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ref = _mods["stratagem_" + "reference"].Model(dim)

    def forward(self, x):
        return self.ref(x)
