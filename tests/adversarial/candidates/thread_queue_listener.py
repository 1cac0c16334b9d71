"""Pattern 2 without naming `threading`, `concurrent` or `asyncio`: `logging.handlers.QueueListener`
starts a background thread, and its handler runs there; one is left running after every call
(here it does no work, but a handler could finish the output after `forward` returns)."""

import logging
import logging.handlers
import queue

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.listeners = []

    def forward(self, x):
        listener = logging.handlers.QueueListener(queue.SimpleQueue(), logging.NullHandler())
        listener.start()
        self.listeners.append(listener)
        return torch.relu(self.lin(x)) * 2.0
