"""A gpu run's commit held to its registration (ssmax.registration.equivalence): a commit is
accepted where its code is the registered commit's, or that of a commit whose smoke pipeline
gave the registered commit's numbers on the CPU; the check itself, run small on a repository of
three commits (the registered one, a docs change, a change of the smoke preset's learning
rate)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ssmax.registration.equivalence import accepted, check, compare, equivalence_path
from ssmax.verdicts.registered import REGISTRATION, ROOT, load

PRETRAIN_A = ("pipeline.targets=[pretrain]",)  # one node: the registered variant's pretraining


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A repository of this tree's HEAD (registered), a docs change on it, a code change."""
    repo = tmp_path_factory.mktemp("equivalence") / "repo"
    repo.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], check=True,
                             capture_output=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(repo)], input=archive, check=True)
    git(repo, "init", "-q")
    commits = {"registered": commit_all(repo, "registered")}
    (repo / "docs" / "note.md").write_text("a page\n")
    commits["docs"] = commit_all(repo, "docs only")
    smoke = repo / "conf" / "preset" / "smoke.yaml"
    smoke.write_text(smoke.read_text().replace("lr: 3.0e-3", "lr: 2.0e-3"))
    commits["code"] = commit_all(repo, "another learning rate")
    return repo, commits


def registration(tmp_path: Path, code_commit: str) -> Path:
    data = json.loads(REGISTRATION.read_text()) | {"code_commit": code_commit,
                                                   "variants": ["a_softmax"]}  # fmt: skip
    path = tmp_path / "registration" / "smoke-2026-01-01.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    return path


def test_a_commit_is_accepted_by_its_code_or_by_a_check_on_the_whole_pipeline(
    repo: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, commits = repo
    reg = load(registration(tmp_path, commits["registered"]))
    assert accepted(reg, commits["registered"], root)
    assert accepted(reg, commits["docs"], root)  # docs/ is not code
    assert not accepted(reg, commits["code"], root)
    entry = {"commit": commits["code"], "against": reg.code_commit, "equal": True}
    equivalence_path(reg).parent.mkdir(parents=True)
    equivalence_path(reg).write_text(json.dumps({"checks": [entry | {"extra": list(PRETRAIN_A)}]}))
    assert not accepted(reg, commits["code"], root)  # a check on part of the pipeline only
    equivalence_path(reg).write_text(json.dumps({"checks": [entry | {"extra": []}]}))
    assert accepted(reg, commits["code"], root)
    equivalence_path(reg).write_text(
        json.dumps({"checks": [entry | {"extra": [], "equal": False}]})
    )
    assert not accepted(reg, commits["code"], root)


@pytest.mark.slow  # two smoke pretrainings of 20 steps
def test_the_check_finds_a_changed_rate_and_equal_folders_equal(
    repo: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, commits = repo
    reg = load(registration(tmp_path, commits["registered"]))
    changed = check(reg, commits["code"], tmp_path, root, PRETRAIN_A, keep=tmp_path / "kept")
    assert not changed["equal"] and changed["results_equal"], changed  # no report: both None
    assert "pretrain/a_softmax/seed0/model.pt" in changed["differing"]
    assert changed["commit"] == commits["code"] and changed["against"] == commits["registered"]
    # the same numbers under another fingerprint folder (other code) are equal
    old = tmp_path / "kept" / "registered" / "outputs"
    twin = tmp_path / "twin"
    shutil.copytree(old, twin)
    (node,) = (twin / "pipeline" / "nodes" / "pretrain" / "a_softmax" / "seed0").iterdir()
    node.rename(node.with_name("0" * 16))
    same = compare(old, twin)
    assert same["equal"] and same["compared"] >= 3, same  # weights, a save point, data position
    for folder, value in ((old, 1.5), (twin, 1.5000001)):  # a report's results, value for value
        results = folder / "pipeline" / "nodes" / "report" / ("f" * 16) / "report" / "results.json"
        results.parent.mkdir(parents=True)
        results.write_text(json.dumps({"a_softmax": {"niah": {"0": value}}}))
    apart = compare(old, twin)
    assert not apart["equal"] and not apart["results_equal"], apart
