"""problem.toml: what it means, and errors that name the file and the key at fault; hidden
inputs drawn within the declared ranges; the problem bundle read back from a stored source."""

from __future__ import annotations

import secrets

import pytest
from command_fixtures import EXAMPLE, SMALL_TOML, make_problem

from stratagem.config import load_config
from stratagem.domains import get_domain, load_problem, parse_problem
from stratagem.domains.command.domain import draw_inputs, spec_of
from stratagem.domains.command.runner import fill
from stratagem.domains.command.spec import parse_spec
from stratagem.errors import ProblemError


def test_the_example_loads_with_every_section() -> None:
    problem = load_problem(EXAMPLE)
    assert problem.domain == "command" and problem.name == "window_sums"
    spec = spec_of(problem)
    assert spec.editable == ("kernel.c", "flags.txt") and spec.fixed == ("main.c",)
    assert spec.compare.mode == "file" and spec.objective.source == "json" and spec.forbid.libraries == ("m",)
    assert not spec.forbid.allow_dlopen  # a forbidden library forbids dlopen unless allowed
    assert load_problem(EXAMPLE / "problem.toml").id == problem.id
    again = parse_problem(problem.source, name=problem.name, domain="command")
    assert again.id == problem.id and again.size_constants == {"n": 20000, "w": 128}
    facts = get_domain("command").open(problem, load_config(None, {}).evaluation).agent_facts()
    assert facts["editable"] == ["kernel.c", "flags.txt"] and "docs/background.md" in facts["docs"]
    assert any(r.startswith("forbidden: libraries m") for r in facts["rules"])


def test_the_problem_id_follows_every_file(tmp_path) -> None:
    a = load_problem(make_problem(tmp_path / "a"))
    root = make_problem(tmp_path / "b")
    (root / "main.c").write_text((root / "main.c").read_text() + "\n")
    assert load_problem(root).id != a.id


@pytest.mark.parametrize(("old", "new", "key"), [
    ('editable = ["kernel.c", "flags.txt"]', 'editable = "kernel.c"', "files.editable"),
    ('fixed = ["main.c"]', 'fixed = ["main.c", "kernel.c"]', "files.fixed"),
    ('command = "./prog {seed} {n} {w}"', 'command = "./prog {seed} {size}"', "run.command"),
    ('mode = "file"', 'mode = "bytes"', "compare.mode"),
    ('file = "out.txt"\n', "", "compare.file"),
    ('key = "time_ms"', 'regex = "t=(x"', "objective.key"),
    ('source = "json"', 'source = "regex"\nregex = "t=(x"', "objective.regex"),
    ("pairs = 6", "pairs = 0", "timing.pairs"),
    ("pairs = 6", "pairs = 6\nrepeat = 2", "timing.repeat"),
    ("n = [3000, 6000]", "n = [6000, 3000]", "inputs.sizes.n"),
    ("w = { low = 16, high = 96, multiple_of = 2 }", "w = { low = 17, high = 17, multiple_of = 2 }",
     "inputs.sizes.w"),
    ('libraries = ["m"]', 'libraries = ["m"]\nsources = ["("]', "forbid.sources"),
    ("timeout_s = 60", "timeout_s = -1", "build.timeout_s"),
])
def test_a_bad_key_is_named_with_its_file(old, new, key) -> None:
    assert old in SMALL_TOML
    with pytest.raises(ProblemError) as e:
        parse_spec(SMALL_TOML.replace(old, new, 1), "p/problem.toml", "p")
    assert str(e.value).startswith("p/problem.toml: key `" + key + "`"), str(e.value)


def test_missing_files_and_tables_are_named(tmp_path) -> None:
    root = make_problem(tmp_path / "p")
    (root / "main.c").unlink()
    with pytest.raises(ProblemError, match=r"problem.toml: key `files.fixed`: main.c is not in"):
        load_problem(root)
    with pytest.raises(ProblemError, match=r"key `builds`: unknown key \(known here: baselines, build, "):
        parse_spec(SMALL_TOML.replace("[build]", "[builds]"), "x.toml", "x")
    with pytest.raises(ProblemError, match=r"x.toml: key `objective`: missing"):
        parse_spec(SMALL_TOML.replace('[objective]\nsource = "json"\nkey = "time_ms"\n', ""), "x.toml", "x")
    with pytest.raises(ProblemError, match=r"x.toml: not valid TOML"):
        parse_spec("[files", "x.toml", "x")


