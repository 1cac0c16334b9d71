"""The command domain through the real evaluator and sandbox on the CPU: the example's designs
get the verdicts they deserve, and each integrity check catches its cheat."""

from __future__ import annotations

from command_fixtures import SMALL_TOML, example_design, make_problem

REFERENCE_KERNEL = (
    "void window_sums(const double *x, long n, long w, double *y) {\n"
    "    for (long i = 0; i + w <= n; i++) {\n"
    "        double s = 0.0;\n"
    "        for (long j = 0; j < w; j++) s += x[i + j];\n"
    "        y[i] = s;\n"
    "    }\n"
    "}\n"
)


def failure(ev, stage):  # type: ignore[no-untyped-def]
    r = ev.verdict.result(stage)
    assert r is not None and r.outcome == "failed", ev.verdict.report()
    return r


def test_the_honest_faster_design_is_valid_with_a_paired_speedup(small_problem, evaluate) -> None:
    ev = evaluate(small_problem, example_design("fast"))
    assert ev.verdict.status == "valid", ev.verdict.report()
    assert [r.name for r in ev.verdict.results] == ["static_checks", "build", "correctness", "timing"]
    assert ev.speedup is not None and ev.speedup > 2, ev.summary()["speedups"]
    timing = ev.verdict.result("timing").details
    # pairs of single runs, 6 at the first look and at most pairs x runs = 12
    assert timing["speedup"]["pairs"] in (6, 12) and len(timing["runtime"]["samples_ms"]) == timing["pairs"]
    assert timing["planned_pairs"] == 12 and (timing["stop"] == "settled") == (timing["pairs"] == 6)
    assert ev.runtime_ms is not None and ev.reference_paired_ms is not None
    trials = ev.verdict.result("correctness").details["trials"]
    assert len(trials) == 2 and all(3000 <= t["sizes"]["n"] <= 6000 and t["sizes"]["w"] % 2 == 0 for t in trials)
    assert len(ev.seeds) == 3  # two correctness trials and the timing input, drawn in the parent


def test_a_wrong_design_fails_correctness(small_problem, evaluate) -> None:
    ev = evaluate(small_problem, example_design("wrong"))
    assert ev.verdict.status == "invalid"
    r = failure(ev, "correctness")
    assert r.kind == "wrong_output" and "differ beyond atol" in r.reason


def test_a_design_linking_a_forbidden_library_is_rejected(small_problem, evaluate) -> None:
    ev = evaluate(small_problem, example_design("forbidden"))
    assert ev.verdict.status == "invalid"
    r = failure(ev, "static_checks")
    assert r.kind == "rejected" and "forbidden library 'm'" in r.reason


def test_a_forbidden_library_reached_by_dlopen_is_found_in_the_binary(small_problem, evaluate) -> None:
    # no `dlopen` and no `libm.so` in the source's text: only the built binary shows them
    kernel = (
        "#define CAT(a, b) a##b\n"
        "void *CAT(dl, open)(const char *, int);\n"
        "void *CAT(dl, sym)(void *, const char *);\n"
        + REFERENCE_KERNEL.replace("void window_sums", "static void slow")
        + "void window_sums(const double *x, long n, long w, double *y) {\n"
        "    void *h = CAT(dl, open)(\"lib\" \"m.so.6\", 2);\n"
        "    (void)h;\n"
        "    slow(x, n, w, y);\n"
        "}\n"
    )
    ev = evaluate(small_problem, {"kernel.c": kernel})
    r = failure(ev, "build")
    assert r.kind == "rejected", r.reason
    found = " | ".join(r.details["findings"])
    assert "imports dlopen" in found and "libm.so" in found


def test_hard_coded_outputs_fail_on_hidden_inputs(small_problem, evaluate) -> None:
    # computes the right answer for the visible example's inputs (seed 1, the given sizes),
    # whatever it is given: the hidden seed and sizes expose it
    kernel = (
        "#include <stdint.h>\n"
        "void window_sums(const double *x, long n, long w, double *y) {\n"
        "    uint64_t s = 1ull * 2654435761u + 88172645463325252ull;\n"
        "    static double v[6000];\n"
        "    for (long i = 0; i < 6000; i++) {\n"
        "        s ^= s << 13; s ^= s >> 7; s ^= s << 17;\n"
        "        v[i] = (double)(s >> 11) / 9007199254740992.0;\n"
        "    }\n"
        "    for (long i = 0; i + w <= n; i++) {\n"
        "        double t = 0.0;\n"
        "        for (long j = 0; j < w; j++) t += v[i + j];\n"
        "        y[i] = t;\n"
        "    }\n"
        "}\n"
    )
    ev = evaluate(small_problem, {"kernel.c": kernel})
    r = failure(ev, "correctness")
    assert r.kind == "wrong_output"


