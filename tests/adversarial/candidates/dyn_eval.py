"""`eval` of a string expression that reaches the reference module."""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ref = eval("__import__('sys').modules['stratagem_reference'].Model")(dim)

    def forward(self, x):
        return self.ref(x)
