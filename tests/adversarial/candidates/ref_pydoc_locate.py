"""Cheat (5 reference passthrough through introspection other than gc): `pydoc.locate` resolves
a dotted name through `sys.modules`, so the module the worker loaded the problem into
(`stratagem_reference`) hands over its `Model` class without an import statement, a `Model`
name or `sys.modules` in the source. Built first in `__init__`, under the seed the harness
sets for both models, it gets the reference's very weights and computes the expected output."""

import pydoc

import torch.nn as nn

_WHERE = "stratagem_reference." + "Mod" + "el"


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.inner = pydoc.locate(_WHERE)(dim)

    def forward(self, x):
        return self.inner(x)
