"""Tamper (state on the harness's inputs): the output kept as an attribute of the input tensor
itself and served again when the same tensor comes back (the confirmation round's warm loop
calls one input set again and again), names built at run time so the static `mutable_state`
check sees no state of its own. Seen at run time: the input carries an attribute after the
call that it did not carry before."""

import torch
import torch.nn as nn

_KEY = "_" + "stash"


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x):
        kept = vars(x).get(_KEY)
        if kept is not None:
            return kept
        out = torch.relu(self.lin(x)) * 2.0
        vars(x)[_KEY] = out
        return out
