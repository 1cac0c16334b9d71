"""Design templates (`core/template.py`): spaces, constraints by the restricted evaluator,
rendering, and errors that name the file and the line."""

from __future__ import annotations

import pytest

from stratagem.core.template import TemplateError, is_template, parse_template

KERNEL = """\
// a CUDA kernel with a block and a tile
// stratagem: param BLOCK = pow2(16, 256)
// stratagem: param TILE = int(8, 64, step=8)
// stratagem: param LOOP = choice("unrolled", "plain")
// stratagem: require BLOCK % TILE == 0 and BLOCK // TILE <= 8
#define BLOCK {{BLOCK}}
#define TILE {{ TILE }}
const char* loop = "{{LOOP}}";
int a[2][2] = {{1, 2}, {3, 4}};
"""


def test_spaces_constraints_and_points() -> None:
    t = parse_template({"kernel.cu": KERNEL})
    assert [p.name for p in t.params] == ["BLOCK", "TILE", "LOOP"]
    assert t.params[0].values == (16, 32, 64, 128, 256)
    assert t.params[1].values == (8, 16, 24, 32, 40, 48, 56, 64)
    assert t.params[2].values == ("unrolled", "plain")
    assert t.size == 5 * 8 * 2
    points = list(t.points())
    assert points and all(p["BLOCK"] % p["TILE"] == 0 and p["BLOCK"] // p["TILE"] <= 8 for p in points)
    assert {"BLOCK": 16, "TILE": 16, "LOOP": "plain"} in points
    assert {"BLOCK": 256, "TILE": 8, "LOOP": "plain"} not in points  # 256 // 8 = 32 > 8
    assert t.violations({"BLOCK": 64, "TILE": 24, "LOOP": "plain"}) == [t.constraints[0].text]


def test_render_fills_placeholders_and_records_the_point() -> None:
    t = parse_template({"kernel.cu": KERNEL})
    out = t.render({"BLOCK": 64, "TILE": 16, "LOOP": "unrolled"})["kernel.cu"]
    assert "#define BLOCK 64\n#define TILE 16\n" in out
    assert 'const char* loop = "unrolled";' in out
    assert "int a[2][2] = {{1, 2}, {3, 4}};" in out  # braces naming no parameter are left alone
    assert "// stratagem: tuned BLOCK = 64 (of pow2(16, 256))" in out
    assert "// stratagem: required BLOCK % TILE == 0" in out
    assert len(out.splitlines()) == len(KERNEL.splitlines())  # lines keep their numbers
    assert not is_template({"kernel.cu": out})  # a rendered design declares nothing


def test_render_refuses_points_outside_the_space_or_violating_a_constraint() -> None:
    t = parse_template({"kernel.cu": KERNEL})
    with pytest.raises(TemplateError, match="violates"):
        t.render({"BLOCK": 64, "TILE": 24, "LOOP": "plain"})
    with pytest.raises(TemplateError, match="outside its space"):
        t.render({"BLOCK": 48, "TILE": 16, "LOOP": "plain"})
    with pytest.raises(TemplateError, match="missing"):
        t.render({"BLOCK": 64})


def test_python_comments_and_several_files() -> None:
    files = {"candidate.py": "# stratagem: param CHUNK = int(1, 4)\nx = {{CHUNK}}\ny = f'{{z}}'\n",
             "helper.sh": "# stratagem: require CHUNK != 3\necho {{CHUNK}}\n"}
    t = parse_template(files)
    assert [p["CHUNK"] for p in t.points()] == [1, 2, 4]
    out = t.render({"CHUNK": 2})
    assert out["candidate.py"].splitlines()[1:] == ["x = 2", "y = f'{{z}}'"]  # an f-string escape stays
    assert out["helper.sh"].splitlines()[1] == "echo 2"


@pytest.mark.parametrize(("text", "line", "says"), [
    ("x = 1\n# stratagem: param B = pow2(3, 8)\n{{B}}", 2, "powers of two"),
    ("# stratagem: param B = int(4, 2)\n{{B}}", 1, "LO is above HI"),
    ("# stratagem: param B = range(4)\n{{B}}", 1, "unknown space `range(...)`"),
    ("# stratagem: param B = int(1, 2\n{{B}}", 1, "is not a space"),
    ("# stratagem: param B\n{{B}}", 1, "expected `param NAME = SPACE`"),
    ("# stratagem: param B = choice(1, 1)\n{{B}}", 1, "repeats a value"),
    ("# stratagem: param B = choice(x)\n{{B}}", 1, "not a number or a string"),
    ("# stratagem: param B = int(1, 4)\n{{B}}\n# stratagem: param B = int(1, 2)", 3, "declared twice (first at t.py:1)"),
    ("# stratagem: param B = int(1, 4)\n# stratagem: require C > 1\n{{B}}", 2, "C, which is not a declared parameter"),
    ("# stratagem: param B = int(1, 4)\n# stratagem: require __import__('os').system('x')\n{{B}}", 2,
     "Call is not allowed"),
    ("# stratagem: param B = int(1, 4)\n# stratagem: require B.real > 1\n{{B}}", 2, "Attribute is not allowed"),
    ("# stratagem: param B = int(1, 4)\n# stratagem: require [B][0] > 1\n{{B}}", 2, "not allowed"),
    ("# stratagem: param B = int(1, 4)\n# stratagem: require\n{{B}}", 2, "needs a condition"),
    ("# stratagem: param B = int(1, 4)\n# stratagem: require B > 9\n{{B}}", 2, "no point of the space"),
    ("# stratagem: param B = int(1, 4)\nx = {{C}}", 1, "no {{B}} placeholder uses it"),
])
def test_errors_name_the_file_and_the_line(text: str, line: int, says: str) -> None:
    with pytest.raises(TemplateError) as e:
        parse_template({"t.py": text})
    assert e.value.file == "t.py" and e.value.line == line
    assert str(e.value).startswith(f"t.py:{line}: ")
    assert says in str(e.value)


def test_no_declaration_is_not_a_template() -> None:
    assert not is_template({"candidate.py": "x = 1\n"})
    with pytest.raises(TemplateError, match="no parameter is declared"):
        parse_template({"candidate.py": "x = {{B}}\n"})


def test_conditions_never_compute_huge_numbers_or_crash() -> None:
    # a string repeated a billion times is refused (not computed), so no point meets it
    with pytest.raises(TemplateError, match="no point of the space"):
        parse_template({"t.py": "# stratagem: param B = int(0, 3)\n"
                                "# stratagem: require 'x' * 10 ** 9 != ''\n{{B}}"})
    t = parse_template({"t.py": "# stratagem: param B = int(0, 3)\n# stratagem: require 8 % B == 0\n{{B}}"})
    assert [p["B"] for p in t.points()] == [1, 2]  # B = 0: a division by zero, not met
    t = parse_template({"t.py": "# stratagem: param B = int(1, 3)\n"
                                "# stratagem: require B == 1 or B ** 1000 > 0\n{{B}}"})
    assert [p["B"] for p in t.points()] == [1]  # the huge power is refused, not computed
