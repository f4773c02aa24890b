"""The package as a house: every module of `tritonllm_course` on one floor, and imports only flow down.

    kernels and helpers  the kernels' references and slots, the checks, the runtime, the weights, the files
    model                the reference model, its generation loop, the kernel swap and the demo weights
    engine               the plan, the forward arithmetic, the engine (graphs, streams, the API)
    measurement          the benchmarks, the byte model, the traces, the profiler, the ladder
    tools                the command line, the notebooks' and student version's tools, the package's facade

The imports are read from the source (ast), those inside functions included: a module imports from its own
floor or the ones below it, never from above, and no modules import each other in a circle. A failure names
the file, the line and the import. The engine's files stay short enough to read in one sitting
(`ENGINE_MAX_LINES`). CONTRIBUTING.md's map of the kernel families is checked against the slots and files.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "tritonllm_course"
ENGINE_MAX_LINES = 500

# floor -> the modules and packages on it (a package: every module under it), bottom floor first
FLOORS = {
    "kernels and helpers": ("checking", "config", "exercise_files", "figures", "hf_compat", "kernels", "lowering",
                            "memcheck", "reference", "regions", "runtime", "safe_files", "slots", "tokenizer",
                            "tma_gemm", "triton_helpers", "validate", "weights"),
    "model": ("demo", "generation", "model", "swap"),
    "engine": ("engine",),
    "measurement": ("ladder", "measure"),
    "tools": ("", "cli", "colab", "generate_command", "notebook", "notebooks_tools", "pytest_faillog",
              "student_version", "targets"),
}


def modules() -> dict[str, Path]:
    """{dotted name relative to the package ("" for the package itself, "engine" for its __init__): file}"""
    out = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT / PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def floor_of(name: str) -> int | None:
    """The floor (0 at the bottom) of a module: the longest entry of `FLOORS` it is, or lies under."""
    best = None
    for level, entries in enumerate(FLOORS.values()):
        for entry in entries:
            if name == entry or (entry and name.startswith(entry + ".")):
                if best is None or len(entry) > best[1]:
                    best = (level, len(entry))
    return None if best is None else best[0]


def _nodes(tree: ast.Module):
    """Every node of the tree, each with whether it lies inside a function."""
    todo = [(node, False) for node in tree.body]
    while todo:
        node, inside = todo.pop()
        yield node, inside
        inner = inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        todo += [(child, inner) for child in ast.iter_child_nodes(node)]


def imports(name: str, path: Path, known: set[str]) -> list[tuple[int, str, str]]:
    """(line, imported module, the import as written) of every import of the package's own modules, those
    inside functions included, but a package loading one of its own modules inside a function (`ladder.measure`
    importing `ladder.rungs`): that runs once the package is whole, not a circle."""
    is_package = path.name == "__init__.py"
    here = name.split(".") if name else []
    out = []
    for node, inside in _nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
            written = "import " + ", ".join(targets)
            found = [t[len(PACKAGE) + 1:] if t != PACKAGE else "" for t in targets
                     if t == PACKAGE or t.startswith(PACKAGE + ".")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_package else here[:-1]
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                module = ".".join(base + ([node.module] if node.module else []))
            elif node.module == PACKAGE or (node.module or "").startswith(PACKAGE + "."):
                module = node.module[len(PACKAGE) + 1:] if node.module != PACKAGE else ""
            else:
                continue
            written = f"from {'.' * node.level}{node.module or ''} import " + ", ".join(a.name for a in node.names)
            # `from . import kernels`: the submodule, where there is one; else the names of the module itself
            subs = [f"{module}.{a.name}".lstrip(".") for a in node.names]
            found = [s for s in subs if s in known] or [module]
        else:
            continue
        if is_package and inside:
            found = [t for t in found if not t.startswith(name + ".")]
        out += [(node.lineno, target, written) for target in found]
    return out


def graph() -> tuple[dict[str, Path], dict[str, list[tuple[int, str, str]]]]:
    mods = modules()
    return mods, {name: imports(name, path, set(mods)) for name, path in mods.items()}


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def test_every_module_has_a_floor():
    mods = modules()
    missing = sorted(name for name in mods if floor_of(name) is None)
    assert not missing, f"modules on no floor of FLOORS (tests/tools/test_house.py): {missing}"


def test_imports_only_flow_down():
    mods, edges = graph()
    names = list(FLOORS)
    upward = []
    for name, found in edges.items():
        mine = floor_of(name)
        for line, target, written in found:
            theirs = floor_of(target)
            if mine is not None and theirs is not None and theirs > mine:
                upward.append(f"{where(mods[name], line)}: `{written}`: {name or PACKAGE} ({names[mine]}) imports "
                              f"{target or PACKAGE} ({names[theirs]}), a floor above it")
    assert not upward, "imports that flow upward:\n" + "\n".join(sorted(upward))


def test_no_circular_imports():
    mods, edges = graph()
    succ = {name: sorted({t for _, t, _ in found if t != name and t in mods}) for name, found in edges.items()}
    # Tarjan's strongly connected components: a component of two or more modules is a circle
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(succ):
        if v not in index:
            visit(v)
    lines = []
    for circle in circles:
        lines.append(" <-> ".join(name or PACKAGE for name in circle))
        lines += [f"  {where(mods[name], line)}: `{written}`" for name in circle
                  for line, target, written in edges[name] if target in circle and target != name]
    assert not circles, "modules that import each other in a circle:\n" + "\n".join(lines)


def test_engine_files_are_short():
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in sorted((ROOT / PACKAGE / "engine").glob("*.py"))
            if (n := len(p.read_text().splitlines())) > ENGINE_MAX_LINES]
    assert not long, f"engine files over {ENGINE_MAX_LINES} lines (split them by what they do):\n" + "\n".join(long)


@pytest.mark.parametrize("written, floor", [("from ..engine import Engine", "engine")])
def test_the_floors_read_relative_imports(written, floor, tmp_path):
    """A relative import resolves against the module's package: `..engine` from measure/x.py is the engine."""
    path = tmp_path / "x.py"
    path.write_text(written + "\n")
    (target,) = [t for _, t, _ in imports("measure.x", path, {"engine", "measure"})]
    assert floor_of(target) == list(FLOORS).index(floor)