def test_a_design_that_edits_a_fixed_file_in_its_build_is_rejected(tmp_path, evaluate) -> None:
    toml = SMALL_TOML.replace('editable = ["kernel.c", "flags.txt"]', 'editable = ["kernel.c", "build.sh"]').replace(
        'command = "cc -O2 -o prog main.c kernel.c $(cat flags.txt)"', 'command = "sh build.sh"')
    problem = make_problem(tmp_path / "p", toml, {"reference/build.sh": "cc -O2 -o prog main.c kernel.c\n"})
    # the harness's main.c made to report a tenth of the kernel's time
    cheat = ("sed -i 's|(t1.tv_nsec - t0.tv_nsec) / 1e6|(t1.tv_nsec - t0.tv_nsec) / 1e7|' main.c\n"
             "cc -O2 -o prog main.c kernel.c\n")
    ev = evaluate(problem, {"kernel.c": REFERENCE_KERNEL, "build.sh": cheat})
    r = failure(ev, "build")
    assert r.kind == "rejected" and "fixed file main.c" in r.reason


def test_a_faked_time_line_is_rejected_against_the_harness_clock(small_problem, evaluate) -> None:
    # the harness prints the kernel's time; a destructor prints a smaller one after it (the
    # last JSON line with the key is read), while the kernel really spins for 80 ms
    kernel = (
        "#define _POSIX_C_SOURCE 199309L\n#include <stdio.h>\n#include <time.h>\n"
        "static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); "
        "return t.tv_sec + t.tv_nsec / 1e9; }\n"
        "__attribute__((destructor)) static void fake(void) { printf(\"{\\\"time_ms\\\": 0.001}\\n\"); }\n"
        + REFERENCE_KERNEL.replace("void window_sums", "static void slow")
        + "void window_sums(const double *x, long n, long w, double *y) {\n"
        "    double t0 = now();\n    while (now() - t0 < 0.08) {}\n    slow(x, n, w, y);\n}\n"
    )
    ev = evaluate(small_problem, {"kernel.c": kernel})
    r = failure(ev, "timing")
    assert r.kind == "rejected" and "beyond the time they reported" in r.reason, r.reason
    assert r.details["clock"]["design_excess_outside_ms"] > 50


def test_a_time_longer_than_the_run_is_rejected(small_problem, evaluate) -> None:
    kernel = ("#include <stdio.h>\n"
              "__attribute__((destructor)) static void fake(void) { printf(\"{\\\"time_ms\\\": 90000}\\n\"); }\n"
              + REFERENCE_KERNEL)
    ev = evaluate(small_problem, {"kernel.c": kernel})
    r = failure(ev, "timing")
    assert r.kind == "rejected" and "the harness measured" in r.reason


def test_an_early_exit_from_a_constructor_leaves_no_output(small_problem, evaluate) -> None:
    # exits 0 before main runs: no output file (a stale one from an earlier run is removed first)
    kernel = "#include <stdlib.h>\n__attribute__((constructor)) static void quit(void) { exit(0); }\n" + REFERENCE_KERNEL
    ev = evaluate(small_problem, {"kernel.c": kernel})
    r = failure(ev, "correctness")
    assert r.kind == "malformed" and "wrote no output file" in r.reason


def test_a_design_with_a_file_it_may_not_change_is_rejected(small_problem, evaluate) -> None:
    ev = evaluate(small_problem, {"kernel.c": REFERENCE_KERNEL, "main.c": "int main(void) { return 0; }\n"})
    r = failure(ev, "static_checks")
    assert r.kind == "rejected" and "main.c" in r.reason


def test_a_build_error_is_a_compile_error(small_problem, evaluate) -> None:
    ev = evaluate(small_problem, {"kernel.c": "this is not C\n"})
    r = failure(ev, "build")
    assert r.kind == "compile_error" and "the design's build exited" in r.reason


CHECKED_TOML = """
[files]
editable = ["kernel.c"]
fixed = ["main.c", "check.sh"]

[build]
command = "cc -O2 -o prog main.c kernel.c"

[run]
command = "./prog {seed} {n} {w}"
timeout_s = 10

[check]
command = "sh check.sh {reference} {design}"
timeout_s = 10

[inputs]
trials = 1
sizes = { n = [2000, 3000], w = [8, 32] }

[compare]
mode = "check"

[objective]
source = "clock"

[timing]
pairs = 6
runs = 1
warmup = 0
"""


