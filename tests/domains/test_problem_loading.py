"""Loading KernelBench-format problem files by syntax only, and the per-problem validator graph."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from stratagem.core.problem import content_hash
from stratagem.domains.pytorch.domain import DEFAULT_GRAPH, validator_graph
from stratagem.domains.pytorch.problem import load_problem, parse_problem, size_constants
from stratagem.errors import ProblemError

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "problem_linear.py"
EXAMPLES = sorted(ROOT.glob("examples/*/problem.py"))

MODEL = """
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x
"""
GET_INPUTS = "\ndef get_inputs():\n    return [torch.randn(4)]\n"
GET_INIT = "\ndef get_init_inputs():\n    return []\n"
VALID = MODEL + GET_INPUTS + GET_INIT


def write(tmp_path: Path, source: str, name: str = "prob.py") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(source), encoding="utf-8")
    return p


def load_err(tmp_path: Path, source: str) -> tuple[Path, str]:
    p = write(tmp_path, source)
    with pytest.raises(ProblemError) as ei:
        load_problem(p)
    return p, str(ei.value)


# -- successful loads --------------------------------------------------------------------


def test_load_fixture():
    prob = load_problem(FIXTURE)
    text = FIXTURE.read_text(encoding="utf-8")
    assert prob.name == "problem_linear"
    assert prob.domain == "pytorch"
    assert prob.source == text
    assert prob.path == str(FIXTURE)
    assert prob.id == content_hash(text)
    assert dict(prob.size_constants) == {"batch_size": 32, "dim": 64}
    assert dict(prob.settings) == {}
    assert validator_graph(prob).names == tuple(s.name for s in DEFAULT_GRAPH)


@pytest.mark.parametrize(
    "path",
    EXAMPLES or [pytest.param(None, marks=pytest.mark.skip(reason="no examples/*/problem.py yet"))],
    ids=[p.parent.name for p in EXAMPLES] or None,
)
def test_every_example_problem_loads(path):
    prob = load_problem(path)
    assert prob.domain == "pytorch"
    assert prob.name == path.parent.name  # examples are named by their folder
    assert prob.source == path.read_text(encoding="utf-8")
    assert all(type(v) in (int, float) for v in prob.size_constants.values())
    if "\nbatch_size = " in prob.source:
        assert isinstance(prob.size_constants.get("batch_size"), int)
    validator_graph(prob)  # declared validators (if any) form a valid graph


# -- errors ------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    p = tmp_path / "absent.py"
    with pytest.raises(ProblemError) as ei:
        load_problem(p)
    assert str(p) in str(ei.value)


def test_not_utf8(tmp_path):
    p = tmp_path / "bin.py"
    p.write_bytes(b"x = '\xff\xfe'\n")
    with pytest.raises(ProblemError) as ei:
        load_problem(p)
    assert str(p) in str(ei.value)


def test_syntax_error_names_file_and_line(tmp_path):
    p, msg = load_err(tmp_path, "import torch\n\nclass Model(:\n    pass\n")
    assert str(p) in msg
    assert "line 3" in msg


def test_no_model_class(tmp_path):
    p, msg = load_err(tmp_path, "import torch\n" + GET_INPUTS + GET_INIT)
    assert str(p) in msg and "Model" in msg


def test_model_as_function_is_not_a_class(tmp_path):
    _, msg = load_err(tmp_path, "def Model():\n    pass\n" + GET_INPUTS + GET_INIT)
    assert "class Model" in msg


def test_model_without_forward_or_bases(tmp_path):
    _, msg = load_err(tmp_path, "class Model:\n    pass\n" + GET_INPUTS + GET_INIT)
    assert "forward" in msg


def test_no_get_inputs(tmp_path):
    p, msg = load_err(tmp_path, MODEL + GET_INIT)
    assert str(p) in msg and "get_inputs" in msg


def test_no_get_init_inputs(tmp_path):
    p, msg = load_err(tmp_path, MODEL + GET_INPUTS)
    assert str(p) in msg and "get_init_inputs" in msg


def test_all_missing_names_reported_together(tmp_path):
    _, msg = load_err(tmp_path, "x = 1\n")
    assert "Model" in msg and "get_inputs" in msg and "get_init_inputs" in msg


def test_get_inputs_with_required_arg(tmp_path):
    p, msg = load_err(tmp_path, MODEL + "\ndef get_inputs(n):\n    return []\n" + GET_INIT)
    assert str(p) in msg and "get_inputs" in msg


def test_get_inputs_with_defaulted_arg_is_fine(tmp_path):
    p = write(tmp_path, MODEL + "\ndef get_inputs(n=3, *args, **kw):\n    return []\n" + GET_INIT)
    assert load_problem(p).name == "prob"


def test_unknown_settings_key(tmp_path):
    p, msg = load_err(tmp_path, VALID + '\nSTRATAGEM = {"timeout_s": 5, "bogus_key": 1}\n')
    assert str(p) in msg and "bogus_key" in msg


def test_non_literal_settings(tmp_path):
    p, msg = load_err(tmp_path, VALID + '\nSTRATAGEM = {"timeout_s": compute()}\n')
    assert str(p) in msg and "STRATAGEM" in msg


def test_settings_not_a_dict(tmp_path):
    p, msg = load_err(tmp_path, VALID + '\nSTRATAGEM = ["load"]\n')
    assert str(p) in msg and "dict" in msg


def test_settings_with_unhashable_key_is_problem_error(tmp_path):
    load_err(tmp_path, VALID + "\nSTRATAGEM = {[]: 1}\n")


def test_annotated_settings_are_not_silently_ignored(tmp_path):
    p = write(tmp_path, VALID + '\nSTRATAGEM: dict = {"timeout_s": 7}\n')
    assert load_problem(p).settings == {"timeout_s": 7}


# -- settings and size constants ---------------------------------------------------------


def test_settings_parsed(tmp_path):
    p = write(
        tmp_path,
        VALID
        + '\nSTRATAGEM = {"validators": ["static_checks", "load", "correctness"],\n'
        '             "tolerances": {"float32": {"atol": 1e-3, "rtol": 2e-3}},\n'
        '             "correctness_trials": 10, "timeout_s": 300}\n',
    )
    prob = load_problem(p)
    assert prob.settings == {
        "validators": ["static_checks", "load", "correctness"],
        "tolerances": {"float32": {"atol": 1e-3, "rtol": 2e-3}},
        "correctness_trials": 10,
        "timeout_s": 300,
    }
    assert "STRATAGEM" not in prob.size_constants


def test_size_constants():
    src = textwrap.dedent(
        """
        import torch
        batch_size = 16
        N = 2048 * 2
        dim: int = 8
        M = N // 4 + dim
        neg = -3
        scale = 0.5
        name = "abc"
        flag = True
        x = torch.randn(3)
        K = undefined * 2
        a, b = 1, 2
        label: str
        def f():
            inner = 5
        class C:
            attr = 6
        """
    )
    assert size_constants(ast.parse(src)) == {
        "batch_size": 16,
        "N": 4096,
        "dim": 8,
        "M": 1032,
        "neg": -3,
        "scale": 0.5,
    }


def test_size_constants_division_by_zero_is_ignored():
    assert size_constants(ast.parse("a = 0\nb = 1 // a\nc = 2\n")) == {"a": 0, "c": 2}


def test_parse_problem_without_path_uses_name_in_errors():
    with pytest.raises(ProblemError, match="myprob"):
        parse_problem("x = 1\n", name="myprob")


# -- the per-problem validator graph -----------------------------------------------------


def problem_with(settings: str):
    return parse_problem(VALID + f"\nSTRATAGEM = {settings}\n", name="p", path="/p.py")


def test_validators_subset_is_honoured_in_graph_order():
    prob = problem_with('{"validators": ["correctness", "static_checks", "load"]}')
    g = validator_graph(prob)
    assert g.names == ("static_checks", "load", "correctness")
    assert g.spec("static_checks").placement == "parent"
    assert g.spec("load").placement == "worker"


def test_validators_smaller_subset():
    assert validator_graph(problem_with('{"validators": ["static_checks"]}')).names == (
        "static_checks",
    )


def test_unknown_validator_name_is_problem_error():
    with pytest.raises(ProblemError, match="bogus"):
        validator_graph(problem_with('{"validators": ["static_checks", "bogus"]}'))


@pytest.mark.parametrize(
    "names", [["static_checks", "correctness"], ["load", "correctness", "timing"], ["timing"]]
)
def test_subset_missing_a_dependency_is_problem_error(names):
    with pytest.raises(ProblemError):
        validator_graph(problem_with(f'{{"validators": {names!r}}}'))


def test_validators_of_wrong_type_is_problem_error():
    with pytest.raises(ProblemError):
        validator_graph(problem_with('{"validators": 5}'))


def test_shape_variants_shrink_large_constants_keeping_alignment():
    from stratagem.domains.pytorch.domain import shape_variants

    prob = parse_problem(
        "import torch\nclass Model:\n    def forward(self, x): return x\n"
        "batch_size = 32\ndim = 4096\nodd = 1000\nkernel_size = 3\neps = 1e-5\n"
        "def get_inputs(): return []\ndef get_init_inputs(): return []\n",
        name="p",
    )
    variant, unaligned = shape_variants(prob)
    assert variant == {"batch_size": 16, "dim": 3072, "odd": 744}
    assert all(variant[k] % 8 == 0 for k in ("batch_size", "dim", "odd"))
    # and a variant that breaks alignment: odd sizes, so no power of two or multiple of 8
    assert unaligned == {"batch_size": 25, "dim": 3073, "odd": 751}
    assert all(v % 2 == 1 and v != 1 for v in unaligned.values())


def test_shape_variants_leave_alone_constants_the_reference_reads():
    # `dim` is read by forward and `hidden` by a helper forward calls: a candidate (its own
    # module) cannot follow a change to either, so only `batch_size` is varied.
    from stratagem.domains.pytorch.domain import shape_variants

    prob = parse_problem(
        "import torch\nbatch_size = 32\ndim = 64\nhidden = 128\n"
        "def _proj(x): return x[..., :hidden]\n"
        "class Model:\n    def forward(self, x): return _proj(x.view(-1, dim))\n"
        "def get_inputs(): return [torch.randn(batch_size, dim)]\n"
        "def get_init_inputs(): return []\n",
        name="p",
    )
    assert shape_variants(prob) == [{"batch_size": 16}, {"batch_size": 25}]


def test_a_parameter_named_like_a_constant_is_not_a_read_of_it():
    # KernelBench style: `dim` reaches the model through get_init_inputs, as a parameter.
    from stratagem.domains.pytorch.domain import shape_variants

    prob = parse_problem(
        "import torch\nbatch_size = 32\ndim = 64\n"
        "class Model:\n    def __init__(self, dim):\n        self.dim = dim\n"
        "    def forward(self, x):\n        dim = self.dim\n        return x.view(-1, dim)\n"
        "def get_inputs(): return [torch.randn(batch_size, dim)]\n"
        "def get_init_inputs(): return [dim]\n",
        name="p",
    )
    assert shape_variants(prob) == [{"batch_size": 16, "dim": 48}, {"batch_size": 25, "dim": 49}]


def test_shape_variants_declared_or_disabled():
    from stratagem.domains.pytorch.domain import shape_variants

    base = "import torch\nclass Model:\n    def forward(self, x): return x\nn = 64\n" \
           "def get_inputs(): return []\ndef get_init_inputs(): return []\n"
    assert shape_variants(parse_problem(base + "STRATAGEM = {'shapes': False}\n", name="p")) == []
    declared = parse_problem(base + "STRATAGEM = {'shapes': [{'n': 8}, {'n': 24}]}\n", name="p")
    assert shape_variants(declared) == [{"n": 8}, {"n": 24}]
    with pytest.raises(ProblemError, match="shapes"):
        parse_problem(base + "STRATAGEM = {'shapes': 'small'}\n", name="p")
