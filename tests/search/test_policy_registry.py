"""The policy registry: policies chosen by name, each owning its `[policies.<name>]` section."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratagem.config import load_config
from stratagem.domains.pytorch.problem import load_problem
from stratagem.domains.pytorch.recipes.policy import RecipesPolicy
from stratagem.errors import ConfigError
from stratagem.search.policies.registry import REGISTRY, build_policy, specs

PROBLEM = Path(__file__).resolve().parents[2] / "examples" / "01_elementwise" / "problem.py"


def build(over: dict, tmp_path: Path):  # type: ignore[no-untyped-def]
    return build_policy(load_config(None, over), load_problem(PROBLEM), False, tmp_path)


def test_policies_are_chosen_by_name_with_their_own_settings(tmp_path) -> None:
    assert {"auto", "recipes"} <= set(specs())
    p = build({"search": {"policy": "recipes"}, "policies": {"recipes": {"recipes": ["compile"]}}}, tmp_path)
    assert isinstance(p, RecipesPolicy) and p.allowed == frozenset({"compile"})
    older = build({"search": {"policy": "recipes", "recipes": ["inference_mode"]}}, tmp_path)
    assert older.allowed == frozenset({"inference_mode"})  # the older spelling still works


@pytest.mark.parametrize("over, says", [
    ({"search": {"policy": "pike-z"}}, "'pike-z' is not a policy"),
    ({"search": {"policy": "auto"}}, "needs a model"),
    ({"search": {"policy": "recipes"}, "policies": {"recipes": {"recipe": ["compile"]}}}, "[policies.recipes] recipe"),
    ({"search": {"policy": "recipes"}, "policies": {"recipes": {"recipes": ["no-such"]}}}, "no-such"),
    ({"search": {"policy": "recipes"}, "policies": {"nonsense": {"x": 1}}}, "[policies.nonsense]"),
])
def test_a_bad_choice_or_section_names_what_is_wrong(over, says, tmp_path) -> None:
    with pytest.raises(ConfigError) as e:
        build(over, tmp_path)
    assert says in str(e.value)


def test_a_new_policy_registers_without_touching_the_loop(tmp_path, monkeypatch) -> None:
    from stratagem.search.policies import registry

    made = []
    spec = registry.PolicySpec("toy", "a test policy", False, lambda ctx: made.append(ctx) or "built")
    monkeypatch.setitem(REGISTRY, "toy", spec)
    assert build({"search": {"policy": "toy"}}, tmp_path) == "built"
    assert made[0].work_dir == tmp_path and made[0].settings is None


@pytest.mark.parametrize("over, says", [
    ({"search": {"policy": "pike-b"}}, "needs a model"),
    ({"search": {"policy": "pike-o"}, "agents": {"model": "test"},
      "policies": {"pike-o": {"exploration_ratio": 0.6, "exploitation_ratio": 0.6}}}, "[policies.pike-o]"),
    ({"search": {"policy": "pike-b"}, "agents": {"model": "test"},
      "policies": {"pike-b": {"selector": "greedy"}}}, "[policies.pike-b] selector"),
    ({"search": {"policy": "pike-o"}, "agents": {"model": "test"},
      "policies": {"pike-o": {"preset": "fastest"}}}, "[policies.pike-o] preset"),
])
def test_pike_settings_are_validated_and_named(over, says, tmp_path) -> None:
    with pytest.raises(ConfigError) as e:
        build(over, tmp_path)
    assert says in str(e.value)


def test_pike_policies_build_offline_and_the_user_s_search_settings_win(tmp_path) -> None:
    from stratagem.search.policies.registry import resolved_config

    for name in ("pike-b", "pike-o"):
        p = build({"search": {"policy": name}, "agents": {"model": "test"}}, tmp_path)
        assert p.name == name
    cfg = resolved_config(load_config(None, {"search": {"policy": "pike-b", "iterations": 7, "max_queries": 50},
                                             "agents": {"model": "test"}}))
    assert (cfg.search.iterations, cfg.search.max_queries, cfg.search.patience) == (7, 50, None)
    assert cfg.policies["pike-b"]["queries_per_phase"] == 10


COMMAND = Path(__file__).resolve().parents[2] / "examples" / "command" / "window_sums"


def test_a_domain_brings_its_own_policies_and_its_default_without_a_model(tmp_path) -> None:
    """Generic search names no domain's policy: `recipes` is the PyTorch domain's, offered for
    its problems only and its default without a model; a command problem has no such default."""
    from stratagem.domains import load_problem as load_any
    from stratagem.search.policies.registry import policy_name, resolved_config, spec_for

    assert "recipes" not in REGISTRY  # the generic registry
    torch_problem, command = load_problem(PROBLEM), load_any(COMMAND)
    assert "recipes" in specs(torch_problem) and "recipes" not in specs(command)
    bare = load_config(None, {})
    assert bare.policy is None and policy_name(bare, torch_problem) == "recipes"
    cfg = resolved_config(bare, torch_problem)
    assert cfg.search.policy == "recipes" and cfg.policies["recipes"] == {"recipes": None}
    assert policy_name(load_config(None, {"agents": {"model": "test"}}), command) == "auto"
    with pytest.raises(ConfigError) as e:
        spec_for(bare, command)
    assert "command problem" in str(e.value) and "stratagem eval" in str(e.value)
    with pytest.raises(ConfigError) as e:
        spec_for(load_config(None, {"search": {"policy": "recipes"}}), command)
    assert "not a policy for a command problem" in str(e.value)
