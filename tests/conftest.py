"""Shared fixtures and helpers: composed configs, a session-wide data cache (tokenizers train
once), the shared smoke pipeline and `first_pipeline_run` (its run that ran the nodes), and
`modules_after` (what a fresh interpreter imports)."""

from __future__ import annotations

import ast
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ssmax.config.compose import CONF_DIR
from ssmax.config.remembered import composed as make_cfg  # compose, remembered per process

if TYPE_CHECKING:  # mlflow is imported where it is used: every worker imports this module
    from mlflow import MlflowClient
    from mlflow.entities import Run
    from omegaconf import DictConfig

__all__ = ["PRESETS", "VARIANTS", "first_pipeline_run", "make_cfg", "modules_after"]
# the session-wide local SLURM cluster; a tracking server per module that asks for one
pytest_plugins = ["tests.slurm_fixtures", "tests.tracking_fixtures"]

VARIANTS = sorted(p.stem for p in (CONF_DIR / "variant").glob("*.yaml"))
PRESETS = sorted(p.stem for p in (CONF_DIR / "preset").glob("*.yaml"))


def modules_after(code: str) -> set[str]:
    """Every module a fresh interpreter holds after running code."""
    script = f"{code}\nimport sys\nprint(sorted(sys.modules))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=300).stdout  # fmt: skip
    return set(ast.literal_eval(out))


def first_pipeline_run(cfg: DictConfig) -> tuple[MlflowClient, Run]:
    """A client of cfg's store and the experiment's first pipeline run: the one that ran the
    nodes (later runs of the same pipeline found them cached)."""
    from mlflow import MlflowClient

    from ssmax.tracking.store import tracking_uri

    client = MlflowClient(tracking_uri(cfg))
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    (run,) = client.search_runs(
        [exp.experiment_id], "tags.kind = 'pipeline'", max_results=1, order_by=["start_time ASC"]
    )
    return client, run


def make_command(folder: Path, target: str, *settings: str) -> list[str]:
    """The command `make TARGET` in folder runs last (its recipe's own line, after setup's,
    a line continued with a backslash joined), as argv; this suite's environment as the venv
    (setup made it already)."""
    dry = subprocess.run(["make", "-s", "-n", "-C", str(folder), target,
                          f"VENV={Path(sys.prefix)}", *settings],
                         check=True, capture_output=True, text=True).stdout  # fmt: skip
    return shlex.split(dry.strip().replace("\\\n", " ").splitlines()[-1])


@pytest.fixture
def own_inductor_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test that compiles with inductor: its own compile cache and no graph an earlier test
    left in the worker. The shared /tmp cache gave compiled NaNs twice in a full suite (CI,
    2026-11-26; never alone or with a fresh cache); a compile test checks our code, not that."""
    import torch

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This test run's folder: shared by its pytest-xdist workers (each has its own basetemp
    below it), the basetemp itself in one process."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def smoke_pipeline(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> list[str]:
    """The smoke pipeline (the paper's declaration, in process) run once per test run, by the
    first worker that needs it (another one waits for it, then reads it); its overrides. Tests
    share it: they read it; one that adds a run or reads the latest holds it (below), and
    accounts for the runs others added. Every stage sees only the keys it declares
    (pipeline.strict_reads): an undeclared read fails here (test_stage_reads)."""
    from ssmax.files.atomic import atomic_write_json
    from ssmax.files.flock import exclusive
    from ssmax.pipeline.__main__ import main

    out = run_dir(tmp_path_factory) / "smoke-pipeline"
    made = out / "overrides.json"
    with exclusive(_smoke_lock(tmp_path_factory)):
        if made.exists():
            return json.loads(made.read_text())
        overrides = ["preset=smoke", "pipeline.strict_reads=true", f"paths.output_dir={out}",
                     f"paths.cache_dir={shared_cache}"]  # fmt: skip
        assert main(["run", *overrides]) == 0
        atomic_write_json(made, overrides)
    return overrides


def _smoke_lock(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_dir(tmp_path_factory) / "smoke-pipeline.lock"


@pytest.fixture
def smoke_pipeline_held(
    smoke_pipeline: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[str]]:
    """The smoke pipeline's overrides, its folder held for the test against the other
    workers' tests: one that adds a pipeline run to it, or reads its latest run (which is
    half made while another test's run goes on)."""
    from ssmax.files.flock import exclusive

    with exclusive(_smoke_lock(tmp_path_factory)):
        yield smoke_pipeline


# `make test` runs two pytest-xdist workers. A module's tests go to one worker (its module
# fixtures run once), and these modules, which hold every SLURM test, all to the same one: one
# local cluster per run (pytest_collection_modifyitems checks that the list is whole).
SLURM_MODULES = ("test_multirun_slurm.py", "test_pipeline_slurm.py", "test_requeue_slurm.py",
                 "test_slurm_cluster.py")  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The SLURM modules first, then those with slow tests: the longest chains start at once
    and the quick modules fill in at the end."""
    stray = {i.path.name for i in items if i.get_closest_marker("slurm")} - set(SLURM_MODULES)
    if stray:
        raise pytest.UsageError(f"SLURM tests outside tests/conftest.py's SLURM_MODULES: {stray}")
    slow = {i.path for i in items if i.get_closest_marker("slow")}
    items.sort(key=lambda i: (i.path.name not in SLURM_MODULES, i.path not in slow))  # stable


class ByModuleScheduling:
    """pytest-xdist's scheduling by scope, a module or all the SLURM modules a scope, handed
    out in collection order (its loadgroup cannot: it ignores groups on pytest 9.2,
    pytest-dev/pytest-xdist#1386)."""

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: object) -> object:
        from xdist.scheduler import LoadScopeScheduling

        class ByModule(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                module = nodeid.split("::", 1)[0]
                return "slurm" if Path(module).name in SLURM_MODULES else module

        config.option.loadscopereorder = False
        return ByModule(config, log)


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):  # its hook is unknown without it
        config.pluginmanager.register(ByModuleScheduling())
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 1))
    if workers > 1:  # a worker's share of the cores, for torch here and in what it starts
        share = max(1, len(os.sched_getaffinity(0)) // workers)
        os.environ.setdefault("OMP_NUM_THREADS", str(share))
        import torch  # loaded before this env was set

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
