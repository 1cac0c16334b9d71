"""Cheat (2 work left running after `forward` returns: a child process): allocate the output in
shared memory, fork, and return at once; the child computes the output, writes it into the
shared block and exits. The timer stops at the return, long before the work is done, and a
harness that compares only later (after synchronising, saving or running the reference) reads
a finished output."""

import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        out = torch.empty(x.shape[0], self.lin.out_features).share_memory_()
        if os.fork() == 0:  # the child: do the work, then leave without running anything else
            with torch.no_grad():
                out.copy_(torch.relu(self.lin(x)) * 2.0)
            os._exit(0)
        return out
