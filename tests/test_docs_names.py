"""Every dotted module path `ssmax.x.y` named in README.md, docs/*.md and the comments and
docstrings under src/ is a module of the package, or an attribute of one (ssmax.a.b.func, a
class's member ssmax.a.b.Class.meth), so a module moved or renamed leaves no stale name behind
(issue 61 item 5).

Resolved from the source, without importing it: a module is a file or package under
src/ssmax/, an attribute a name its module's text defines at the top (def, class, an
assignment, an import) or a class's body defines. Where a module can make names at import time
(a module `__getattr__`, `import *`, `globals()`), the name is imported and looked up with
getattr, as Python would find it; importing every named module would load Lightning and MLflow,
seconds of a test meant to take one. Names that are not modules but strings of the code (MLflow
tags such as `ssmax.pid`, the export's `ssmax.json`) are the code's own string constants, read
from it.
Left out: docs/history.md and CHANGELOG.md, dated records that keep the names they had.

The short form the code's comments use, `report.system_table` for ssmax.report.system_table, is
held to the same rule for the packages whose name is no config group and no common word
(evals, export, files, host, lit, preflight, registration, report, stages, verdicts), and for
pipeline, tracking and data, whose names are also config groups: there a name resolves as a
module path or as a key of the config's schema (`pipeline.seeds`, `data.facts.colon_share`).
Not checked: `config.` and `model.` (transformers' config, a model's attributes), a file name
(`report.md`), a key added on the command line (`+pipeline.overrides...`)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import io
import re
import tokenize
import typing
from functools import cache
from pathlib import Path

from ssmax.config.schema_pipeline import PipelineConfig

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md")
                                     if p.name != "history.md")]  # fmt: skip
NAME = re.compile(r"(?<![\w./-])ssmax(?:\.[A-Za-z_]\w*)+")
PACKAGES = {p.name for p in (SRC / "ssmax").iterdir() if p.is_dir() and any(p.glob("*.py"))}
SHORT_PACKAGES = "|".join(sorted(PACKAGES - {"config", "model"}))
SHORT = re.compile(rf"(?<![\w./+-])(?:{SHORT_PACKAGES})(?:\.[A-Za-z_]\w*)+")
DYNAMIC = re.compile(r"^def __getattr__|import \*|globals\(\)", re.M)  # names made at import
FILE_SUFFIXES = {"md", "html", "json", "jsonl", "csv", "png", "txt", "log", "pt", "ckpt", "py",
                 "yaml", "sh", "db", "lock", "safetensors"}  # fmt: skip


def module_file(dotted: str) -> Path | None:
    """The file of module `dotted` under src/ (a package: its __init__.py, or its folder for a
    namespace package: ssmax, ssmax.lit, ssmax.pipeline), or None."""
    base = SRC.joinpath(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return base if base.is_dir() and any(base.glob("*.py")) else None


def defined(body: list[ast.stmt]) -> set[str]:
    """The names a module's or class's body binds at its own level (if/try blocks included)."""
    out: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.If | ast.Try):
            blocks = [node.body, node.orelse, getattr(node, "finalbody", [])]
            blocks += [h.body for h in getattr(node, "handlers", [])]
            out |= {n for b in blocks for n in defined(b)}
    return out


@cache
def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def in_source(module: str, attrs: list[str]) -> bool:
    """Whether module's text defines attrs[0] at its top, and each further one in the class
    before it."""
    path = module_file(module)
    body: list[ast.stmt] = tree(path).body if path and path.is_file() else []
    for attr in attrs:
        if attr not in defined(body):
            return False
        node = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == attr), None)
        body = node.body if node else []
    return True


def resolves(name: str) -> bool:
    parts = name.split(".")
    i = next((i for i in range(len(parts), 0, -1) if module_file(".".join(parts[:i]))), 0)
    if i == 0:
        return False
    module, attrs = ".".join(parts[:i]), parts[i:]
    if not attrs or in_source(module, attrs):
        return True
    path = module_file(module)
    if not (path and path.is_file() and DYNAMIC.search(path.read_text())):
        return False
    try:  # a name made at import time: as Python finds it
        obj = importlib.import_module(module)
        for attr in attrs:
            obj = getattr(obj, attr)
    except (ImportError, AttributeError):
        return False
    return True


@cache
def string_constants() -> set[str]:
    """The string literals of src/ that look like a dotted name (tags, file names)."""
    return {n.value for p in SRC.rglob("*.py") for n in ast.walk(tree(p))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and NAME.fullmatch(n.value)}  # fmt: skip


def statements(body: list[ast.stmt]) -> typing.Iterator[ast.stmt]:
    """Every statement of a body and of the bodies within it (expressions not entered)."""
    for node in body:
        yield node
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            inner = getattr(node, name, None)
            if isinstance(inner, list):
                yield from statements(inner)


@cache
def comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each comment and docstring of a Python file."""
    out = [(t.start[0], t.string) for t in tokenize.generate_tokens(
        io.StringIO(path.read_text()).readline) if t.type == tokenize.COMMENT]  # fmt: skip
    module = tree(path)
    for node in [module, *statements(module.body)]:
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):  # fmt: skip
                out.append((first.lineno, first.value.value))
    return out


