"""Issue 59, the pure parts: how shortened code is marked, the tuned points' table, directions
ranked by the run's evidence, and the words a prompt uses for the parent, the threads and the
roofline margin."""

from __future__ import annotations

import random

from stratagem.context import pike
from stratagem.context.designs import render_design
from stratagem.context.render import ProblemBrief
from stratagem.context.run_view import direction_evidence, ranked_directions, run_so_far, spent_text
from stratagem.core.search import DesignView

SOURCE = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
BRIEF = ProblemBrief(name="relu", source=SOURCE, device="cpu", domain="pytorch")


def view(i: int, ratio: float | None, parent: int | None = None, focus: str | None = None, **kw) -> DesignView:
    tags = {**({f"slot b{i}/c0": {"round": 0, "focus": focus}} if focus else {}), **kw.pop("tags", {})}
    status = kw.pop("status", "valid" if ratio is not None else "invalid")
    return DesignView(str(i) * 64, kw.pop("source", f"# design {i}\nclass ModelNew: pass\n"), status,
                      iteration=kw.pop("iteration", i), strategy=kw.pop("strategy", "mutation"),
                      parents=(str(parent) * 64,) if parent is not None else (), speedup=ratio,
                      speedup_low=ratio and ratio * 0.99, speedup_high=ratio and ratio * 1.01,
                      created_at=float(i), tags=tags, **kw)


def test_shortened_code_says_where_and_how_much_was_cut_and_the_best_is_cut_last():
    long = "\n".join(f"x{i} = torch.relu(x{i - 1})  # step {i} of a long program" for i in range(1, 400))
    best = view(1, 2.0, source=long)
    weaker = view(2, 1.5, source=long.replace("relu", "gelu"))
    assert 21_000 < len(long) < 22_000
    text = pike._programs([best, weaker], 26_000, "pytorch")
    best_part, weak_part = text.split("### Program")[1:]
    assert long in best_part  # the best program whole while the budget lasts
    assert "lines cut to fit the context budget" in weak_part
    kept = [line for line in weak_part.splitlines() if line.startswith("x")]
    assert kept and all(line in long.replace("relu", "gelu").splitlines() for line in kept)  # whole lines only
    tail = pike.tail_of("\n".join(f"line {i}" for i in range(5000)), 1_000)
    assert tail.startswith("[... ") and "lines (" in tail.splitlines()[0] and "cut above ...]" in tail
    assert tail.splitlines()[1].startswith("line ")  # from a line's start


def test_a_tuned_point_carries_every_point_of_its_template_in_a_table():
    points = [{"params": {"BLOCK": 32}, "status": "valid", "speedup": 1.1, "design": "a" * 64},
              {"params": {"BLOCK": 64}, "status": "valid", "speedup": 1.3, "design": "b" * 64},
              {"params": {"BLOCK": 128}, "status": "invalid", "speedup": None, "design": "c" * 64}]
    tuned = view(3, 1.3, tags={"params": {"BLOCK": 64}, "handoff": {"author": "c0", "point": 2, "of": 3},
                               "tuned_points": points})
    for text in (render_design(tuned, domain="pytorch"), pike.improve(BRIEF, tuned, "tile", [tuned])):
        assert "every tuned point of its template (3)" in text
        assert "| BLOCK=32 | valid | 1.10x | `aaaaaaaaaaaa` |" in text
        assert "| BLOCK=128 | invalid | - | `cccccccccccc` |" in text


def test_directions_that_gained_come_first_and_those_whose_latest_attempts_lost_never():
    base = view(1, 1.29, focus="fuse more")  # gained over the original ...
    run = [base,
           view(2, 1.18, parent=1, focus="fuse more"),  # ... then lost against the fused design, twice
           view(3, 1.09, parent=1, focus="fuse more"),
           view(4, 1.45, parent=1, focus="reduce the memory traffic"),  # gained
           view(5, None, parent=1, focus="block the loops"),  # failed: a loss
           view(6, 1.30, parent=1, focus="vectorize")]  # even
    ev = direction_evidence(run)
    assert ev["fuse more"].gains and ev["fuse more"].contradicted  # the issue's case: the numbers turned
    assert ev["reduce the memory traffic"].gains and ev["block the loops"].contradicted
    pool = ["fuse more", "block the loops", "vectorize", "tile", "reduce the memory traffic"]
    ranked, lost = ranked_directions(pool, run)
    assert [(d.text, d.standing) for d in ranked] == [("reduce the memory traffic", "gained"), ("tile", "untried"),
                                                      ("vectorize", "even")]
    assert ranked[1].why == "not tried yet in this run" and ranked[0].why.startswith("it produced gains")
    assert '"block the loops"' in lost
    assert ('"fuse more" (`222222222222` 1.18x from `111111111111`\'s 1.29x, `333333333333` 1.09x from '
            "`111111111111`'s 1.29x after gaining earlier (`111111111111` 1.29x from the original's 1.00x))") in lost
    # a direction that lost once and gained in a later step is live again
    again = [*run, view(7, 1.6, parent=4, focus="fuse more")]
    assert not direction_evidence(again)["fuse more"].contradicted
    text = pike.improve(BRIEF, base, ranked[1].text, run, steer=pike.Steer(ranked[1].why, lost))
    assert "Why this direction: not tried yet in this run." in text
    assert "Directions the measurements contradict in this run" in text


