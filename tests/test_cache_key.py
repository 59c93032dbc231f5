"""The node fingerprint is the cache key: a change to the code a stage runs, or to the data it
reads, must rerun exactly the nodes it reaches and their descendants, and a change to code that
shapes no result (ssmax.pipeline.stage_code.NO_RESULT) must rerun none. Without these tests the
fingerprint could drop its code hash or its data manifest and every other test would stay green:
the others change only config.

Each test edits a copy of the source tree and plans the session's smoke pipeline (conftest: every
node cached) in a fresh interpreter that imports the copy. A subprocess, not this process: the
code hashes are cached per process (code_hash, stage_code) and the package, the corpus and the
configs are found from the files' own location. Planning runs no node and writes nothing to the
pipeline's folder, so the shared pipeline needs no holding.
"""

from __future__ import annotations

import lzma
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ssmax.data.corpus import EMBEDDED_FILE
from ssmax.pipeline.job import NodeJob
from ssmax.pipeline.run import plan

REPO = Path(__file__).resolve().parents[1]
# what the source finds beside src/ (configs, declarations, throughput table, corpus, the
# published results the report reads: StageSpec.files): read, not edited, so the copy links it
# (the data test replaces its link with a copy)
BESIDE_SRC = ("conf", "pipelines", "bench", "data", "docs")
# a line of `plan`: state, node, fingerprint (12 hex digits), folder
NODE_LINE = re.compile(r"^(cached|partial|to-run)\s+(\S+)\s+[0-9a-f]{12}\s", re.MULTILINE)
# a harmless edit: the module's text changes, what it does does not
EDIT = "\n_EDITED_BY_TEST_CACHE_KEY = True\n"


def _env(tree: Path) -> dict[str, str]:
    """The environment of an interpreter that imports ssmax from tree/src: PYTHONPATH comes
    before the editable install on sys.path (ssmax is a namespace package, both folders are on
    its path, and a module is taken from the first that has it)."""
    return os.environ | {"PYTHONPATH": str(tree / "src")}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the repository's source (src/ssmax) with what it reads beside it linked."""
    root = tmp_path / "repo"
    shutil.copytree(
        REPO / "src" / "ssmax", root / "src" / "ssmax", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in BESIDE_SRC:
        (root / name).symlink_to(REPO / name, target_is_directory=True)
    return root


def edit(tree: Path, module: str) -> None:
    """Append a harmless statement to src/ssmax/<module> of the copy."""
    path = tree / "src" / "ssmax" / module
    path.write_text(path.read_text() + EDIT)


# `python -m ssmax.pipeline plan`, after saying where the code it fingerprints lies
PLAN = (
    "import sys; from ssmax.pipeline.stage_code import PACKAGE; print(PACKAGE); "
    "from ssmax.pipeline.__main__ import main; sys.exit(main(['plan', *sys.argv[1:]]))"
)


def planned_to_run(tree: Path, overrides: list[str]) -> set[str]:
    """The nodes the pipeline's `plan` shows not cached, run on the copy's code."""
    out = subprocess.run([sys.executable, "-c", PLAN, *overrides], env=_env(tree), cwd=tree,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr
    # what the fingerprints hash: the copy's modules, else the tests would plan the real tree
    package = out.stdout.partition("\n")[0]
    assert Path(package) == (tree / "src" / "ssmax").resolve(), out.stdout[:500]
    states = {name: state for state, name in NODE_LINE.findall(out.stdout)}
    assert states, out.stdout  # the plan's format changed: no node line was read
    return {name for name, state in states.items() if state != "cached"}


def with_downstream(jobs: list[NodeJob], stages: set[str]) -> set[str]:
    """The nodes of the given stages and every node that reads one of them, directly or through
    others (a plan lists inputs first)."""
    out = {job.name for job in jobs if job.stage in stages}
    for job in jobs:
        if out & set(job.input_dirs):
            out.add(job.name)
    return out


@pytest.fixture
def cached(smoke_pipeline: list[str]) -> tuple[list[str], list[NodeJob]]:
    """The smoke pipeline's overrides and its nodes, every one cached (planned on this tree)."""
    _, jobs = plan(smoke_pipeline)
    # a node not cached here: the source changed since the pipeline ran (this session's edit)
    assert not [job.name for job in jobs if job.done is None]
    return smoke_pipeline, jobs


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "stages"),
    [
        # a stage's own module: its nodes (sft) and what reads them (rope_sft, eval_niah,
        # export, report); not pretraining, nor the other evals
        ("stages/sft.py", {"sft"}),
        # imported only through others (evals/haystack.py, by the evals of eval_niah, by the
        # export's folder writer inside its run(), by the report's needle figures): every stage
        # that reaches it is found by following imports, and only those
        ("evals/spans.py", {"eval_niah", "export", "report"}),
    ],
)
def test_editing_code_a_stage_runs_reruns_exactly_its_nodes_and_downstream(
    tree: Path, cached: tuple[list[str], list[NodeJob]], module: str, stages: set[str]
) -> None:
    overrides, jobs = cached
    edit(tree, module)
    rerun = planned_to_run(tree, overrides)
    assert rerun == with_downstream(jobs, stages)
    assert "pretrain/b_ssmax/seed0" not in rerun and "report" in rerun


