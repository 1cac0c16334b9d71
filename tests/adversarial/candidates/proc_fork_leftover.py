"""Cheat (2 work left running after `forward` returns: a process that outlives the call): the
output is computed in the call, and each call also forks a helper that keeps running after
`forward` returns (here it only waits; in `proc_fork_writer.py` it writes the output). The
timer and the first comparison see an honest call, so what must notice is the check, after
every call, that no process the call started is still there."""

import os
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        out = torch.relu(self.lin(x)) * 2.0
        if os.fork() == 0:  # the helper: still running when the caller compares
            time.sleep(0.5)
            os._exit(0)
        return out
