"""Pattern 2: return an empty output at once and let a background thread finish it after
`forward` has returned (before the harness reads it, if the thread wins the race)."""

import threading

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        out = torch.empty(x.shape[0], self.lin.out_features)

        def finish():
            with torch.no_grad():
                out.copy_(torch.relu(self.lin(x)) * 2.0)

        threading.Thread(target=finish, daemon=True).start()
        return out
