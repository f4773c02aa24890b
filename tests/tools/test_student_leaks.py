"""The student version holds no solution line, and its tests skip what needs an unfilled exercise.

No solution line: every distinctive line of every solution region is looked for in every file the student
version ships (tests, lab, package, docs, results, notebooks: code and markdown cells).

A region's distinctive lines are its code lines but the trivial ones: blank lines, comments, a `return` of
names only (`return acc`), and every line that also occurs outside the regions of solutions/ or anywhere in
exercises/ (those ship anyway), whole or as part of a line. Lines compare with canonical spacing and without
trailing comments; a line is found where it stands inside a shipped line between identifier boundaries (so
inside prose and backticks too).

KNOWN holds what ships knowingly, each line named by a digest (this file ships too, so it quotes none): the
index and mask idioms the chapters' worked examples share with the solutions, and chapter 01_triton_basics's vector
scale, which has the shape of the first exercise on purpose. An entry whose line is no longer found fails too, so
the list only shrinks; anything else found fails, naming the file, the line, the region and the line's digest.

Skips: a chapter cell that stops on an exercise not filled in yet is skipped under nbval, naming it
(notebooks/conftest.py), as a test is (tests/conftest.py).
"""
import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from helpers import filled
from tritonllm_course import kernels, regions, student_version
from tritonllm_course.notebook import runs_exercises_only, unfilled_exercise

ROOT = Path(__file__).resolve().parents[2]

# {shipped file: (why it ships although it holds them, {`_digest` of a region line: the region it is from})}.
# Digests, not the lines: this file ships in the student version too. Idioms are left (and chapter 01_triton_basics's
# first pattern): a chapter's worked example shares a line with a solution where the line is the pattern itself (a
# block's indices, its bounds mask, the running max carried to the next block), never a line of a solution's
# own logic. What a later chapter builds on is no shipped helper: it stays in its family's region
# (`kernels.jit_function`).
INDEX = ("the chapter's own small kernel opens with a block's indices and their bounds mask "
         "(`program_id * BLOCK + arange`, `< n`), the idiom every tiled kernel starts with")
RUNNING_MAX = "the running max carried to the next block: the one line every online softmax shares"
KNOWN = {
    "notebooks/01_triton_basics.ipynb": (
        "the worked example (a vector scale) has the shape of the first exercise (vector add) on purpose", {
        "2c428d810eca": "flash_attention.py:76", "8be97e5c9712": "vector_add.py:16",
        "ed2e25855150": "vector_add.py:17", "ec0648205b28": "vector_add.py:19"}),
    "notebooks/04_rmsnorm.ipynb": (INDEX, {"144d05ce24b7": "norm_fusion.py:59", "fc07bd76e039": "norm_fusion.py:60"}),
    "notebooks/05_projections.ipynb": (
        "the walk along K's column indices (`k0 + cols`), shown on a row sum of squares rather than the GEMV", {
        "d8edba3dee42": "layer_fusion.py:113"}),
    "notebooks/06_rope.ipynb": (INDEX, {"1587a23474f3": "deltanet_gates.py:39"}),
    "notebooks/08_attention.ipynb": (INDEX + "; " + RUNNING_MAX + " (the chapter's numpy version)", {
        "2ec68231055f": "attention.py:120", "fcb4e9038bd2": "attention.py:55", "55c107c59a8d": "attention.py:56"}),
    "notebooks/10_mlp.ipynb": (INDEX, {"03f741551ae2": "swiglu.py:31"}),
    "notebooks/14_gates_l2norm.ipynb": (INDEX, {"1587a23474f3": "deltanet_gates.py:39",
        "3f21be815596": "deltanet_gates.py:40", "868723863314": "deltanet_gates.py:57"}),
    "notebooks/15_delta_rule.ipynb": ("the loop over the tokens of the chapter's PyTorch recurrence", {
        "a3cb0d95709a": "delta_rule.py:73"}),
    "notebooks/16_delta_rule_chunked.ipynb": ("the row and column index grids of a [C, C] triangle", {
        "ba8f3ad37fd6": "delta_rule.py:151"}),
    "notebooks/23_flash_attention.ipynb": (
        "a key block's indices; " + RUNNING_MAX + " (a one-row kernel with the rescale as a switch)", {
        "2ec68231055f": "attention.py:120", "80ef6ab8c6c4": "attention.py:212"}),
    "notebooks/30_troubleshooting.ipynb": (INDEX, {"1587a23474f3": "deltanet_gates.py:39",
        "3f21be815596": "deltanet_gates.py:40"}),
    "tests/kernels/test_flash_attention.py": ("the test's own online-softmax loop: " + RUNNING_MAX, {
        "2ec68231055f": "attention.py:120"}),
}