def named(pattern: re.Pattern[str] = NAME) -> list[tuple[str, str]]:
    """(where, name) of every name the pattern finds in the pages and in src's comments and
    docstrings."""
    out = []
    for page in PAGES:
        for i, line in enumerate(page.read_text().splitlines(), 1):
            out += [(f"{page.relative_to(ROOT)}:{i}", m) for m in pattern.findall(line)]
    for path in sorted(SRC.rglob("*.py")):
        for line, text in comments_and_docstrings(path):
            out += [(f"{path.relative_to(ROOT)}:{line}", m) for m in pattern.findall(text)]
    return out


def config_key(name: str) -> bool:
    """Whether name is a key of the pipeline's config schema (`data.facts.colon_share`)."""
    cls: object = PipelineConfig
    for part in name.split("."):
        hints = typing.get_type_hints(cls) if dataclasses.is_dataclass(cls) else {}
        if part not in hints:
            return False
        kind = hints[part]
        inner = [a for a in typing.get_args(kind) if dataclasses.is_dataclass(a)]
        cls = kind if dataclasses.is_dataclass(kind) else (inner[0] if inner else None)
    return True


def test_every_named_module_path_resolves() -> None:
    names = named()
    assert len({n for _, n in names}) > 100, "the scan found too few names"
    tags = string_constants()
    stale = [f"{where}: {name}" for where, name in names
             if name not in tags and not resolves(name)]  # fmt: skip
    assert stale == [], "stale module paths:\n" + "\n".join(stale)


def test_every_short_module_path_resolves() -> None:
    """`report.system_table` in a comment: ssmax.report.system_table (or a config key)."""
    names = named(SHORT)
    assert len(names) > 100, "the scan found too few names"
    stale = [f"{where}: {name}" for where, name in names
             if name.rpartition(".")[2] not in FILE_SUFFIXES
             and not resolves(f"ssmax.{name}") and not config_key(name)]  # fmt: skip
    assert stale == [], "stale module paths:\n" + "\n".join(stale)


def listed_modules(doc: str) -> list[str]:
    """The modules a package's docstring lists: the first word of each indented line after its
    "Modules" line."""
    lines = doc.partition("\nModules")[2].splitlines()[1:]
    return [line.split()[0] for line in lines if line.startswith("    ") and line.strip()]


def test_a_package_that_lists_its_modules_lists_each_one() -> None:
    """A package's docstring with a "Modules" list (data/) names every module it holds, and
    only those."""
    checked = 0
    for init in sorted((SRC / "ssmax").rglob("__init__.py")):
        doc = ast.get_docstring(tree(init)) or ""
        if "\nModules" not in doc:
            continue
        held = {p.stem for p in init.parent.glob("*.py") if p.stem != "__init__"}
        listed = listed_modules(doc)
        assert sorted(listed) == sorted(held), f"{init.relative_to(ROOT)}: {listed} != {held}"
        checked += 1
    assert checked >= 1


def test_the_check_sees_a_stale_name() -> None:
    assert resolves("ssmax.pipeline.stage_code.NO_RESULT")  # a module's constant
    assert resolves("ssmax.lit.hold.HoldAtStep")  # a class
    assert resolves("ssmax.pipeline")  # a package
    assert not resolves("ssmax.pipeline.code")  # moved to stage_code (issue 46)
    assert not resolves("ssmax.report.system")  # moved to system_table
    assert not resolves("ssmax.pipeline.stage_code.no_such_name")
    assert NAME.findall("`python -m ssmax.report.published`.") == ["ssmax.report.published"]
    assert NAME.findall("src/ssmax/x.py, .ssmax.pid, modeling_ssmax.py") == []
    assert SHORT.findall("(pipeline.code) report.md +pipeline.overrides.x") == [
        "pipeline.code", "report.md"]  # fmt: skip
    assert config_key("pipeline.seeds") and config_key("data.facts.colon_share")
    assert not config_key("pipeline.code") and not config_key("data.facts.no_such_key")
    assert listed_modules("Data.\n\nModules (each):\n    corpus  documents\n    sft  x\n") == [
        "corpus", "sft"]  # fmt: skip