def test_the_problems_own_check_and_the_harness_clock(tmp_path, evaluate) -> None:
    check = "cmp -s \"$1/out.txt\" \"$2/out.txt\"\n"
    problem = make_problem(tmp_path / "checked", CHECKED_TOML, {"check.sh": check})
    (problem / "reference" / "flags.txt").unlink()
    ev = evaluate(problem, {"kernel.c": REFERENCE_KERNEL.replace("s += x[i + j]", "s = s + x[i + j]")})
    assert ev.verdict.status == "valid", ev.verdict.report()
    assert ev.verdict.result("timing").details["objective_source"] == "clock"
    wrong = example_design("wrong")["kernel.c"]
    ev = evaluate(problem, {"kernel.c": wrong})
    r = failure(ev, "correctness")
    assert r.kind == "wrong_output" and "check command rejected" in r.reason


def test_a_design_finds_no_reference_output_to_copy(small_problem, evaluate) -> None:
    # copies the reference's out.txt for the same inputs when it can find it: the design runs
    # before the reference on each correctness input, and the reference's file is gone after it
    kernel = (
        "#include <stdio.h>\n"
        "void window_sums(const double *x, long n, long w, double *y) {\n"
        "    FILE *f = fopen(\"../reference/out.txt\", \"r\");\n"
        "    for (long i = 0; i + w <= n; i++) y[i] = 0.0;\n"
        "    if (!f) return;\n"
        "    for (long i = 0; i + w <= n && fscanf(f, \"%lf\", &y[i]) == 1; i++) {}\n"
        "    fclose(f);\n"
        "}\n"
    )
    ev = evaluate(small_problem, {"kernel.c": kernel})
    r = failure(ev, "correctness")
    assert r.kind == "wrong_output"


def test_a_design_that_touches_the_references_build_is_rejected(small_problem, evaluate) -> None:
    # slows the reference down by replacing its program with one that sleeps first
    kernel = (
        "#include <stdio.h>\n#include <stdlib.h>\n"
        "__attribute__((constructor)) static void swap(void) {\n"
        "    FILE *f = fopen(\"../reference/prog\", \"ab\");\n"
        "    if (f) { fputc(0, f); fclose(f); }\n"
        "}\n" + REFERENCE_KERNEL
    )
    ev = evaluate(small_problem, {"kernel.c": kernel})
    r = failure(ev, "correctness")
    assert r.kind == "rejected" and "reference's file prog" in r.reason


def test_the_examples_run_time_loading_design_is_rejected_by_its_binary(small_problem, evaluate) -> None:
    ev = evaluate(small_problem, example_design("dlopen"))
    assert ev.verdict.result("static_checks").outcome == "passed"  # its source names neither
    r = failure(ev, "build")
    assert r.kind == "rejected" and any("imports dlopen" in f for f in r.details["findings"])


WORK = '\n[work]\nbytes = "8 * n"\npeak_gbps = {gbps}\n'


def test_a_time_under_the_declared_floor_is_rejected(tmp_path, evaluate) -> None:
    # the input's bytes at 100 GB/s: 0.5 us at most here; a destructor's 0.01 us line is under it
    # (and the 0.3 ms it hides from its time is far inside the clock check's allowance)
    problem = make_problem(tmp_path / "p", SMALL_TOML + WORK.format(gbps=100))
    kernel = ("#include <stdio.h>\n"
              "__attribute__((destructor)) static void fake(void) { printf(\"{\\\"time_ms\\\": 0.00001}\\n\"); }\n"
              + REFERENCE_KERNEL)
    ev = evaluate(problem, {"kernel.c": kernel})
    r = failure(ev, "timing")
    assert r.kind == "rejected" and "speed-of-light floor" in r.reason, r.reason
    ev = evaluate(problem, example_design("fast"))
    assert ev.verdict.status == "valid", ev.verdict.report()
    floor = ev.verdict.result("timing").details["floor"]
    assert floor["bytes"] == 8 * ev.verdict.result("timing").details["sizes"]["n"] and floor["floor_ms"] > 0


def test_a_reference_under_its_declared_floor_is_a_problem_error(tmp_path, evaluate) -> None:
    problem = make_problem(tmp_path / "p", SMALL_TOML + WORK.format(gbps=1e-6))
    ev = evaluate(problem, example_design("fast"))
    r = failure(ev, "timing")
    assert r.kind == "problem_error" and "[work] is wrong" in r.reason
