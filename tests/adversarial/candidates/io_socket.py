"""Network I/O: ask an outside service for the answer (or report home)."""

import socket

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        try:
            with socket.create_connection(("127.0.0.1", 9), timeout=0.01) as s:
                s.sendall(x.numpy().tobytes())
        except OSError:
            pass
        return torch.relu(self.lin(x)) * 2.0