RETURN_OF_NAMES = re.compile(r"return(\s+[\w\s,]*)?")


def _uncommented(line: str) -> str:
    """The line without its trailing comment (a `#` outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[:i]
    return line


def _canonical(text: str) -> str:
    """Spacing made canonical: no space around punctuation, one between words (`x [0]+ y` -> `x[0]+y`)."""
    return re.sub(r" ?([^\w\s]) ?", r"\1", re.sub(r"\s+", " ", text.strip()))


def _code(line: str) -> str:
    return _canonical(_uncommented(line))


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()[:12]


def _trivial(line: str) -> bool:
    text = _uncommented(line).strip()
    return not text or bool(RETURN_OF_NAMES.fullmatch(text))


def distinctive_lines(solutions: Path, exercises: Path) -> dict[str, list[tuple[str, int, str]]]:
    """{a distinctive line's code (`_code`): [(solution file, 1-based line, the line as written)]}."""
    outside, inside = set(), defaultdict(list)
    for path in sorted(solutions.glob("*.py")):
        text = path.read_text()
        lines, covered = text.splitlines(), set()
        for region in regions.regions(text, str(path)):
            covered.update(range(region.begin, region.end + 1))
            start = region.begin + 1 + region.more
            for i, line in enumerate(region.code, start):
                if not _trivial(line):
                    inside[_code(line)].append((path.name, i + 1, line.strip()))
        outside.update(_code(line) for i, line in enumerate(lines) if i not in covered)
    for path in sorted(exercises.glob("*.py")):
        outside.update(_code(line) for line in path.read_text().splitlines())
    return {code: where for code, where in inside.items()
            if not any(code in line and _found(code, line) for line in outside)}


def shipped_lines(path: Path):
    """(where, its text made canonical) for every line of a shipped file: code without its comments, a
    notebook's cells one by one (counted from 1); nothing of a binary file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return                                     # binary: a plot, an archive
    if path.suffix == ".ipynb":
        for n, cell in enumerate(json.loads(text)["cells"], 1):
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            for i, line in enumerate(source.splitlines(), 1):
                yield f"cell {n} line {i}", _code(line) if cell["cell_type"] == "code" else _canonical(line)
        return
    for i, line in enumerate(text.splitlines(), 1):
        yield f"line {i}", _code(line) if path.suffix == ".py" else _canonical(line)


def _found(code: str, line: str) -> bool:
    """`code` stands in `line` between identifier boundaries."""
    start = line.find(code)
    while start >= 0:
        before = line[start - 1] if start else " "
        after = line[start + len(code)] if start + len(code) < len(line) else " "
        following = line[start + len(code) + 1:start + len(code) + 2] or " "
        if not (before.isalnum() or before in "_.") and not (after.isalnum() or after == "_") \
                and not (after == "." and (following.isalnum() or following == "_")):   # `x = f(a).to(...)`
            return True
        start = line.find(code, start + 1)
    return False


def leaks(tree: Path, distinct: dict) -> dict[tuple[str, str], list[str]]:
    """{(shipped file, a distinctive line's code): [where in the file]} for every one found."""
    found = defaultdict(list)
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        rel = path.relative_to(tree).as_posix()
        for where, line in shipped_lines(path):
            for code in distinct:
                if code in line and _found(code, line):
                    found[rel, code].append(where)
    return found


@pytest.fixture(scope="module")
def student(tmp_path_factory) -> Path:
    """The student version, as `student-copy` writes it."""
    dest, _ = student_version.copy(tmp_path_factory.mktemp("leaks") / "student")
    return dest


@pytest.mark.needs_solutions   # the solutions are what it looks for
def test_the_student_version_holds_no_solution_line(student):
    distinct = distinctive_lines(ROOT / "solutions", student / "exercises")
    assert len(distinct) > 100        # the regions were read: hundreds of lines, not a parsing slip
    found = leaks(student, distinct)
    known = {(file, digest) for file, (_, digests) in KNOWN.items() for digest in digests}
    unknown = [f"{file} {', '.join(spots[:3])}: {distinct[code][0][2]!r} (solutions/{distinct[code][0][0]}:"
               f"{distinct[code][0][1]}; digest {_digest(code)})" for (file, code), spots in sorted(found.items())
               if (file, _digest(code)) not in known]
    assert not unknown, f"{len(unknown)} solution lines in the student version:\n" + "\n".join(unknown)
    gone = [f"{file}: {digest} ({KNOWN[file][1][digest]})"
            for file, digest in sorted(known - {(file, _digest(code)) for file, code in found})]
    assert not gone, "KNOWN lists lines no longer in the student version (take them out):\n" + "\n".join(gone)


@pytest.mark.needs_solutions
def test_what_gives_a_solution_away_is_withheld(student):
    for path in ("solutions", "tests/planted/planted.py", "tests/planted/bugs_attention.py",
                 "tests/planted/test_planted_bugs.py", "lab/attention_launch_probe.py", "lab/common.py",
                 "tests/lab/test_lab.py", "tests/planted", "tests/lab"):
        assert student_version.withheld(path), path
        assert not (student / path).exists(), path
    for path in ("lab/README.md", "lab/results", "tests/conftest.py", "tests/helpers.py",
                 "tests/kernels/test_rope.py", "exercises/rmsnorm.py", "notebooks"):
        assert not student_version.withheld(path), path
        assert (student / path).exists(), path


def test_no_shipped_test_imports_what_is_withheld():
    """A test that imports a withheld module (planted, a bugs_ table, a lab probe) would stop the student
    version's suite at collection: it is withheld too."""
    for path in sorted((ROOT / "tests").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if student_version.withheld(rel):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for name in names:
                module = [m for m in student_version.module_files(name).split() if (ROOT / m).is_file()]
                assert not any(student_version.withheld(m) for m in module), \
                    f"{rel}:{node.lineno} imports {name}, which the student version leaves out"


def test_a_failure_naming_a_withheld_file_names_it():
    """What tests/conftest.py skips a failed test of a student version for: the withheld file it names."""
    named = student_version.withheld_named
    assert named("planted: tests/planted/test_planted_bugs.py does not exist", ROOT) == \
        "tests/planted/test_planted_bugs.py"
    assert named(student_version.module_files("planted") + "No module named 'planted'", ROOT) == \
        "tests/planted/planted.py"
    assert named(f"cannot open {ROOT}/lab/common.py", ROOT) == "lab/common.py"
    assert named(f"{ROOT}/solutions/rope.py differs", ROOT) == "solutions/rope.py"
    assert named("tests/kernels/test_rope.py:3: 0.5 != 0.25", ROOT) is None             # shipped: a real failure
    assert named("/elsewhere/lab/common.py is missing", ROOT) is None          # not this course's
    assert named("no file named at all", ROOT) is None


@pytest.mark.needs_solutions
def test_the_student_branch_leaves_out_what_the_copy_leaves_out(tmp_path, monkeypatch):
    """Both forms follow `withheld`: the branch's tree, made from a commit of the course, holds none of it."""
    repo = tmp_path / "course"
    run = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, text=True, check=True)
    for rel in filter(None, run.stdout.split("\0")):
        if (ROOT / rel).is_file():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / rel, repo / rel)
    for name in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(name, "Course")
    for name in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(name, "course@example.org")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "the course"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    committed = subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True, text=True).stdout.split()
    assert any(student_version.withheld(f) and not f.startswith("solutions/") for f in committed)
    student_version.commit_branch("student", root=repo)
    tree = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only", "student"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert [f for f in tree if student_version.withheld(f)] == []
    assert sorted(tree) == sorted(f for f in committed if not student_version.withheld(f))


def test_the_check_finds_a_line_planted_in_any_kind_of_file(tmp_path):
    """The scan itself: a region's line copied into a module, a notebook's markdown and prose is found in
    each (spacing and a trailing comment changed); a line also outside the regions, whole or in part, a
    return of names and a line that only starts another statement are not."""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    (tmp_path / "solutions" / "k.py").write_text(
        "w = g(x) + 1\n\n\ndef f(x):\n    # BEGIN SOLUTION: a hint\n    w = g(x)\n    y = x * 2 + 1  # y\n"
        "    t = h(0)\n    return y, t\n    # END SOLUTION\n")
    (tmp_path / "exercises" / "k.py").write_text(regions.make_exercise(
        (tmp_path / "solutions" / "k.py").read_text(), "k"))
    distinct = distinctive_lines(tmp_path / "solutions", tmp_path / "exercises")
    assert sorted(distinct) == ["t=h(0)", "y=x*2+1"]
    assert distinct["y=x*2+1"] == [("k.py", 7, "y = x * 2 + 1  # y")]
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.py").write_text("z = 0\ny  =  x*2 + 1   # the same line\nt = h(0).to(int)\n")
    cell = {"cell_type": "markdown", "source": ["Use `y = x * 2 + 1`."]}
    (tree / "b.ipynb").write_text(json.dumps({"cells": [cell]}))
    (tree / "c.md").write_text("yy = x * 2 + 1 is another line,\nbut y = x*2+1 is the one\n")
    (tree / "d.md").write_text("yy = x * 2 + 1 and y = x * 2 + 10 are others, as is st = h(0)\n")
    assert sorted(leaks(tree, distinct)) == [("a.py", "y=x*2+1"), ("b.ipynb", "y=x*2+1"), ("c.md", "y=x*2+1")]


def _notebook(path: Path, *cells: str) -> None:
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None, "outputs": [], "source": src}
        for i, src in enumerate(cells)]}))


