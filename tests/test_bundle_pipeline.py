"""executor.bundle=K in the pipeline (ssmax.pipeline.bundle: group, train, evals): seeds
of a variant's pretraining trained as one job give each seed's node as its solo node would: its
weights, its switch point for (f), its MLflow run, its done record (saying `bundle`), its
fingerprint (a node cached stays cached whichever way it was made); a bundle killed midway
resumes to the uninterrupted result. So do (e) and (f)'s switch nodes, each seed from its own
(a), and (f)'s SFT nodes, each seed from its own (f). Seeds of a variant's evals bundled write
what their solo nodes write, bit for bit (evaluated one after another by the solo node's code).

The solo reference for seed 0 is the shared smoke pipeline (tests/conftest.py: in process, the
paper's variants, seed 0); seeds 1 and 2 of (a) are trained solo here. Tolerance: TOL32 of
tests/test_bundle.py (float32, the smoke preset's); measured: docs/training.md, "Seeds bundled".
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from ssmax.lit.bundle.run import config_plans
from ssmax.pipeline.__main__ import main
from ssmax.pipeline.bundle import group as grouping
from ssmax.pipeline.bundle.group import TRAIN, BundleJob, blocked_nodes, in_order, nodes_of
from ssmax.pipeline.bundle.train import SeedWriter
from ssmax.pipeline.job import NodeJob
from ssmax.pipeline.run import plan
from ssmax.pipeline.stage_code import PACKAGE, stage_code
from ssmax.stages.spec import stage_module, stage_spec
from tests.conftest import make_cfg

pytestmark = pytest.mark.slow

TOL32 = 1e-5
SEEDS = [0, 1, 2]
F = "f_switch_during_pretrain"  # pulls in (a)'s pretraining; its switch reads (a)'s switch point
E = "e_swap_after_pretrain"  # its switch reads (a)'s final weights: no step, validation only


def common(out: Path, cache: Path, *extra: str) -> list[str]:
    return ["preset=smoke", f"paths.output_dir={out}", f"paths.cache_dir={cache}", *extra]


def bundled_args(out: Path, cache: Path) -> list[str]:
    """(e), (f) and the (a) they pull in, to SFT: (a)'s and (e)'s SFT with no epoch (their
    cost, not their training, is what this module does not need: (f)'s SFT is the one held
    to solo; an SFT setting moves no pretraining or switch node's fingerprint)."""
    no_epoch = "=['trainer.sft.epochs=0']"
    return common(out, cache, f"pipeline.variants=[{E},{F}]", "pipeline.seeds=[0,1,2]",
                  "pipeline.targets=[pretrain,switch,sft]", "executor.bundle=3",
                  f"+pipeline.overrides.a_softmax{no_epoch}",
                  f"+pipeline.overrides.{E}{no_epoch}")  # fmt: skip


def node(out: Path, name: str) -> Path:
    (folder,) = (out / "pipeline" / "nodes" / name).iterdir()
    return folder


def folder_of(overrides: list[str]) -> Path:
    (out,) = [o.split("=", 1)[1] for o in overrides if o.startswith("paths.output_dir=")]
    return Path(out)


def record(out: Path, name: str) -> dict:
    return json.loads((node(out, name) / "done.json").read_text())


def largest(a: Path, b: Path) -> float:
    x, y = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    assert x.keys() == y.keys()
    return max((x[k].double() - y[k].double()).abs().max().item() for k in x)


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> Path:
    """(a)'s pretraining of seeds 0-2 as one bundle, then (e)'s and (f)'s switch from each as
    one each, then (a)'s and (e)'s SFT (no epoch: validation only) and (f)'s, tracked."""
    out = tmp_path_factory.mktemp("bundled")
    assert main(["run", *bundled_args(out, shared_cache)]) == 0
    return out


@pytest.fixture(scope="module")
def solo(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> Path:
    """(a)'s pretraining of seeds 1 and 2 alone (seed 0's: the shared smoke pipeline)."""
    out = tmp_path_factory.mktemp("solo")
    args = common(out, shared_cache, "pipeline.variants=[a_softmax]", "pipeline.seeds=[1,2]",
                  "pipeline.targets=[pretrain]", "tracking.enabled=false")  # fmt: skip
    assert main(["run", *args]) == 0
    return out


def test_bundled_seeds_equal_their_solo_nodes(
    bundled: Path, solo: Path, smoke_pipeline: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    smoke = folder_of(smoke_pipeline)
    found = []
    for seed in SEEDS:
        name = f"pretrain/a_softmax/seed{seed}"
        mine, theirs = node(bundled, name), node(smoke if seed == 0 else solo, name)
        assert mine.name == theirs.name  # the same fingerprint: the same node
        found += [largest(mine / f, theirs / f) for f in ("model.pt", "model_step18.pt")]
        assert (mine / "data_step18.json").read_text() == (theirs / "data_step18.json").read_text()
        rec = record(bundled, name)
        assert rec["bundle"]["size"] == 3 and rec["bundle"]["seeds"] == SEEDS
        solo_rec = json.loads((theirs / "done.json").read_text())
        assert "bundle" not in solo_rec
        assert rec["outputs"].keys() == solo_rec["outputs"].keys()
        assert abs(rec["outputs"]["train_loss"] - solo_rec["outputs"]["train_loss"]) < TOL32
        assert abs(rec["outputs"]["val_loss"] - solo_rec["outputs"]["val_loss"]) < TOL32
    # (e) from each bundled (a)'s final weights, (f) from its switch point, then (f)'s SFT, each
    # as one bundle: seed 0's against the smoke pipeline's solo nodes
    later = {}
    for name in (f"switch/{E}/seed0", f"switch/{F}/seed0", f"sft/{F}/seed0"):
        mine, theirs = node(bundled, name), node(smoke, name)
        assert mine.name == theirs.name  # the same fingerprint
        rec, solo_rec = record(bundled, name), json.loads((theirs / "done.json").read_text())
        assert rec["bundle"]["seeds"] == SEEDS and "bundle" not in solo_rec
        assert list(rec["outputs"]) == list(solo_rec["outputs"])
        later[name.rsplit("/", 1)[0]] = max(largest(mine / "model.pt", theirs / "model.pt"),
                                        abs(rec["outputs"]["val_loss"]
                                            - solo_rec["outputs"]["val_loss"]))  # fmt: skip
    with capsys.disabled():
        print(f"\nbundled vs solo, largest weight or val loss difference: (a) {max(found):.3g}, "
              + ", ".join(f"{k} {v:.3g}" for k, v in later.items()))  # fmt: skip
    assert max(found) < TOL32 and max(later.values()) < TOL32


def test_each_bundled_seed_has_its_own_mlflow_run(bundled: Path, smoke_pipeline: list[str]) -> None:
    client = MlflowClient(f"sqlite:///{bundled}/mlflow.db")
    exp = client.get_experiment_by_name("ssmax-repro")
    (parent,) = client.search_runs([exp.experiment_id], "tags.kind = 'pipeline'")
    runs = client.search_runs([exp.experiment_id], "tags.stage = 'pretrain'")
    assert sorted(r.data.tags["seed"] for r in runs) == ["0", "1", "2"]
    histories = {}
    for run in runs:
        tags, seed = run.data.tags, run.data.tags["seed"]
        assert run.info.status == "FINISHED" and tags["mlflow.parentRunId"] == parent.info.run_id
        assert tags["bundle"] == "3 seeds: [0, 1, 2]" and run.data.params["seed"] == seed
        assert record(bundled, f"pretrain/a_softmax/seed{seed}")["run_id"] == run.info.run_id
        loss = client.get_metric_history(run.info.run_id, "train/loss")
        val = client.get_metric_history(run.info.run_id, "val/loss")
        assert sorted(m.step for m in loss) == list(range(0, 20, 2))  # log_every_n_steps=2
        assert sorted(m.step for m in val) == [9, 19, 20]  # as Lightning logs a solo run's
        histories[seed] = {m.step: m.value for m in loss}
    assert histories["0"] != histories["1"] != histories["2"]
    smoke = folder_of(smoke_pipeline)
    solo_id = json.loads((node(smoke, "pretrain/a_softmax/seed0") / "done.json").read_text())
    solo_client = MlflowClient(f"sqlite:///{smoke}/mlflow.db")
    solo_loss = solo_client.get_metric_history(solo_id["run_id"], "train/loss")
    assert all(abs(histories["0"][m.step] - m.value) < TOL32 for m in solo_loss)
    for stage in ("switch", "sft"):  # each seed's own run too, a child of the pipeline's
        later = client.search_runs([exp.experiment_id],
                                   f"tags.stage = '{stage}' and tags.variant = '{F}'")  # fmt: skip
        assert sorted(r.data.tags["seed"] for r in later) == ["0", "1", "2"]
        for run in later:
            assert run.info.status == "FINISHED" and run.data.tags["bundle"].startswith("3 seeds")
            name = f"{stage}/{F}/seed{run.data.tags['seed']}"
            assert record(bundled, name)["run_id"] == run.info.run_id
            assert client.get_metric_history(run.info.run_id, "val/loss")


def test_solo_finds_bundled_nodes_cached_and_a_bundle_leaves_out_done_seeds(
    bundled: Path, solo: Path, shared_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    solo_again = [a for a in bundled_args(bundled, shared_cache) if "executor.bundle" not in a]
    _, jobs = plan(solo_again)
    assert len(jobs) == 18 and all(job.done is not None for job in jobs)
    # the other way: seeds 1 and 2 made solo are cached for a bundle, which takes 3 and 4 only
    args = common(solo, shared_cache, "pipeline.variants=[a_softmax]",
                  "pipeline.seeds=[1,2,3,4]", "pipeline.targets=[pretrain]",
                  "tracking.enabled=false", "executor.bundle=3")  # fmt: skip
    capsys.readouterr()
    assert main(["run", *args]) == 0
    said = capsys.readouterr().out
    assert "run     pretrain/a_softmax/seeds3-4" in said and "4 nodes: 2 cached, 2 done" in said
    for seed in (3, 4):
        assert record(solo, f"pretrain/a_softmax/seed{seed}")["bundle"]["seeds"] == [3, 4]
    assert not list((solo / "pipeline" / "bundles").rglob("*.ckpt"))  # gone once all are done


def test_killed_bundle_resumes_to_the_uninterrupted_result(
    bundled: Path, tmp_path: Path, shared_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL after step 12 (checkpoints every 10 steps: the bundle's at 10), then the same
    command: each seed ends with the uninterrupted bundle's weights, in one MLflow run with
    each logged step once."""
    out = tmp_path / "killed"
    args = common(out, shared_cache, "pipeline.variants=[a_softmax]", "pipeline.seeds=[0,1,2]",
                  "pipeline.targets=[pretrain]", "executor.bundle=3")  # fmt: skip
    kill = "trainer.callbacks=[{_target_: tests.faults.KillAt, step: 12}]"
    first = subprocess.run([sys.executable, "-m", "ssmax.pipeline", "run", *args, kill],
                           capture_output=True, text=True, timeout=600)  # fmt: skip
    assert first.returncode == -9, first.stderr[-2000:]
    (ckpt,) = (out / "pipeline" / "bundles").rglob("*.ckpt")
    assert torch.load(ckpt, weights_only=True, mmap=True)["step"] == 10
    assert not list((out / "pipeline" / "nodes").rglob("done.json"))
    capsys.readouterr()
    assert main(["run", *args]) == 0
    assert "resumed at step 10" in capsys.readouterr().err
    client = MlflowClient(f"sqlite:///{out}/mlflow.db")
    exp = client.get_experiment_by_name("ssmax-repro")
    runs = client.search_runs([exp.experiment_id], "tags.stage = 'pretrain'")
    assert len(runs) == 3 and {r.info.status for r in runs} == {"FINISHED"}
    for run in runs:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
        assert sorted(steps) == list(range(0, 20, 2))  # each once, none missing
    for seed in SEEDS:
        name = f"pretrain/a_softmax/seed{seed}"
        for file in ("model.pt", "model_step18.pt"):
            assert largest(node(out, name) / file, node(bundled, name) / file) == 0.0
    assert not list(ckpt.parent.glob("*.ckpt"))


EVALS = ("eval_loss", "eval_niah")  # the latter: NIAH, the needle scores, the copy probe
# seconds, not minutes: one SFT epoch of 16 examples, each eval's every part at one size
SHORT = ("trainer.sft.epochs=1", "data.sft_num_examples=16", "eval.loss.sequences=1",
         "eval.niah.context_multiples=[2]", "eval.niah.depths=[0.5]",
         "eval.needle_scores.trials=1", "eval.copy_probe.count=2")  # fmt: skip


def eval_args(out: Path, cache: Path, *extra: str) -> list[str]:
    return common(out, cache, "pipeline.variants=[a_softmax]", "pipeline.seeds=[0,1,2]",
                  f"pipeline.targets=[{','.join(EVALS)}]", *SHORT, *extra)  # fmt: skip


@pytest.fixture(scope="module")
def evals(bundled: Path, tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> Path:
    """(a)'s evals of seeds 0-2 from the bundled (a): their inputs (SFT) made once, then the
    evals solo in one copy of that folder and bundled in another (the same input files)."""
    base = tmp_path_factory.mktemp("evals")
    shutil.copytree(bundled, base / "inputs")
    made = eval_args(base / "inputs", shared_cache, "pipeline.targets=[rope_pretrained,rope_sft]",
                     "tracking.enabled=false")  # fmt: skip
    assert main(["run", *made]) == 0
    for kind in ("solo", "bundled"):
        shutil.copytree(base / "inputs", base / kind)
    assert main(["run", *eval_args(base / "solo", shared_cache)]) == 0
    assert main(["run", *eval_args(base / "bundled", shared_cache, "executor.bundle=3")]) == 0
    return base


def test_bundled_evals_write_what_their_solo_nodes_write(evals: Path) -> None:
    """Bit for bit: every output file and value, each seed's MLflow run and its metrics (the
    system metrics of the process aside)."""
    clients = {k: MlflowClient(f"sqlite:///{evals / k}/mlflow.db") for k in ("solo", "bundled")}
    for stage in EVALS:
        for seed in SEEDS:
            name = f"{stage}/a_softmax/seed{seed}"
            mine, theirs = node(evals / "bundled", name), node(evals / "solo", name)
            assert mine.name == theirs.name  # the same fingerprint: the same node
            rec, solo_rec = record(evals / "bundled", name), record(evals / "solo", name)
            assert rec["bundle"]["size"] == 3 and rec["bundle"]["seeds"] == SEEDS
            assert "bundle" not in solo_rec and rec.keys() - solo_rec.keys() == {"bundle"}
            text = json.dumps(rec["outputs"], sort_keys=True)
            assert text.replace(str(evals / "bundled"), str(evals / "solo")) == json.dumps(
                solo_rec["outputs"], sort_keys=True
            )  # the same values, each file in its own node's folder
            files = sorted(p.name for p in theirs.iterdir() if p.suffix in (".csv", ".json"))
            assert len(files) > 1
            for file in files:  # outputs; config.yaml names its output folder
                if file != "done.json":
                    assert (mine / file).read_bytes() == (theirs / file).read_bytes(), file
            run = clients["bundled"].get_run(rec["run_id"])
            solo_run = clients["solo"].get_run(solo_rec["run_id"])
            assert run.info.status == "FINISHED" and run.data.tags["seed"] == str(seed)
            values = {k: v for k, v in run.data.metrics.items() if not k.startswith("system/")}
            assert values and values == {k: solo_run.data.metrics[k] for k in values}


def test_a_bundle_waits_for_its_seeds_inputs_and_goes_on_without_blocked_ones(
    tmp_path: Path,
) -> None:
    """in_order: an eval bundle placed where its first seed stood moves after its last seed's
    input (the in-process executor runs in this order); blocked_nodes: a seed whose input
    failed is blocked, the bundle goes on with the others."""

    def job(stage: str, seed: int, inputs: tuple[str, ...] = ()) -> NodeJob:
        return NodeJob(f"{stage}/a/seed{seed}", stage, stage, False, False, "a", seed, "", "",
                       str(tmp_path), {i: str(tmp_path) for i in inputs})  # fmt: skip

    sft = [job("sft", s) for s in SEEDS]
    evals_ = [job("eval_niah", s, (sft[s].name,)) for s in SEEDS]
    bundle = BundleJob(evals_, str(tmp_path))
    ordered = in_order([sft[0], bundle, sft[1], sft[2]])
    assert [u.name for u in ordered] == [*(s.name for s in sft), "eval_niah/a/seeds0-2"]
    states = {sft[0].name: "done", sft[1].name: "failed", sft[2].name: "done"}
    assert blocked_nodes(bundle, states) == ({evals_[1].name: "blocked"}, False)
    assert bundle.seeds == [0, 2] and set(bundle.input_dirs) == {sft[0].name, sft[2].name}
    states[sft[0].name] = "failed"
    assert blocked_nodes(bundle, states) == ({evals_[0].name: "blocked"}, False)
    states[sft[2].name] = "blocked"
    assert blocked_nodes(bundle, states) == ({evals_[2].name: "blocked"}, True)


def test_no_fingerprint_reads_the_bundle_code() -> None:
    """A bundle moves no node's fingerprint: the code of a stage it trains (which the node's
    fingerprint hashes) reaches none of the bundle's modules, which a solo node never runs.
    (Measured too: the 133 nodes of the smoke pipeline with seeds 0-2 have the same
    fingerprints before and after switch and SFT were bundled.)"""
    modules = [p.stem for p in (PACKAGE / "stages").glob("[!_]*.py")
               if hasattr(stage_module(p.stem), "SPEC")]  # fmt: skip
    bundled = [m for m in modules if stage_spec(m).bundle == TRAIN]
    assert bundled, "no stage declares bundle='train'"
    for module in bundled:
        assert not [f for f in stage_code(module) if "bundle" in f], module


def test_a_bundle_resumes_only_from_a_checkpoint_of_its_own_nodes(tmp_path: Path) -> None:
    """A switch's or SFT's bundle folder is named by the seedless config, not by its inputs: a
    checkpoint left there by seeds of other inputs (other fingerprints: (a) trained again) is
    not resumed from; one of these nodes is."""
    members = [NodeJob(f"switch/{F}/seed{s}", "switch", "switch", True, False, F, s, "",
                       f"fp{s}", str(tmp_path / f"seed{s}"), {}) for s in SEEDS]  # fmt: skip
    job = BundleJob(members, str(tmp_path / "bundle"))
    cfg = make_cfg("preset=smoke")
    writer = SeedWriter(job, members, [cfg] * len(SEEDS), config_plans(cfg, SEEDS))
    Path(job.dir).mkdir()

    def checkpoint(name: str, step: int, prints: list[str]) -> None:
        k = len(SEEDS)
        state = {"seeds": SEEDS, "step": step, "params": {}, "val": {}, "last_batch": None,
                 "optimizer": {"state": {}, "param_groups": []}, "data": [{}] * k,
                 "losses": torch.zeros(step, k), "grad_norms": torch.zeros(step, k),
                 "nodes": [[m.dir, fp] for m, fp in zip(members, prints, strict=True)]}  # fmt: skip
        torch.save(state, Path(job.dir) / name)

    class Run:
        seeds, loaded, step = SEEDS, None, 0

        def load_state_dict(self, state: dict) -> None:
            self.loaded = self.step = state["step"]

    checkpoint("stale.ckpt", 7, ["old0", "old1", "old2"])
    run = Run()
    writer.resume(run)  # type: ignore[arg-type]
    assert run.loaded is None
    checkpoint("own.ckpt", 5, ["fp0", "fp1", "fp2"])
    writer.resume(run)  # type: ignore[arg-type]
    assert run.loaded == 5


def test_a_bundle_stands_after_its_seeds_inputs_and_goes_on_without_a_blocked_seed(
    tmp_path: Path,
) -> None:
    """The DAG lists seed by seed; a bundle of (f)'s switch nodes stands after every seed's
    (a), bundled or solo. An (a) that failed blocks its own seed's (f) only."""
    cfg, jobs = plan(bundled_args(tmp_path, tmp_path / "cache"))
    solo_a = [dataclasses.replace(j, cfg_yaml=j.cfg_yaml.replace("init_from: null", "init_from: x"))
              if j.module == "pretrain" else j for j in jobs]  # fmt: skip
    # (a)'s pretraining and SFT, (e)'s and (f)'s switch and SFT ((a) comes with its chain);
    # (a)'s pretraining solo (from other weights): seed 2's stands after seed 0's bundles
    cases = [(2, jobs, ["0-1", "2"] * 6), (3, solo_a, ["0", "1", "2"] + ["0-2"] * 5),
             (3, jobs, ["0-2"] * 6)]  # fmt: skip
    for size, nodes, want in cases:
        cfg.executor.bundle = size
        units = grouping.bundled(cfg, nodes, lambda line: None)
        seen: set[str] = set()
        for unit in units:
            assert all(i in seen for i in unit.input_dirs), unit.name
            seen.update(n.name for n in nodes_of(unit))
        named = [u.name.rsplit("seeds", 1)[-1] if isinstance(u, BundleJob)
                 else u.name.rsplit("seed", 1)[-1] for u in units]  # fmt: skip
        assert sorted(named) == sorted(want)
    switch = next(u for u in units if u.name.startswith(f"switch/{F}"))
    states = {"pretrain/a_softmax/seed1": "failed"}
    assert blocked_nodes(switch, states) == ({f"switch/{F}/seed1": "blocked"}, False)
    assert switch.seeds == [0, 2] and "pretrain/a_softmax/seed1" not in switch.input_dirs
