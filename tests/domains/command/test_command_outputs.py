"""Reading what a run printed: its reported time in ms, its output numbers, and the atol/rtol
comparison with NaN and infinities where the reference has them."""

from __future__ import annotations

import math

from stratagem.domains.command.outputs import agree, flatten, reported_ms, text_numbers
from stratagem.domains.command.spec import Comparison, ObjectiveSpec


def test_reported_times_by_json_line_and_regex_in_their_unit() -> None:
    out = 'warming up\n{"time_ms": 3.0}\nnoise {"x": 1\n{"time_ms": 2.5, "n": 4}\n'
    assert reported_ms(out, ObjectiveSpec("json", key="time_ms")) == 2.5  # the last line with the key
    assert reported_ms("kernel: 0.004 s\nkernel: 0.002 s\n", ObjectiveSpec("regex", regex=r"kernel: ([\d.]+) s",
                                                                            unit="s")) == 2.0
    assert reported_ms("t=1500 us", ObjectiveSpec("regex", regex=r"t=(\d+) us", unit="us")) == 1.5
    assert reported_ms("nothing", ObjectiveSpec("json", key="time_ms")) is None
    assert reported_ms('{"time_ms": -1}', ObjectiveSpec("json", key="time_ms")) is None
    assert reported_ms('{"time_ms": "NaN"}', ObjectiveSpec("json", key="time_ms")) is None


def test_output_numbers_from_json_and_text() -> None:
    assert flatten({"b": [1, [2, 3]], "a": 0.5}) == [0.5, 1.0, 2.0, 3.0]
    assert text_numbers("1 2.5e3\n-3,4;5\n") == [1.0, 2500.0, -3.0, 4.0, 5.0]
    assert text_numbers("[1, 2, [3]]") == [1.0, 2.0, 3.0]


def test_agreement_within_tolerance_and_special_values() -> None:
    cmp = Comparison("file", file="out.txt", atol=1e-6, rtol=1e-3)
    nan, inf = math.nan, math.inf
    ok = agree([1.0, 1000.0, nan, inf], [1.0000005, 1000.9, nan, inf], cmp)
    assert ok.ok and ok.details["max_abs_err"] > 0.8
    bad = agree([1.0, 2.0, 3.0], [1.0, 2.1, 3.0], cmp)
    assert not bad.ok and bad.details["mismatched"] == 1 and "index 1" in bad.reason
    assert not agree([nan], [1.0], cmp).ok and not agree([1.0], [nan], cmp).ok
    assert not agree([inf], [-inf], cmp).ok and not agree([1.0, 2.0], [1.0], cmp).ok
