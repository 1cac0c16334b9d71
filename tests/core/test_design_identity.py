"""Design ids are content hashes; measurements summarise raw samples with inclusive quartiles."""

from __future__ import annotations

import hashlib

import pytest

from stratagem.core.design import Design
from stratagem.core.objective import Measurement
from stratagem.core.paired import quartiles
from stratagem.core.problem import Problem, content_hash
from stratagem.domains.pytorch.domain import MAIN_FILE, candidate_design

SRC = "class ModelNew:\n    pass\n"


def test_design_id_is_a_sha256_hex_of_the_files():
    d = candidate_design(SRC)
    assert len(d.id) == 64 and all(c in "0123456789abcdef" for c in d.id)
    assert d.files == {MAIN_FILE: SRC}


def test_design_id_ignores_parents_and_provenance():
    a = candidate_design(SRC)
    b = candidate_design(SRC, parent_ids=("p1", "p2"), provenance={"role": "coder", "model": "m"})
    assert a.id == b.id


def test_design_id_changes_with_source_and_file_name():
    a = candidate_design(SRC)
    assert candidate_design(SRC + " ").id != a.id
    assert Design(files={"other.py": SRC}).id != a.id


def test_design_id_independent_of_file_order():
    a = Design(files={"candidate.py": "x", "helper.py": "y"})
    b = Design(files={"helper.py": "y", "candidate.py": "x"})
    assert a.id == b.id
    # ...but not of which file holds which text
    assert Design(files={"candidate.py": "y", "helper.py": "x"}).id != a.id


def test_problem_id_is_content_hash_of_source():
    p = Problem(name="a", domain="pytorch", source="x = 1\n", path="/a.py")
    q = Problem(name="b", domain="pytorch", source="x = 1\n", path="/b.py")
    assert p.id == q.id == hashlib.sha256(b"x = 1\n").hexdigest() == content_hash("x = 1\n")


def test_measurement_quartiles_odd():
    m = Measurement.of("runtime", "ms", [5.0, 1.0, 4.0, 2.0, 3.0])
    assert (m.q1, m.median, m.q3) == (2.0, 3.0, 4.0)
    assert m.n == 5
    assert m.samples == (5.0, 1.0, 4.0, 2.0, 3.0)  # raw samples kept as given
    assert (m.name, m.unit) == ("runtime", "ms")


def test_measurement_quartiles_even_inclusive_method():
    m = Measurement.of("runtime", "ms", [4.0, 3.0, 2.0, 1.0])
    assert m.q1 == pytest.approx(1.75)
    assert m.median == pytest.approx(2.5)
    assert m.q3 == pytest.approx(3.25)


def test_single_sample_and_empty():
    assert quartiles([7.5]) == (7.5, 7.5, 7.5)
    m = Measurement.of("x", "ms", [7.5])
    assert (m.q1, m.median, m.q3) == (7.5, 7.5, 7.5)
    with pytest.raises(ValueError):
        Measurement.of("x", "ms", [])