def test_a_chapter_cell_needing_an_unfilled_exercise_is_skipped_naming_it(tmp_path):
    """nbval in a student version (no solutions/): the cell that loads an unfilled exercise, or needs a file
    the student version leaves out (a module, a solution), and the later cell that fails for want of its
    result are skipped, naming what they lack; a cell that works passes; a chapter failing for another
    reason fails."""
    course = tmp_path / "course"
    (course / "exercises").mkdir(parents=True)
    (course / "notebooks").mkdir()
    (course / "exercises" / "vector_add.py").write_text(regions.make_exercise(
        (ROOT / "exercises" / "vector_add.py").read_text().replace("EXERCISE", "SOLUTION"), "vector_add"))
    shutil.copy(ROOT / "notebooks" / "conftest.py", course / "notebooks" / "conftest.py")
    _notebook(course / "notebooks" / "a.ipynb", "from tritonllm_course import kernels",
              'add = kernels.load("vector_add").module.add', "add", "print(6 * 7)")
    _notebook(course / "notebooks" / "b.ipynb", "1 / 0")
    _notebook(course / "notebooks" / "c.ipynb", "import planted", "planted.plant")
    _notebook(course / "notebooks" / "d.ipynb", "from tritonllm_course import kernels",
              'kernels.load("vector_add", "solutions")')
    env = {k: v for k, v in os.environ.items() if k not in ("TRITONLLM_KERNELS", "PYTEST_ADDOPTS")}
    env.update(TRITONLLM_COURSE_ROOT=str(course), PYTHONDONTWRITEBYTECODE="1")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider", "--nbval-lax",
                          "notebooks"], cwd=course, env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 1 and "1 failed, 3 passed, 5 skipped" in out, out[-3000:]
    assert "FAILED notebooks/b.ipynb::Cell 0" in out, out[-3000:]
    skips = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert len(skips) == 5, skips
    assert "cell 1 needs an exercise not filled in yet: exercise vector_add.py is not implemented yet" in skips[0]
    assert "cell 2 follows cells that cannot run here: vector_add.py unfilled (cell 1)" in skips[1]
    assert "NameError: name 'add' is not defined" in skips[1], skips
    assert "cell 0 needs tests/planted/planted.py, which the student version leaves out" in skips[2], skips
    assert "cell 1 follows cells that cannot run here: tests/planted/planted.py left out (cell 0)" in skips[3], skips
    assert "cell 1 needs solutions/vector_add.py, which the student version leaves out" in skips[4], skips


