"""Pattern 17: end the worker from `forward` with `sys.exit(0)`."""

import sys

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()

    def forward(self, x):
        sys.exit(0)