@pytest.mark.slow
def test_changing_the_corpus_reruns_every_node_that_reads_data_and_downstream(
    tree: Path, cached: tuple[list[str], list[NodeJob]]
) -> None:
    # One document more in the shipped corpus: the same config names other data. Appended as a
    # second xz stream (lzma reads concatenated streams as one), so nothing is recompressed.
    overrides, jobs = cached
    corpus = tree / EMBEDDED_FILE.relative_to(REPO)
    (tree / "data").unlink()
    shutil.copytree(EMBEDDED_FILE.parent, corpus.parent)
    document = b'{"text": "One more paragraph.", "book": "Sense & Sensibility", "chapter": 1}\n'
    corpus.write_bytes(corpus.read_bytes() + lzma.compress(document))
    assert lzma.decompress(corpus.read_bytes()).endswith(document)
    rerun = planned_to_run(tree, overrides)
    # the stages whose SPEC reads a data key; rope and report read none but descend from them
    readers = {"pretrain", "switch", "eval_loss", "sft", "eval_niah", "export"}
    assert rerun == with_downstream(jobs, readers) == {job.name for job in jobs}


@pytest.mark.slow
def test_editing_code_that_shapes_no_result_reruns_nothing(
    tree: Path, cached: tuple[list[str], list[NodeJob]]
) -> None:
    # MLflow logging (tracking/, one of NO_RESULT), imported by most stages
    overrides, _ = cached
    edit(tree, "tracking/runs.py")
    assert planned_to_run(tree, overrides) == set()


@pytest.mark.parametrize(
    ("module", "setting", "overrides"),
    [
        ("sft", "data.squad_files", ["data.sft_source=squad_v2"]),
        ("pretrain", "data.slimpajama_files", ["data=slimpajama"]),
    ],
)
def test_a_local_data_file_edited_in_place_changes_the_key(
    tmp_path: Path, module: str, setting: str, overrides: list[str]
) -> None:
    """Local files in the paper's formats are named by path in the config; editing one in place
    (same name) must change the key of the nodes that read it, and nothing else must."""
    from ssmax.config.compose import compose
    from ssmax.pipeline.fingerprint import fingerprint
    from ssmax.stages.spec import stage_spec

    data, other = tmp_path / "local.jsonl", tmp_path / "other.jsonl"
    data.write_text('{"text": "one"}\n')
    other.write_text('{"text": "two"}\n')
    cfg = compose("preset=smoke", *overrides, f"{setting}=[{data}]")
    spec = stage_spec(module)

    def key() -> str:
        return fingerprint(module, module, spec, cfg, [])

    before = key()
    assert key() == before  # stable while nothing changes
    other.write_text('{"text": "changed"}\n')  # a file it does not read
    assert key() == before
    data.write_text('{"text": "one, edited"}\n')
    assert key() != before
