"""The shape of src/: no import cycle (top-level or inside functions), no import up a floor and
no file over 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import modules_after

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_LINES = 400
# the packages from the bottom floor up (docs/development.md, Layout); the entry points (train.py,
# each __main__.py) sit above them all and may import from any floor
FLOORS = ("model", "files", "config", "host", "data", "tracking", "evals", "preflight", "lit",
          "export", "verdicts", "report", "stages", "pipeline", "registration")  # fmt: skip


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "ssmax").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(node: ast.AST, path: Path, name: str, known: set[str]) -> set[str]:
    """The ssmax modules one statement of module `name` imports (none: not an import)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
            base = f"{base}.{node.module}" if node.module else base
        targets = [f"{base}.{a.name}" for a in node.names] + [base]
    else:
        return set()
    return {t for t in targets if t in known and t != name}


def imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The ssmax modules a module imports anywhere in its text (lazy imports count)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        found |= imported(node, path, name, known)
    return found


def test_no_import_cycles() -> None:
    mods = modules()
    graph = {name: imports(path, name, set(mods)) for name, path in mods.items()}
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                cycle = [*stack[stack.index(dep) :], dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[name] = 2

    for name in graph:
        if name not in state:
            visit(name)


def floor(name: str) -> int:
    """A module's floor: its package's place in FLOORS; an entry point's is above them all."""
    parts = name.split(".")
    if parts[-1] == "__main__" or parts[1] not in FLOORS:  # the root holds entry points only
        return len(FLOORS)
    return FLOORS.index(parts[1])


def test_no_import_runs_up_a_floor() -> None:
    """A library module imports from its own floor or lower ones (TYPE_CHECKING blocks and
    imports inside functions count too)."""
    mods = modules()
    up = [
        f"{name} -> {dep}"
        for name, path in mods.items()
        for dep in sorted(imports(path, name, set(mods)))
        if floor(dep) > floor(name)
    ]
    assert not up, up


MAX_INNER_IMPORTS = 25  # issue 46: from ~124


def test_imports_inside_functions_say_why() -> None:
    """Imports at the top: an ssmax import inside a function has its reason beside it, a
    comment on its line or above it (over the imports of its group) that says `lazy` (what the
    top would cost, measured; an optional dependency) or names the `cycle` it breaks."""
    mods = modules()
    inner, silent = set(), []
    for name, path in mods.items():
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if not imported(node, path, name, set(mods)) or (name, node.lineno) in inner:
                    continue
                inner.add((name, node.lineno))
                above, i = [lines[node.lineno - 1]], node.lineno - 2
                while i >= 0 and lines[i].lstrip().startswith(("#", "from ", "import ")):
                    above.append(lines[i])
                    i -= 1
                comments = [line.partition("#")[2] for line in above if "#" in line]
                if not any("lazy" in c or "cycle" in c for c in comments):
                    silent.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not silent, f"imports inside functions without their reason beside them: {silent}"
    assert len(inner) <= MAX_INNER_IMPORTS, sorted(inner)


def test_no_file_in_src_is_over_400_lines() -> None:
    long = {
        str(p.relative_to(SRC)): n
        for p in SRC.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines: {long}"


def test_atomic_writes_go_through_files_atomic() -> None:
    """One atomic-write helper (files/atomic.py): no hand-written temp-file-and-rename elsewhere."""
    hand_written = [
        f"{path.relative_to(SRC)}:{i}"
        for path in modules().values()
        if path.name != "atomic.py"
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if "os.replace(" in line or ".rename(" in line or '.tmp"' in line
    ]
    assert not hand_written, hand_written


def test_theta_is_scaled_in_one_place() -> None:
    """RoPE theta x rope_factor: ssmax.evals.inference (scaled_theta, scaled_rope_theta) only."""
    allowed = {"evals/inference.py", "model/transformer.py"}  # the mechanism; the model's own init
    setters = [
        f"{path.relative_to(SRC / 'ssmax')}:{i}"
        for path in modules().values()
        if str(path.relative_to(SRC / "ssmax")) not in allowed
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if ".rope_theta =" in line or ".rope_theta *=" in line or "rope_factor) *" in line
    ]
    assert not setters, setters


def test_the_evals_and_the_pipeline_start_without_lightning() -> None:
    """Lightning takes seconds to import (~6 s of a job's start on 2 cores): only training
    loads it; an eval, export or report job, the pipeline's client and the tracking package
    (the spool that `python -m ssmax.report` delivers) do without."""
    modules = ["ssmax.stages.eval_loss", "ssmax.stages.eval_niah", "ssmax.stages.export",
               "ssmax.stages.report", "ssmax.pipeline.__main__", "ssmax.tracking.spool",
               "ssmax.report.__main__"]  # fmt: skip
    loaded = modules_after("import " + ", ".join(modules))
    assert set(modules) <= loaded  # the check imported them
    assert {m for m in loaded if m.split(".")[0] == "lightning"} == set()


def test_a_plan_imports_no_compiler_nor_the_report_s_plotting(tmp_path: Path) -> None:
    """`plan` (and the pipeline's own process) counts each model's parameters on the meta
    device without initialising them (ssmax.stages.costing): initialising meta weights imports
    torch._dynamo, ~1.2 s of CPU in a process that never compiles; the report stage's module
    imports its figures and statistics (matplotlib, scipy: ~1.5 s) only to run."""
    args = ["plan", "preset=smoke", f"paths.output_dir={tmp_path}"]
    plan = ("import contextlib, io; from ssmax.pipeline.__main__ import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"  # its table: not the module list
            f"    assert main({args!r}) == 0")  # fmt: skip
    loaded = modules_after(plan)
    assert {"ssmax.stages.costing", "ssmax.stages.report"} <= loaded
    assert {"torch._dynamo", "matplotlib", "scipy"} & loaded == set()
