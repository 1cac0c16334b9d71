"""Pattern 17: end the worker from `forward` with `os._exit(0)`, before any verdict is written."""

import os

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()

    def forward(self, x):
        os._exit(0)
