"""Tamper (a process-wide hook written by native code): the global forward pre-hook registry
filled through the C API (`PyObject_SetItem`, what a C++ extension's `dict[key] = hook`
does), with a builtin as the hook, so no Python code of the candidate's runs when it fires.
Seen at run time all the same: the registry's entries differ from the worker's snapshot (and
`PyDict_SetItem`, which writes around an OrderedDict's order, by its length)."""

import ctypes

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self._hooked = False

    def forward(self, x):
        if not self._hooked:
            registry = vars(torch.nn.modules.module)["_global_forward" + "_pre_hooks"]
            set_item = ctypes.pythonapi.PyObject_SetItem
            set_item.argtypes = (ctypes.py_object, ctypes.py_object, ctypes.py_object)
            set_item(registry, 10**9, {}.get)  # a builtin: {}.get(module, args) returns the args unchanged
            self._hooked = True
        return torch.relu(self.lin(x)) * 2.0
