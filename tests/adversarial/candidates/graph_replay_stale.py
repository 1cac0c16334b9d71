"""Pattern 15, CUDA-graph-style capture and replay against a stale pointer: once the same input
object comes back (a warm-up loop), "capture" it and from then on always compute from the
captured input, whatever is passed in. Each correctness trial passes a new tensor, so it never
captures there; the integrity refill passes the last trial's tensor again, which captures it,
and the next call with another input replays the old one."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self._last = None
        self._captured = None

    def forward(self, x):
        if self._captured is None and x is self._last:
            self._captured = x
        self._last = x
        src = x if self._captured is None else self._captured
        return torch.relu(self.lin(src)) * 2.0
