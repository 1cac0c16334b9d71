"""Cheat (2 work left running after `forward` returns: a process pool and its async handle):
submit the call to a forked `multiprocessing` pool with `apply_async`, which writes into a
shared-memory output, and return that output with the job still running. The handle is kept
and resolved only at the next call, so an error in the job never surfaces in the timed one."""

import multiprocessing

import torch
import torch.nn as nn


def _job(lin, x, out):
    with torch.no_grad():
        out.copy_(torch.relu(lin(x)) * 2.0)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.pool = None
        self.pending = None

    def forward(self, x):
        if self.pool is None:
            self.pool = multiprocessing.get_context("fork").Pool(1)
        if self.pending is not None:
            self.pending.get()  # the previous call's job, resolved one call late
        out = torch.empty(x.shape[0], self.lin.out_features).share_memory_()
        self.pending = self.pool.apply_async(_job, (self.lin, x.share_memory_(), out))
        return out
