"""Every stage reads only the config keys it declares (its SPEC): run on smoke with
pipeline.strict_reads, each stage gets a config holding only those keys, so that a read of an
undeclared key fails here instead of escaping the node's fingerprint."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mlflow import MlflowClient
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError

from ssmax.pipeline.__main__ import main
from ssmax.pipeline.declaration import available, load
from ssmax.pipeline.run import only_keys, plan
from ssmax.pipeline.stage_code import PACKAGE, module_file, no_result, stage_code
from ssmax.stages.spec import stage_spec
from ssmax.tracking.store import tracking_uri
from tests.conftest import modules_after


def test_only_keys_keeps_declared_and_refuses_the_rest() -> None:
    cfg = OmegaConf.create({"a": {"b": 1, "c": 2}, "d": None, "data": {"x": 1}})
    kept = only_keys(cfg, ("a.b", "d", "data:lm"))
    assert kept.a.b == 1 and kept.d is None and kept.data.x == 1
    with pytest.raises(ConfigAttributeError):
        _ = kept.a.c


@pytest.mark.parametrize("name", available())
def test_every_declared_stage_has_a_spec(name: str) -> None:
    for module in load(name).stages.values():
        assert stage_spec(module).reads and f"stages/{module}.py" in stage_code(module)


def test_stage_code_follows_imports_and_leaves_out_what_shapes_no_result() -> None:
    report, pretrain, rope = stage_code("report"), stage_code("pretrain"), stage_code("rope")
    # function-level imports (the report's build, training's data modules) are followed
    assert {"verdicts/claims.py", "report/render.py", "config/variants.py"} <= set(report)
    assert {"lit/trainer.py", "model/attention.py", "data/lm.py", "data/needle.py",
            "lit/lightning_module.py", "config/compose.py"} <= set(pretrain)  # fmt: skip
    # read_weights loads the weights (e) and SFT start from
    assert "preflight/weights.py" in pretrain
    # SFT's data and the input-file checks (SQuAD's among them) are not pretraining's code
    assert not {"preflight/input_files.py", "data/sft_batches.py", "data/sft_module.py",
                "data/squad.py"} & set(pretrain)  # fmt: skip
    assert {"data/sft_batches.py", "data/sft_module.py", "data/squad.py"} <= set(stage_code("sft"))
    # logging, locks, atomic writes, validation: a change there keeps every cached result
    for code in (report, pretrain, rope):
        assert not [f for f in code if f.startswith(("tracking/", "pipeline/")) or f in
                    ("files/atomic.py", "files/flock.py", "config/rules.py")]  # fmt: skip
    assert not [f for f in pretrain if f.startswith(("evals/", "report/"))]
    assert "stages/context.py" not in rope  # imported under TYPE_CHECKING only
    # what the export registers in MLflow is its result; the rest of tracking/ is not
    export = stage_code("export")
    assert "tracking/models.py" in export and "tracking/__init__.py" not in export


@pytest.mark.parametrize("module", ["pretrain", "eval_niah", "report"])
def test_stage_code_holds_every_module_an_import_loads(module: str) -> None:
    # What importing the stage really loads (module level; the AST also follows function-level
    # imports) is in its code, unless it shapes no result (ssmax.pipeline.stage_code.NO_RESULT).
    loaded = {module_file(m) for m in modules_after(f"import ssmax.stages.{module}")} - {None}
    files = {f.relative_to(PACKAGE).as_posix() for f in loaded}
    kept = {f for f in files if not no_result(f)}
    assert kept - set(stage_code(module)) == set()


def test_every_stage_runs_on_its_declared_keys_only(smoke_pipeline: list[str]) -> None:
    # The run's smoke pipeline (conftest) ran with pipeline.strict_reads: every stage module of
    # every declaration, and both checkpoints a variant may start from ((e) weights, (f) the
    # training state), on their declared keys only.
    cfg, jobs = plan(smoke_pipeline)
    assert cfg.pipeline.strict_reads and all(j.done is not None for j in jobs)
    assert {j.module for j in jobs} == {m for d in available() for m in load(d).stages.values()}
    switches = [OmegaConf.create(j.cfg_yaml) for j in jobs if j.stage == "switch"]
    assert {c.variant.facts.start.checkpoint for c in switches} == {"weights", "switch_point"}


@pytest.mark.slow
def test_local_executor_runs_workers_side_by_side_and_inline_stages_here(
    tmp_path: Path, shared_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The scaling-laws declaration end to end, (g) with (a) whose weights it starts from, with
    # the local executor (the tiny preset's default): workers side by side, and the inline
    # stages (no compute) in this process; strict reads for (g)'s law too.
    overrides = ["preset=smoke", "pipeline.file=scaling_laws",
                 "pipeline.variants=[g_qwen_logn_inference]", "pipeline.strict_reads=true",
                 "executor=local", "executor.workers=2", f"paths.output_dir={tmp_path}",
                 f"paths.cache_dir={shared_cache}"]  # fmt: skip
    assert main(["run", *overrides]) == 0
    cfg, jobs = plan(overrides)
    assert len(jobs) == 2 * 7 + 1 and all(j.done is not None for j in jobs)
    output = capsys.readouterr().out
    started = dict(re.findall(r"^run\s+(\S+)(.*)$", output, re.M))
    assert set(started) == {j.name for j in jobs}
    assert started["pretrain/a_softmax/seed0"].startswith(" (pid ")  # a worker process
    assert started["rope_sft/g_qwen_logn_inference/seed0"] == ""  # inline: no worker
    done = {j.name: j.done["outputs"] for j in jobs}
    inherited = done["sft/g_qwen_logn_inference/seed0"]  # (a)'s SFT model, untrained under (g)
    assert inherited["weights"] == done["sft/a_softmax/seed0"]["weights"]
    assert inherited["inherited"] and inherited["run_id"]  # a run of its own in the tree
    # two workers at once: a node started while another was running
    events = re.findall(r"^(run|done)\s+(\S+)", output, re.M)
    running, most = set(), 0
    for event, name in events:
        if started.get(name, "").startswith(" (pid "):
            running = running | {name} if event == "run" else running - {name}
            most = max(most, len(running))
    assert most == 2
    client = MlflowClient(tracking_uri(cfg))
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    parent = client.search_runs([exp.experiment_id], "tags.kind = 'pipeline'")[0]
    assert parent.info.status == "FINISHED"
    children = client.search_runs(
        [exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'"
    )
    assert {r.data.tags["node"] for r in children} == set(started)


_PRELOADED = """import importlib
from ssmax.pipeline.local import preload
for name in preload({'pretrain'}):
    importlib.import_module(name)"""


def test_local_workers_fork_with_what_their_node_imports() -> None:
    # The local executor's forkserver imports these once; each node's process forks from it.
    # A training node's Lightning is imported inside functions; every node opens an MLflow
    # run in the sqlite store: none of it may be left to each node (~5-10 s apiece).
    loaded = modules_after(_PRELOADED)
    assert {"mlflow", "mlflow.store.tracking.sqlalchemy_store", "lightning"} <= loaded