def test_a_slot_left_without_a_direction_is_asked_to_brainstorm_a_new_one():
    run = [view(1, 1.29, focus="fuse more"), view(2, 1.1, parent=1, focus="fuse more"),
           view(3, 1.3, parent=1, focus="vectorize")]
    pool, lost = ranked_directions(["fuse more", "vectorize"], run)
    assert [d.standing for d in pool] == ["even"]  # nothing untried, nothing gaining: spent
    text = pike.improve(BRIEF, run[0], None, run, steer=pike.Steer("", lost, spent_text(run)))
    ask = " ".join(text.split("No direction is given to you")[1].split())
    assert '- "vectorize": no clear gain or loss (`333333333333` 1.30x' in ask
    assert "- \"fuse more\": lost (`222222222222` 1.10x from `111111111111`'s 1.29x)" in ask
    assert "Brainstorm first: think of a direction none of them took" in ask
    fresh = pike.brainstorm(BRIEF, 4, run)
    assert fresh.startswith(pike.brainstorm(BRIEF, 4))  # the brainstorm's own request, then the evidence
    assert '- "fuse more": lost (`222222222222` 1.10x' in fresh and '- "vectorize": no clear gain or loss' in fresh
    assert "Propose new directions only" in fresh


def test_the_run_so_far_names_the_best_and_why_a_weak_parent_was_chosen():
    run = [view(1, 1.05), view(2, 1.29), view(3, None, report="[correctness] wrong output")]
    text = run_so_far(run, run[0], "pytorch", why="exploration: a random program of island 2")
    assert "Why your starting design was chosen: exploration: a random program of island 2." in text
    assert "It is not the run's best" in text
    assert "`222222222222`" in text and "# design 2" in text  # the best's code, shown nowhere else
    assert "`333333333333` (mutation): invalid: [correctness] wrong output" in text
    assert "# design 2" not in run_so_far(run, run[0], "pytorch", shown=[run[1].id])


def test_a_parent_from_another_island_is_not_called_the_original():
    from stratagem.search.policies.islands import ProgramDB
    from stratagem.search.policies.pike_settings import PikeOSettings

    db = ProgramDB(PikeOSettings(num_islands=3), size_scale=400)
    db.add("p" * 64, "class ModelNew: pass\n", 1.3, island=0)
    assert db.features(2, "p" * 64).startswith("code size")  # drawn from the archive for island 2
    assert db.features(2, None) == "the original program"
    pid, how = db.draw_parent(2, random.Random(0))
    assert pid == "p" * 64 and how


def test_a_one_thread_cpu_gets_no_spread_over_cores_direction():
    one = pike.directions(ProblemBrief(name="r", source=SOURCE, device="cpu", domain="pytorch",
                                       environment={"threads": 1}))
    many = pike.directions(ProblemBrief(name="r", source=SOURCE, device="cpu", domain="pytorch",
                                        environment={"threads": 8}))
    assert not any("parallel_for" in d for d in one) and any("parallel_for" in d for d in many)


def test_the_roofline_rule_states_the_margin_its_check_admits():
    from pathlib import Path

    from stratagem.config import EvaluationConfig
    from stratagem.domains.pytorch.problem import load_problem
    from stratagem.domains.pytorch.rules import agent_rules

    problem = load_problem(Path(__file__).resolve().parents[1] / "fixtures/problem_relu.py")
    cfg = EvaluationConfig.model_validate({"device": "cpu", "domains": {"pytorch": {"roofline_margin": 0.25}}})
    [rule] = [r for r in agent_rules(problem, cfg) if r.startswith("stage `roofline`")]
    assert "an estimate of the least time, not a measured limit" in rule
    assert "a time more than 25% under it is rejected as impossible" in rule
