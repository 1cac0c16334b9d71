"""`[pytorch] precompiled_headers` and `[pytorch] header_diet` (issue 28's build speed-ups, as
settings a user can turn off): the switches reach the worker in its request and turn the
matching build step off there, whatever the worker's environment said."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stratagem.config import load_config
from stratagem.domains.pytorch import domain
from stratagem.domains.pytorch.build import inline_builds
from stratagem.domains.pytorch.problem import load_problem
from stratagem.errors import ConfigError

FIX = Path(__file__).resolve().parents[1] / "fixtures"
KERNEL = "#include <torch/extension.h>\n__global__ void k(float* y) { y[0] = 1.f; }\ntorch::Tensor f(torch::Tensor x) { return x; }\n"


def _payload(section: dict[str, object]) -> dict[str, object]:
    cfg = load_config(None, {"pytorch": section}).evaluation
    problem = load_problem(FIX / "problem_relu.py")
    specs = domain.validator_graph(problem).specs
    return domain.build_request(problem, None, specs, cfg).payload


def test_the_switches_default_on_and_reach_the_request_when_turned_off() -> None:
    on = _payload({})
    assert on["precompiled_headers"] is True and on["header_diet"] is True and on["split_builds"] is True
    off = _payload({"precompiled_headers": False, "header_diet": False, "split_builds": False})
    assert off["precompiled_headers"] is False and off["header_diet"] is False and off["split_builds"] is False


def test_a_misspelt_switch_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="pytorch.header_diets"):
        _payload({"header_diets": False})


def test_turned_off_in_the_request_they_are_off_in_the_worker(monkeypatch) -> None:
    monkeypatch.setenv(inline_builds.PCH_VAR, "1")  # as a CPU build worker is started
    monkeypatch.delenv(inline_builds.DIET_VAR, raising=False)
    monkeypatch.setitem(inline_builds._state, "settings_off", frozenset())
    monkeypatch.setitem(inline_builds._state, "device", "cuda:0")
    inline_builds.apply_settings({"precompiled_headers": True, "header_diet": True})
    a = {"name": "ext", "cpp_sources": ["torch::Tensor f(torch::Tensor x);"], "cuda_sources": [KERNEL]}
    assert inline_builds._lightened(a)[0] is not None  # the diet is tried
    pch_on = inline_builds._pch_supported()  # as this machine allows (gcc, a writable include folder)

    inline_builds.apply_settings({"precompiled_headers": False, "header_diet": False})
    assert inline_builds._lightened(a) == (None, None)  # as written only
    assert inline_builds._pch_supported() is False
    assert os.environ[inline_builds.PCH_VAR] == "1"  # the environment left as it was
    inline_builds.apply_settings({})
    assert inline_builds._pch_supported() is pch_on and inline_builds._lightened(a)[0] is not None


def test_the_worker_applies_them_as_it_starts(monkeypatch) -> None:
    from stratagem.domains.pytorch.worker.stages import prepare_device

    monkeypatch.setitem(inline_builds._state, "settings_off", frozenset())
    cfg = load_config(None, {"pytorch": {"header_diet": False}, "evaluation": {"device": "cpu"}}).evaluation
    problem = load_problem(FIX / "problem_relu.py")
    request = domain.build_request(problem, None, domain.validator_graph(problem).specs, cfg)
    prepare_device(request.model_copy(update={"device": "cpu"}).model_dump())
    assert inline_builds._state["settings_off"] == frozenset({"header_diet"})
    assert not inline_builds._diet_on()
    assert inline_builds._split({"name": "ext", "cuda_sources": [KERNEL]}) == (None, None)  # a lighter build too: off with the diet


def test_split_builds_off_in_the_request_is_off_in_the_worker(monkeypatch) -> None:
    monkeypatch.delenv(inline_builds.DIET_VAR, raising=False)
    monkeypatch.setitem(inline_builds._state, "settings_off", frozenset())
    import inspect

    import torch.utils.cpp_extension as ext

    launching = KERNEL.replace("{ return x; }", "{ k<<<1, 1>>>(x.data_ptr<float>()); return x; }")
    a = {"name": "ext", "cpp_sources": ["torch::Tensor f(torch::Tensor x);"], "cuda_sources": [launching],
         "no_implicit_headers": False}
    monkeypatch.setitem(inline_builds._state, "signature", inspect.signature(ext.load_inline))
    inline_builds.apply_settings({})
    assert inline_builds._split(a)[0] is not None
    inline_builds.apply_settings({"split_builds": False})
    assert inline_builds._split(a) == (None, None)
    assert inline_builds._diet_on()  # lean and the diet stay on