def test_hidden_inputs_are_drawn_within_their_ranges_and_differ() -> None:
    spec = parse_spec(SMALL_TOML, "p", "p")
    rng = secrets.SystemRandom()
    draws = [draw_inputs(spec, rng) for _ in range(200)]
    assert all(3000 <= d["sizes"]["n"] <= 6000 for d in draws)
    assert all(16 <= d["sizes"]["w"] <= 96 and d["sizes"]["w"] % 2 == 0 for d in draws)
    assert len({d["seed"] for d in draws}) > 190 and len({d["sizes"]["n"] for d in draws}) > 50


def test_placeholders_are_filled_shell_quoted() -> None:
    assert fill("./prog {seed} {n}", {"seed": 7, "n": "1; rm -rf x"}) == "./prog 7 '1; rm -rf x'"
    assert fill("echo {{literal}} {seed}", {"seed": 1}) == "echo {literal} 1"


def test_requests_carry_fresh_hidden_inputs(tmp_path) -> None:
    problem = load_problem(make_problem(tmp_path / "p"))
    cfg = load_config(None, {}).evaluation
    t = get_domain("command").open(problem, cfg)
    worker_stages = [s for s in t.validator_graph().specs if s.placement == "worker"]
    a = t.build_request(None, worker_stages)
    b = t.build_request(None, worker_stages)
    assert len(t.request_seeds(a)) == 3 and t.request_seeds(a) != t.request_seeds(b)
    assert a.compile_stage == "build" and not a.judge
    assert t.timeout_s() >= cfg.timeout_s
    assert t.timeout_s(7.0) == 7.0


def test_declared_work_is_arithmetic_over_the_sizes() -> None:
    from stratagem.domains.command.formula import evaluate

    spec = parse_spec(SMALL_TOML + '[work]\nflops = "2 * (n - w + 1) * w"\npeak_gflops = 50\n', "p", "p")
    assert spec.work.declared and evaluate(spec.work.flops, {"n": 10, "w": 2}) == 36.0
    for bad, why in (('flops = "n * size"', "'size' is not a size"), ('flops = "__import__(1)"', "not allowed"),
                     ('flops = "n *"', "not an expression"), ('bytes = "8 * n"', "declare flops with")):
        with pytest.raises(ProblemError, match=r"key `work\.(flops|bytes)`: .*" + why):
            parse_spec(SMALL_TOML + f"[work]\n{bad}\npeak_gflops = 1\n", "p", "p")


def test_timing_runs_at_fixed_declared_sizes(tmp_path) -> None:
    """Every timed run of every evaluation uses the same sizes (issue 43: the same design
    measured 17x to 72x when the timing sizes were drawn at random): `[timing.sizes]`, or each
    size's largest value; the correctness trials keep drawing hidden sizes."""
    spec = parse_spec(SMALL_TOML, "p/problem.toml", "p")
    assert dict(spec.timing.sizes) == {"n": 6000, "w": 96}
    chosen = parse_spec(SMALL_TOML + "\n[timing.sizes]\nw = 32\n", "p/problem.toml", "p")
    assert dict(chosen.timing.sizes) == {"n": 6000, "w": 32}
    for bad in ("w = 33", "w = 200", "q = 1"):
        with pytest.raises(ProblemError, match="timing"):
            parse_spec(SMALL_TOML + f"\n[timing.sizes]\n{bad}\n", "p/problem.toml", "p")
    problem = load_problem(make_problem(tmp_path / "a"))
    req = get_domain("command").open(problem, load_config(None, {}).evaluation).build_request(None, ())
    assert req.payload["timing_input"]["sizes"] == dict(spec_of(problem).timing.sizes)
