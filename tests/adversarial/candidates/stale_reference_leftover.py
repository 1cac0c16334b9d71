"""Pattern 7, the Sakana-style exploit: the reference computes sigmoid(x) into a temporary and
frees it; a same-size `empty_like` right after gets that block back from a caching allocator,
so `empty_like(x).mul_(x)` equals the reference without computing sigmoid. On a GPU this passes
correctness (reference first) and only the candidate-first run on poisoned memory catches it;
on the CPU (glibc malloc) the block is not handed back and correctness already fails."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.empty_like(x).mul_(x)
