"""The normal form that links a restated design to the earlier one: cosmetic differences share
a form; any difference in what the program computes does not."""

from __future__ import annotations

from stratagem.core.pysyntax import normal_form

BASE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Fused ReLU and scale."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        y = torch.relu(x)  # the activation
        return y * self.scale
'''

COSMETIC = '''
import torch
import torch.nn as nn

# a different comment
class ModelNew(nn.Module):
    def __init__(self, s: float):
        super().__init__()
        self.scale = s

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        out = torch.relu(inp)
        return out * self.scale
'''


def test_comments_docstrings_whitespace_and_local_names_do_not_matter():
    assert normal_form(BASE) == normal_form(COSMETIC) is not None


def test_what_the_program_computes_does():
    for changed in (BASE.replace("torch.relu", "torch.sigmoid"), BASE.replace("y * self.scale", "y + self.scale"),
                    BASE.replace("self.scale = scale", "self.factor = scale"),
                    BASE.replace("import torch\n", "import numpy as torch\n", 1),
                    BASE + "\nTILE = 32\n", BASE.replace("class ModelNew", "class ModelOld")):
        assert normal_form(changed) != normal_form(BASE)


def test_code_strings_keep_their_content_but_not_their_layout():
    a = 'SRC = """\n__global__ void k(float* x) {\n    x[0] = 1.0f;\n}\n// padding to make it long enough to count\n"""\n'
    b = 'SRC = """\n\n  __global__ void k(float* x) {\n        x[0] = 1.0f;\n  }\n// padding to make it long enough to count\n"""\n'
    assert normal_form(a) == normal_form(b)
    assert normal_form(a) != normal_form(a.replace("1.0f", "2.0f"))


def test_nested_scopes_are_not_confused():
    outer_and_inner = "def f(a):\n    def g(b):\n        return b + a\n    return g\n"
    inner_only = "def f(a):\n    def g(b):\n        return b + b\n    return g\n"
    assert normal_form(outer_and_inner) != normal_form(inner_only)
    assert normal_form("def f(a):\n    global T\n    T = a\n") != normal_form("def f(a):\n    global U\n    U = a\n")


def test_unparseable_source_has_no_form():
    assert normal_form("def (:") is None
