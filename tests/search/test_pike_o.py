"""PIKE-O: the program database's bookkeeping (islands, grid, archive, population cap,
migration, sampling, persistence) and the policy end to end, with its presets."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest
from pike_fakes import Script, make_pike_loop

from stratagem.search.policies.islands import ProgramDB
from stratagem.search.policies.pike_settings import PikeOSettings


def db_of(**kw) -> ProgramDB:
    return ProgramDB(PikeOSettings(**kw), size_scale=400)


def test_a_valid_child_joins_its_island_its_grid_cell_and_the_archive():
    db = db_of(num_islands=2, archive_size=2, feature_bins=4)
    db.add("a", "x" * 50, 1.5, 0)
    db.add("b", "x" * 50, 2.5, 0)  # same cell (size bin 0, diversity ~0): the fitter owns it
    db.add("c", "y" * 390, 1.0, 1)
    assert db.islands[0].members == ["a", "b"] and db.islands[1].members == ["c"]
    assert db.islands[0].grid == {db.cell(50, db.entry(0, "b").diversity): "b"}
    assert db.archive == ["b", "a"]  # fittest first, capped at archive_size
    assert db.islands[0].generation == 2 and db.islands[1].generation == 1
    assert db.cell(390, 0.0).startswith("3,") and db.cell(10_000, 1.0) == "3,3"


def test_the_population_cap_drops_the_least_fit_unprotected_program():
    db = db_of(num_islands=1, population_size=3, archive_size=1, feature_bins=1)
    for i, fit in enumerate([3.0, 1.0, 2.0, 1.5]):
        db.add(f"p{i}", f"code {i}", fit, 0)
    # p0 is the archive and the only cell's owner; p1 (1.0) is the least fit of the rest
    assert sorted(db.islands[0].members) == ["p0", "p2", "p3"]
    assert db.entry(0, "p1") is None


def test_migration_copies_the_fittest_to_both_ring_neighbours_at_the_interval():
    db = db_of(num_islands=3, migration_interval=2, migration_rate=0.5)
    db.add("a", "aaaa", 2.0, 0)
    assert db.migrate_due() == []  # island 0 has 1 generation of 2
    db.add("b", "bbbb", 1.0, 0)
    moves = db.migrate_due()
    assert sorted(moves) == [("a", 0, 1), ("a", 0, 2)]
    assert db.entry(1, "a").migrant and "a" in db.islands[2].members
    db.add("c", "cccc", 3.0, 1)
    db.add("d", "dddd", 0.5, 1)
    moves = db.migrate_due()  # island 1 is due: its natives only (the migrant a stays put)
    assert {m[0] for m in moves} == {"c"} and ("c", 1, 0) in moves and ("c", 1, 2) in moves
    assert db.migrate_due() == []


def test_sampling_follows_the_ratios_and_falls_back_to_the_original():
    assert db_of().draw_parent(0, random.Random(0))[0] is None  # nothing yet: the original program
    db = db_of(num_islands=1, exploration_ratio=0.0, exploitation_ratio=1.0, archive_size=2)
    for i, fit in enumerate([1.0, 2.0, 3.0, 4.0]):
        db.add(f"p{i}", f"source {i} " * (i + 1), fit, 0)
    rng = random.Random(3)
    assert {db.draw_parent(0, rng)[0] for _ in range(50)} == {"p3", "p2"}  # exploit only: the archive
    explore = db_of(num_islands=2, exploration_ratio=1.0, exploitation_ratio=0.0)
    explore.add("x", "x", 1.0, 0)
    explore.add("y", "y", 1.0, 1)
    assert {explore.draw_parent(1, rng)[0] for _ in range(30)} == {"y"}  # explore: its own island
    insp = db.inspirations(0, "p3", rng)
    assert "p3" not in insp and insp[0] == "p2" and len(insp) == 3


def test_the_database_survives_a_round_trip_through_json():
    db = db_of(num_islands=2, migration_interval=1)
    db.add("a", "aaa", 1.2, 0)
    db.add("b", "bbb", 1.4, 1)
    db.migrate_due()
    again = ProgramDB.from_json(db.to_json(), db.settings, db.sources)
    assert again.to_json() == db.to_json()


def test_presets_reproduce_the_ablation_ladder_and_explicit_settings_win():
    s = PikeOSettings(preset="mut-npar-1isl-eo-sl")
    assert (s.template, s.parallel_evaluations, s.num_islands, s.exploration_ratio, s.exploitation_ratio,
            s.archive_size) == ("mutation", 1, 1, 0.0, 1.0, 4)
    assert PikeOSettings(preset="mut-npar", num_islands=5).num_islands == 5
    d = PikeOSettings()
    assert (d.num_islands, d.archive_size, d.exploration_ratio, d.exploitation_ratio, d.parallel_evaluations,
            d.template) == (3, 12, 0.2, 0.7, 20, "crossover")
    with pytest.raises(ValueError):
        PikeOSettings(exploration_ratio=0.6, exploitation_ratio=0.6)


def test_pike_o_runs_islands_with_crossover_and_persists_them(tmp_path):
    script = Script(bad=lambda n: n % 4 == 0)
    loop, store, _ = make_pike_loop(tmp_path, "pike-o", script, max_queries=30,
                                    settings={"parallel_evaluations": 3, "migration_interval": 2})
    out = asyncio.run(loop.run())
    assert out.stop_reason.startswith("max_queries (30 of 30)")
    roles = Counter(c.role for c in store.agent_calls())
    # the first batch mutates the original program (nothing to cross yet), later ones cross designs
    assert set(roles) == {"mutate", "crossover", "fix"} and sum(c.requests for c in store.agent_calls()) == 30
    saved = store.policy_state("pike-o/db")
    assert saved["batches_done"] == len(store.iterations())
    islands = saved["db"]["islands"]
    assert len(islands) == 3 and all(i["members"] for i in islands) and saved["db"]["archive"]
    assert any(e["migrant"] for e in saved["db"]["entries"].values())
    later = [p for r, p in script.calls[6:] if r == "crossover"]
    assert later and all("# Evolution history" in p and "Inspiration programs" in p for p in later)
    assert any("### Program" in p for p in later)  # earlier programs are shown


def test_the_exploit_only_one_island_preset_mutates_one_child_at_a_time(tmp_path):
    script = Script()
    loop, store, _ = make_pike_loop(tmp_path, "pike-o", script, max_queries=6,
                                    settings={"preset": "mut-npar-1isl-eo"})
    asyncio.run(loop.run())
    assert set(script.roles()) == {"mutate"} and len(store.iterations()) == 6
    saved = store.policy_state("pike-o/db")["db"]
    assert len(saved["islands"]) == 1 and len(saved["islands"][0]["members"]) == 6
    assert all("Your current program" in p and "# Evolution history" not in p for _, p in script.calls)
