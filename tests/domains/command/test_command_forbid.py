"""Forbidden dependencies: found in sources, on link lines, and in built binaries (shared
libraries direct and transitive, symbols, dlopen)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from stratagem.domains.command.forbid import (
    binary_findings,
    elf_files,
    lib_name,
    link_findings,
    source_findings,
)
from stratagem.domains.command.spec import Forbidden

NO_LIBM = Forbidden(libraries=("m",), allow_dlopen=False)
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def test_link_lines_name_a_library_in_every_spelling() -> None:
    for text in ("cc a.c -lm", "cc a.c -l m", "cc -Wl,-lm a.c", "cc a.c /usr/lib/libm.so.6", "cc a.c -l:libm.so"):
        assert link_findings(text, NO_LIBM, "x"), text
    for text in ("cc a.c -lmpi", "cc a.c -lmvec_x", "cc a.c -march=native", "cc -o m a.c"):
        assert not link_findings(text, NO_LIBM, "x"), text


def test_sources_are_scanned_for_patterns_links_and_dlopen() -> None:
    f = Forbidden(libraries=("m",), sources=(r"#\s*include\s*<math\.h>",), allow_dlopen=False)
    found = source_findings({"k.c": "int x;\n#include <math.h>\nvoid *h = dlopen(0, 0);\n", "flags.txt": "-lm"}, f)
    assert any("k.c:2" in x and "math.h" in x for x in found)
    assert any("dlopen" in x for x in found) and any("flags.txt links" in x for x in found)
    assert source_findings({"k.c": "int main(void) { return 0; }"}, f) == []


def test_library_names() -> None:
    assert [lib_name(x) for x in ("libm.so.6", "/x/libcublas.so.12", "libfoo.a", "libc++.so.1")] == \
        ["m", "cublas", "foo", "c++"]


@needs_cc
def test_a_binary_linked_to_a_forbidden_library_is_found(tmp_path) -> None:
    (tmp_path / "a.c").write_text("#include <math.h>\n#include <stdlib.h>\n"
                                  "int main(int c, char **v) { return (int)cbrt(atof(v[0])); }\n")
    subprocess.run(["cc", "-O2", "-o", "prog", "a.c", "-lm"], cwd=tmp_path, check=True)
    (tmp_path / "b.c").write_text("int main(void) { return 0; }\n")
    subprocess.run(["cc", "-O2", "-o", "clean", "b.c"], cwd=tmp_path, check=True)
    found = binary_findings(tmp_path / "prog", Forbidden(libraries=("m",), symbols=("cbrt",)), "prog")
    assert any("needs the forbidden library libm.so" in x for x in found)
    assert any("forbidden symbol cbrt" in x for x in found)
    assert binary_findings(tmp_path / "clean", NO_LIBM, "clean") == []
    assert [p.name for p in elf_files(tmp_path)] == ["clean", "prog"]
