"""The code a stage runs, derived from its imports, for its nodes' fingerprints.

A stage module's code is every module of src/ssmax it imports, directly or through others, at
module level or inside functions (read from the source, not by importing it): a hand-kept list
drifts (docs/pipeline.md, "Caching, plan and partial runs"). Two kinds of import are not
followed:
- `if TYPE_CHECKING:` blocks: annotations only, never run;
- NO_RESULT: modules that never shape what a node writes (logging to MLflow, locks, atomic
  writes, config validation, rank helpers, the pipeline's bookkeeping).
  A change there leaves every cached result valid.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # src/ssmax
# relative to src/ssmax; a folder stands for every module in it. Not among them:
# preflight/weights.py (init_from's weights, checked and loaded) and tracking/models.py (what
# the export node registers in MLflow, its result); a new module counts until it is listed here.
NO_RESULT = ("tracking/__init__.py", "tracking/client.py", "tracking/datasets.py",
             "tracking/liveness.py", "tracking/manifest.py", "tracking/reach.py",
             "tracking/runs.py", "tracking/server.py", "tracking/store.py",
             "tracking/spool.py", "tracking/sync.py", "tracking/system_metrics.py",
             "tracking/system_metrics_callback.py", "tracking/ui.py", "pipeline",
             "files", "preflight/input_files.py", "preflight/overrides.py",
             "preflight/data_sizes.py", "preflight/memory.py", "host/ranks.py",
             "config/schema.py", "config/schema_pipeline.py", "config/rules.py",
             "config/remembered.py", "stages/spec.py", "stages/costing.py")  # fmt: skip


@cache
def module_file(name: str) -> Path | None:
    """src/ssmax/... file of a dotted module name (a package's __init__.py); None outside."""
    parts = name.split(".")
    if parts[0] != "ssmax":
        return None
    path = PACKAGE.joinpath(*parts[1:])
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


@cache  # each file is parsed once, however many stages import it
def _imported(file: Path, name: str) -> frozenset[str]:
    """Dotted names of the modules `file` (module `name`) imports, TYPE_CHECKING blocks aside."""
    out: set[str] = set()
    package = name if file.name == "__init__.py" else name.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)  # submodules, if any
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(file.read_text(), str(file)))
    return frozenset(m for m in out if module_file(m) is not None)


def no_result(rel: str) -> bool:
    """Whether the module at `rel` (relative to src/ssmax) is one of NO_RESULT."""
    return any(rel == p or rel.startswith(p.rstrip("/") + "/") for p in NO_RESULT)


@cache
def stage_code(module: str) -> tuple[str, ...]:
    """Files (relative to src/ssmax, sorted) that ssmax.stages.<module> may run."""
    seen: set[Path] = set()
    todo = [f"ssmax.stages.{module}"]
    while todo:
        name = todo.pop()
        file = module_file(name)
        if file is None or file in seen or no_result(file.relative_to(PACKAGE).as_posix()):
            continue
        seen.add(file)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(2, len(parts))]  # packages run __init__
        todo += sorted(_imported(file, name))
    return tuple(sorted(f.relative_to(PACKAGE).as_posix() for f in seen))
