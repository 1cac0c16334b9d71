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


CUDA_A = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = """
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
PYBIND11_MODULE(fused_relu, m) { m.def("relu_cuda", &relu_cuda); }
"""
fused_relu = load_inline(name="fused_relu", cpp_sources="", cuda_sources=cuda_src)


def launch(x):
    return fused_relu.relu_cuda(x)


class ModelNew(nn.Module):
    def forward(self, x):
        return launch(x.contiguous())
'''

# The same kernel: another extension and module name, other comments, spaces and line breaks
# in the CUDA string, another name for the source string and the helper.
CUDA_B = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>

/* One thread per element. */
__global__ void relu_kernel(const float *x, float *y, int n)
{
    int i = blockIdx.x*blockDim.x + threadIdx.x;   // global index
    if (i < n)
        y[i] = x[i] > 0.f ? x[i] : 0.f;
}

torch::Tensor relu_cuda(torch::Tensor x)
{
    auto y = torch::empty_like(x);
    int n = x.numel();
    relu_kernel<<<(n+255)/256, 256>>>(x.data_ptr<float>(),
                                       y.data_ptr<float>(), n);
    return y;
}
PYBIND11_MODULE(relu_ext_v2, m) { m.def("relu_cuda", &relu_cuda); }
"""
relu_ext_v2 = load_inline(name="relu_ext_v2", cpp_sources="", cuda_sources=source)


def run_kernel(x):
    return relu_ext_v2.relu_cuda(x)


class ModelNew(nn.Module):
    def forward(self, inp):
        return run_kernel(inp.contiguous())
'''

KEEP = ("ModelNew",)


def test_extension_and_module_names_and_c_layout_do_not_matter():
    assert normal_form(CUDA_A, keep=KEEP) == normal_form(CUDA_B, keep=KEEP) is not None
    assert normal_form(CUDA_A) != normal_form(CUDA_B)  # keep=None: module-level names are kept


def test_what_the_kernel_computes_does():
    changed = (CUDA_B.replace("x[i] > 0.f ? x[i] : 0.f", "x[i] > 1.f ? x[i] : 0.f"),
               CUDA_B.replace("(n+255)/256, 256", "(n+127)/128, 128"),
               CUDA_B.replace("class ModelNew", "class ModelOld"),
               CUDA_B.replace("inp.contiguous()", "inp"),
               CUDA_B.replace('PYBIND11_MODULE(relu_ext_v2, m)', 'PYBIND11_MODULE(other_name, m)'))
    for c in changed:
        assert normal_form(c, keep=KEEP) != normal_form(CUDA_A, keep=KEEP)


def test_c_tokens_are_split_as_a_compiler_splits_them():
    from stratagem.core.pysyntax import c_normal_form

    assert c_normal_form("int y = a - -b; // minus minus b") == c_normal_form("int y=a- -b;")
    assert c_normal_form("int y = a - -b;") != c_normal_form("int y = a--b;")
    assert c_normal_form("x = a + ++b;") != c_normal_form("x = a+++b;")
    assert c_normal_form("#define F(x) x\nint a;") != c_normal_form("#define F (x) x\nint a;")
    assert c_normal_form('printf("a  b"); /* c */') != c_normal_form('printf("a b");')
    assert c_normal_form("#define N 4\nint a = N;") != c_normal_form("#define N 4 int a = N;")


def test_python_in_a_string_keeps_its_floor_division():
    a = 'CODE = """\nimport math\nx = 10 // 3\ny = math.sqrt(x)  # padding long enough for a code string\n"""\n'
    assert normal_form(a, keep=KEEP) != normal_form(a.replace("// 3", "// 4"), keep=KEEP)


def test_a_name_some_string_spells_is_not_renamed():
    a = "def helper(x):\n    return x\n\n\ndef run(x):\n    return globals()['helper'](x)\n"
    b = a.replace("def helper", "def other")
    assert normal_form(a, keep=KEEP) != normal_form(b, keep=KEEP)
    # size constants and methods keep their names
    c = "batch_size = 16\n\n\nclass ModelNew:\n    def forward(self, x):\n        return x\n"
    assert normal_form(c, keep=KEEP) != normal_form(c.replace("batch_size", "batch"), keep=KEEP)
    assert normal_form(c, keep=KEEP) != normal_form(c.replace("def forward", "def fwd"), keep=KEEP)


def test_the_pytorch_domain_sees_through_the_names():
    from stratagem.domains.pytorch.domain import DOMAIN

    assert DOMAIN.normal_form({"candidate.py": CUDA_A}) == DOMAIN.normal_form({"candidate.py": CUDA_B})
