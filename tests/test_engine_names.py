"""The engine (src/ssmax/pipeline/**, slurm/ included) names no stage: what it needs of one (its
artifacts, what a run shows of it, its training schedule, how its seeds bundle, which stage's
resources its closing job takes) it reads from the stage's SPEC (ssmax.stages.spec.StageSpec).

Read from the source (ast): identifiers, attribute names, import names and string constants,
f-strings' text included; comments and docstrings are prose, not read.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "src" / "ssmax" / "pipeline"
STAGES = ("pretrain", "switch", "sft", "rope", "eval_loss", "eval_niah", "export", "report")
# a stage's name as a word of a name or string: "report_md" and "trainer.sft" count, "PRETRAIN"
# and "sft_module" do not start a word the same way ("_" separates words, case counts)
WORD = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(STAGES) + r")(?![A-Za-z0-9])")

# What must stay, each with its reason: (file relative to pipeline/, the word).
ALLOWED = {
    # the declaration's own keys (pipelines/*.yaml `report:` and `export:`): the language's names
    # for the node that reads every variant's and the node after a variant's training; which
    # stage each runs is the YAML's (`stage:`), never the engine's
    ("declaration.py", "report"),
    ("declaration.py", "export"),
    # the shell's `export` in the lines a snapshot's job runs first, not the stage
    ("snapshot.py", "export"),
    # ssmax.data.identity.data_manifest's keyword: the SFT data set's part of the data manifest
    # (the `data` block with its SFT keys, against "data:lm"), a data set, not the stage
    ("fingerprint.py", "sft"),
    # a measured rate's name (bench/throughput.json, written by `make bench`): the loss eval's
    # seconds per sequence, which a stage's cost names (StageCost.kind), not the stage
    ("measured.py", "eval_loss"),
}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings."""
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = body[0] if body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def words(source: str) -> list[tuple[int, str]]:
    """(line, text) of every identifier and string constant of a module, docstrings aside."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            found.append((line, node.value))
        elif isinstance(node, ast.Name):
            found.append((line, node.id))
        elif isinstance(node, ast.Attribute):
            found.append((line, node.attr))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append((line, node.name))
        elif isinstance(node, ast.arg) or isinstance(node, ast.keyword) and node.arg:
            found.append((line, node.arg))
        elif isinstance(node, ast.alias):
            found += [(line, node.name), (line, node.asname or "")]
        elif isinstance(node, ast.ImportFrom):
            found.append((line, node.module or ""))
    return found


def stage_names(path: Path) -> list[str]:
    """'file:line: word in text' for each stage name the module at path uses, allowed ones aside."""
    rel = path.relative_to(ENGINE).as_posix()
    out = []
    for line, text in words(path.read_text()):
        for word in WORD.findall(text):
            if (rel, word) not in ALLOWED:
                out.append(f"{rel}:{line}: {word!r} in {text!r}")
    return sorted(set(out))


def test_the_engine_names_no_stage() -> None:
    found = [hit for path in sorted(ENGINE.rglob("*.py")) for hit in stage_names(path)]
    assert not found, "the engine names a stage (declare it on the stage's SPEC):\n" + "\n".join(
        found
    )


def test_every_allowed_name_is_still_used() -> None:
    """An allowance that nothing needs any more goes."""
    used = set()
    for path in ENGINE.rglob("*.py"):
        rel = path.relative_to(ENGINE).as_posix()
        used |= {(rel, w) for _, text in words(path.read_text()) for w in WORD.findall(text)}
    assert used >= ALLOWED, f"allowed but no longer used: {sorted(ALLOWED - used)}"


def test_the_check_sees_a_stage_name() -> None:
    """The reader finds a stage named in code, a string and an f-string, not in prose."""
    source = '''"""The report's stage."""
# pretrain in a comment
x = job.module == "sft"
y = f"{a}/report_md"
z = cfg.trainer.pretrain
'''
    hits = {w for _, text in words(source) for w in WORD.findall(text)}
    assert hits == {"sft", "report", "pretrain"}
