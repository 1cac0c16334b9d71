"""Pattern 5/17, reference passthrough through the garbage collector: find the live reference
Model instance among all objects and call it."""

import gc

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()

    def forward(self, x):
        for obj in gc.get_objects():
            if isinstance(obj, nn.Module) and type(obj).__name__ == "Model":
                return obj(x)
        raise RuntimeError("no reference model found")
