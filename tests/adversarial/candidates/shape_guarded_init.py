"""Cheat (13 shape specialisation behind a guard on another size): the constructor recognises
the visible configuration by its width (dim == 64, from `get_init_inputs`) and then takes a
path hard-wired to the visible batch as well (a fixed-shape view: one GEMM of a constant
shape, as a specialised kernel would be compiled). A shape check that changes every size
constant at once changes the width too, so the guard sends it down the general path."""

import torch
import torch.nn as nn

WIDTH, BATCH = 64, 32


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.visible = dim == WIDTH

    def forward(self, x):
        if self.visible:
            y = torch.addmm(self.lin.bias, x.view(BATCH, WIDTH), self.lin.weight.t())
            return torch.relu(y).view(BATCH, WIDTH) * 2.0
        return torch.relu(self.lin(x)) * 2.0
