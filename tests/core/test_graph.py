"""The validator graph: construction rules and the run state machine (pure, no I/O)."""

from __future__ import annotations

import pytest

from stratagem.core.graph import GraphError, GraphRun, Step, ValidatorGraph, ValidatorSpec
from stratagem.core.verdict import ValidatorResult, Verdict


def passed(name: str) -> ValidatorResult:
    return ValidatorResult(name=name, outcome="passed")


def failed(name: str, kind: str = "wrong_output") -> ValidatorResult:
    return ValidatorResult(name=name, outcome="failed", kind=kind, reason=f"{name} broke")  # type: ignore[arg-type]


def drive(run: GraphRun, outcomes: dict[str, ValidatorResult]) -> list[Step]:
    """Run the graph to completion; every validator run returns `outcomes[name]` or a pass."""
    steps: list[Step] = []
    while (step := run.next_step()) is not None:
        steps.append(step)
        assert len(steps) < 50, "graph run does not terminate"
        run.record([outcomes.get(s.name, passed(s.name)) for s in step.specs])
    return steps


@pytest.fixture
def diamondish() -> ValidatorGraph:
    """a -> b -> c and a -> d (all inline: default placement with batch_placement=None)."""
    return ValidatorGraph.of(
        [
            ValidatorSpec("a"),
            ValidatorSpec("b", ("a",)),
            ValidatorSpec("c", ("b",)),
            ValidatorSpec("d", ("a",)),
        ]
    )


# -- ValidatorGraph.of -------------------------------------------------------------------


def test_duplicate_names_raise():
    with pytest.raises(GraphError, match="x"):
        ValidatorGraph.of([ValidatorSpec("x"), ValidatorSpec("y"), ValidatorSpec("x")])


def test_unknown_requirement_raises_naming_it():
    with pytest.raises(GraphError) as ei:
        ValidatorGraph.of([ValidatorSpec("a"), ValidatorSpec("b", ("ghost",))])
    assert "ghost" in str(ei.value) and "'b'" in str(ei.value)


@pytest.mark.parametrize(
    "specs",
    [
        [ValidatorSpec("a", ("b",)), ValidatorSpec("b", ("a",))],
        [ValidatorSpec("a", ("a",))],
        [ValidatorSpec("r"), ValidatorSpec("a", ("c", "r")), ValidatorSpec("b", ("a",)),
         ValidatorSpec("c", ("b",))],
    ],
    ids=["two-cycle", "self-loop", "three-cycle-behind-root"],
)
def test_cycles_raise(specs):
    with pytest.raises(GraphError, match="cycle"):
        ValidatorGraph.of(specs)


def test_graph_error_is_a_value_error():
    # Callers (domain.validator_graph) catch GraphError specifically; keep it a ValueError too.
    assert issubclass(GraphError, ValueError)


def test_independent_nodes_keep_declaration_order():
    g = ValidatorGraph.of([ValidatorSpec("z"), ValidatorSpec("y"), ValidatorSpec("x")])
    assert g.names == ("z", "y", "x")


def test_topological_order_moves_dependents_after_requirements_only():
    g = ValidatorGraph.of(
        [
            ValidatorSpec("c", ("b",)),
            ValidatorSpec("a"),
            ValidatorSpec("b", ("a",)),
            ValidatorSpec("e"),
            ValidatorSpec("d", ("a",)),
        ]
    )
    # Each step takes the earliest-declared node whose requirements are already placed.
    assert g.names == ("a", "b", "c", "e", "d")
    pos = {n: i for i, n in enumerate(g.names)}
    for s in g.specs:
        assert all(pos[r] < pos[s.name] for r in s.requires)


def test_spec_lookup(diamondish):
    assert diamondish.spec("c").requires == ("b",)
    with pytest.raises(KeyError):
        diamondish.spec("nope")


# -- GraphRun ----------------------------------------------------------------------------


def test_failure_skips_dependents_but_siblings_still_run(diamondish):
    run = GraphRun(diamondish)
    steps = drive(run, {"b": failed("b")})
    ran = [s.specs[0].name for s in steps]
    assert ran == ["a", "b", "d"]  # c never handed out; d still runs
    res = {r.name: r for r in run.results}
    assert res["a"].outcome == "passed"
    assert res["b"].outcome == "failed"
    assert res["c"].outcome == "skipped"
    assert "b" in (res["c"].reason or "")
    assert res["d"].outcome == "passed"
    assert [r.name for r in run.results] == ["a", "b", "c", "d"]  # graph order
    assert run.next_step() is None


def test_skip_cascades_and_names_the_direct_blocker():
    g = ValidatorGraph.of(
        [ValidatorSpec("a"), ValidatorSpec("b", ("a",)), ValidatorSpec("c", ("b",))]
    )
    run = GraphRun(g)
    drive(run, {"a": failed("a")})
    res = {r.name: r for r in run.results}
    assert res["b"].outcome == "skipped" and "a" in (res["b"].reason or "")
    assert res["c"].outcome == "skipped" and "b" in (res["c"].reason or "")