def test_only_an_unfilled_exercise_skips_and_only_where_the_exercises_run(monkeypatch, course_copy):
    stub = 'exercise rope.py, rope: not implemented yet'
    assert unfilled_exercise("NotImplementedYet", "exercise rope.py is not implemented yet") is not None
    assert unfilled_exercise("NotImplementedError", stub) == stub
    assert unfilled_exercise("NotImplementedError", "a kernel's own refusal") is None
    assert unfilled_exercise("NameError", "name 'rope' is not defined") is None
    monkeypatch.setenv("TRITONLLM_KERNELS", "solutions")
    assert not runs_exercises_only()           # the full course: an unfilled exercise in a chapter fails
    monkeypatch.setenv("TRITONLLM_KERNELS", "exercises")
    assert runs_exercises_only()
    monkeypatch.setenv("TRITONLLM_KERNELS", "auto")
    (course_copy / "solutions").rmdir()
    assert runs_exercises_only()               # a student version: nothing to fall back on


@pytest.mark.needs_solutions
def test_a_later_family_builds_on_the_learners_function_or_names_the_exercise(course_copy, monkeypatch):
    """What a chapter has the learner write ships in no shared helper: a later family takes it from the
    learner's module (`kernels.jit_function`). A solution builds on the solution; an exercise on the learner's
    function once its region is filled in, else on the solution's; with no solutions/ (a student version)
    an unfilled one stops the later family with NotImplementedYet naming the exercise to fill in first."""
    for family in ("linear", "splitk"):
        text = (ROOT / "solutions" / f"{family}.py").read_text()
        (course_copy / "solutions" / f"{family}.py").write_text(text)
        (course_copy / "exercises" / f"{family}.py").write_text(regions.make_exercise(text, family))
    monkeypatch.setenv("TRITONLLM_KERNELS", "auto")
    solution = kernels.load("linear", "solutions").module.gemv_rows
    assert kernels.load("splitk", "solutions").module.gemv_rows is solution
    splitk, linear = course_copy / "exercises" / "splitk.py", course_copy / "exercises" / "linear.py"
    splitk.write_text(filled(splitk.read_text(), (ROOT / "solutions" / "splitk.py").read_text()))
    assert kernels.load("splitk").module.gemv_rows is solution                 # linear.py not filled in yet
    unfilled = linear.read_text()
    linear.write_text(filled(unfilled, (ROOT / "solutions" / "linear.py").read_text()))
    mine = kernels.load("splitk").module.gemv_rows
    assert mine is not solution and Path(mine.fn.__code__.co_filename) == linear
    linear.write_text(unfilled)
    shutil.rmtree(course_copy / "solutions")
    with pytest.raises(kernels.NotImplementedYet, match=r"exercise linear\.py is not implemented yet .*: "
                                                        r"exercises/splitk\.py builds on its gemv_rows"):
        kernels.load("splitk")