def family_rows() -> list[str]:
    """The table of CONTRIBUTING.md's map, one row per kernel family, from the slots: the solution, the slot
    spec, the reference modules its slots check against, its own test file (else the generic check of
    every slot, `tests/kernels/test_slots.py`) and the chapters that teach it."""
    from tritonllm_course import slots
    families: dict[str, tuple[set, set]] = {}
    for slot in slots.all_slots():
        if not slot.family:
            continue
        chapters, refs = families.setdefault(slot.family, (set(), set()))
        chapters.add(slot.chapter)
        for fn in (slot.reference, slot.torch_impl):
            module = getattr(fn, "__module__", "") or ""
            if module.startswith(f"{PACKAGE}.reference."):
                refs.add(module.rsplit(".", 1)[1])
    rows = ["| family | solution (`solutions/`) | slot (`tritonllm_course/slots/`) | reference "
            "(`tritonllm_course/reference/`) | test (`tests/`) | chapter (`notebooks/`) |",
            "|---|---|---|---|---|---|"]
    for family, (chapters, refs) in sorted(families.items()):
        if not refs and (ROOT / PACKAGE / "reference" / f"{family}.py").exists():
            refs = {family}       # a slot whose reference wraps the module's own (sampling's seeded draws)
        own = sorted((ROOT / "tests").glob(f"*/test_{family}.py")) or [ROOT / "tests" / "kernels" / "test_slots.py"]
        test = own[0].relative_to(ROOT / "tests").as_posix()      # its topic's folder, then the file
        rows.append(f"| {family} | `{family}.py` | `{family}.py` | " + ", ".join(f"`{r}.py`" for r in sorted(refs))
                    + f" | `{test}` | " + ", ".join(sorted(chapters)) + " |")
    return rows


@pytest.mark.needs_solutions
def test_contributing_maps_every_kernel_family():
    """CONTRIBUTING.md's table of the kernel families is the one the slots give (print `family_rows()` to
    write it), and every file it names exists."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    rows = family_rows()
    assert "\n".join(rows) in text, "CONTRIBUTING.md's family table differs; it should read:\n" + "\n".join(rows)
    for row in rows[2:]:
        family = row.split("|")[1].strip()
        for path in (ROOT / "solutions" / f"{family}.py", ROOT / PACKAGE / "slots" / f"{family}.py"):
            assert path.exists(), f"CONTRIBUTING.md names {path.relative_to(ROOT)}, which does not exist"