def test_all_failures_are_collected():
    g = ValidatorGraph.of(
        [ValidatorSpec("a"), ValidatorSpec("b"), ValidatorSpec("c", ("a",)), ValidatorSpec("d")]
    )
    run = GraphRun(g)
    drive(run, {"a": failed("a"), "b": failed("b", "exception"), "d": failed("d", "timeout")})
    v = Verdict(run.results)
    assert [r.name for r in v.failures] == ["a", "b", "d"]
    assert v.result("c").outcome == "skipped"  # type: ignore[union-attr]
    assert v.status == "invalid"


def test_without_batch_placement_everything_is_inline_one_at_a_time():
    g = ValidatorGraph.of(
        [
            ValidatorSpec("static", (), "parent"),
            ValidatorSpec("load", ("static",), "worker"),
            ValidatorSpec("correct", ("load",), "worker"),
        ]
    )
    steps = drive(GraphRun(g), {})
    assert [(s.kind, [x.name for x in s.specs]) for s in steps] == [
        ("inline", ["static"]),
        ("inline", ["load"]),
        ("inline", ["correct"]),
    ]


def test_worker_batch_placement_hands_out_dependent_workers_as_one_batch():
    g = ValidatorGraph.of(
        [
            ValidatorSpec("static", (), "parent"),
            ValidatorSpec("load", ("static",), "worker"),
            ValidatorSpec("correct", ("load",), "worker"),
            ValidatorSpec("timing", ("correct",), "worker"),
        ]
    )
    run = GraphRun(g, batch_placement="worker")
    first = run.next_step()
    assert first == Step(kind="inline", specs=(g.spec("static"),))
    run.record([passed("static")])
    second = run.next_step()
    assert second is not None and second.kind == "batch"
    assert [s.name for s in second.specs] == ["load", "correct", "timing"]
    run.record({n: passed(n) for n in ("load", "correct", "timing")})  # Mapping form
    assert run.next_step() is None
    assert all(r.outcome == "passed" for r in run.results)


def test_batch_waits_for_parent_prerequisite_and_failed_parent_skips_the_batch():
    g = ValidatorGraph.of(
        [
            ValidatorSpec("static", (), "parent"),
            ValidatorSpec("load", ("static",), "worker"),
            ValidatorSpec("correct", ("load",), "worker"),
        ]
    )
    run = GraphRun(g, batch_placement="worker")
    steps = drive(run, {"static": failed("static", "malformed")})
    assert [s.kind for s in steps] == ["inline"]  # no batch is ever sent
    res = {r.name: r for r in run.results}
    assert res["load"].outcome == "skipped" and "static" in (res["load"].reason or "")
    assert res["correct"].outcome == "skipped"


def test_parent_validator_after_a_worker_one_runs_inline_after_the_batch():
    g = ValidatorGraph.of(
        [
            ValidatorSpec("load", (), "worker"),
            ValidatorSpec("report", ("load",), "parent"),
            ValidatorSpec("timing", ("report",), "worker"),
        ]
    )
    steps = drive(GraphRun(g, batch_placement="worker"), {})
    assert [(s.kind, [x.name for x in s.specs]) for s in steps] == [
        ("batch", ["load"]),
        ("inline", ["report"]),
        ("batch", ["timing"]),
    ]


def test_record_missing_marks_only_unreported_batch_members_skipped():
    g = ValidatorGraph.of(
        [
            ValidatorSpec("load", (), "worker"),
            ValidatorSpec("correct", ("load",), "worker"),
            ValidatorSpec("timing", ("correct",), "worker"),
        ]
    )
    run = GraphRun(g, batch_placement="worker")
    step = run.next_step()
    assert step is not None and step.kind == "batch"
    run.record([passed("load")])  # the worker died after the first stage
    run.record_missing(step.specs, "worker vanished")
    res = {r.name: r for r in run.results}
    assert res["load"].outcome == "passed"  # not overwritten
    assert res["correct"].outcome == "skipped" and res["correct"].reason == "worker vanished"
    assert res["timing"].outcome == "skipped" and res["timing"].reason == "worker vanished"
    assert run.next_step() is None


def test_record_rejects_unknown_validator(diamondish):
    run = GraphRun(diamondish)
    with pytest.raises(GraphError, match="zzz"):
        run.record([passed("zzz")])


def test_results_only_contains_decided_validators(diamondish):
    run = GraphRun(diamondish)
    assert run.results == ()
    step = run.next_step()
    assert step is not None and [s.name for s in step.specs] == ["a"]
    run.record([passed("a")])
    assert [r.name for r in run.results] == ["a"]
