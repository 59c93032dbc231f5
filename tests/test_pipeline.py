"""The DAG as data, fingerprints and caching, and the smoke pipeline run end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from ssmax.pipeline.__main__ import main
from ssmax.pipeline.dag import build_dag, downstream
from ssmax.pipeline.declaration import load
from ssmax.pipeline.run import plan
from ssmax.tracking.store import tracking_uri

PAPER = load("paper")
ALL_VARIANTS = PAPER.variants


def test_dag_follows_the_paper() -> None:
    dag = build_dag(PAPER, list(ALL_VARIANTS), [0, 1])
    assert dag["switch/e_swap_after_pretrain/seed0"].inputs == ("pretrain/a_softmax/seed0",)
    assert dag["switch/f_switch_during_pretrain/seed1"].inputs == ("pretrain/a_softmax/seed1",)
    assert dag["sft/e_swap_after_pretrain/seed0"].inputs == ("switch/e_swap_after_pretrain/seed0",)
    assert dag["eval_niah/b_ssmax/seed1"].inputs == ("rope_sft/b_ssmax/seed1",)
    assert dag["rope_sft/b_ssmax/seed1"].inputs == ("sft/b_ssmax/seed1",)
    assert dag["eval_loss/c_ssmax_no_scale/seed0"].inputs == (
        "rope_pretrained/c_ssmax_no_scale/seed0",
    )
    assert not any(n.startswith(("sft/pn", "eval_loss/pn")) for n in dag)  # Fig. 2 only
    assert "pretrain/pn_rationale/seed1" in dag["report"].inputs
    # the export: every variant's models, whichever it has
    assert dag["export/b_ssmax/seed1"].inputs == ("pretrain/b_ssmax/seed1", "sft/b_ssmax/seed1")
    assert dag["export/e_swap_after_pretrain/seed0"].inputs == (
        "switch/e_swap_after_pretrain/seed0", "sft/e_swap_after_pretrain/seed0",
    )  # fmt: skip
    assert dag["export/pn_rationale/seed0"].inputs == ("pretrain/pn_rationale/seed0",)
    assert "export/pn_rationale/seed0" in dag["report"].inputs
    names = list(dag)
    for node in dag.values():  # inputs always come first
        assert all(names.index(i) < names.index(node.name) for i in node.inputs)
    assert len(dag) == 2 * (4 * 7 + 2 * 7 + 2) + 1  # + an export per variant and seed


def test_switched_variants_pull_in_softmax() -> None:
    dag = build_dag(PAPER, ["f_switch_during_pretrain"], [0])
    assert "pretrain/a_softmax/seed0" in dag
    assert downstream(dag, {"pretrain/a_softmax/seed0"}) >= {
        "switch/f_switch_during_pretrain/seed0",
        "eval_niah/f_switch_during_pretrain/seed0",
        "report",
    }
    with pytest.raises(ValueError, match="pipeline.variants: unknown"):
        build_dag(PAPER, ["z_magic"], [0])


def test_targets_plan_their_stages_and_what_they_need(tmp_path: Path, capsys) -> None:
    # (f)'s Fig. 5 loss needs (a)'s pretraining and its own switch; the nodes are those of the
    # whole DAG, fingerprints included: a later full run finds them cached.
    common = ["preset=smoke", "pipeline.variants=[f_switch_during_pretrain]",
              f"paths.output_dir={tmp_path}"]  # fmt: skip
    _, whole = plan(common)
    _, cut = plan([*common, "pipeline.targets=[eval_loss]"])
    assert [j.name for j in cut] == [
        "pretrain/a_softmax/seed0", "rope_pretrained/a_softmax/seed0", "eval_loss/a_softmax/seed0",
        "switch/f_switch_during_pretrain/seed0", "rope_pretrained/f_switch_during_pretrain/seed0",
        "eval_loss/f_switch_during_pretrain/seed0",
    ]  # fmt: skip
    assert {j.name: j.fingerprint for j in cut} == {
        j.name: j.fingerprint for j in whole if j.name in {c.name for c in cut}
    }
    _, pretraining = plan([*common, "pipeline.targets=[pretrain,switch]"])
    assert [j.stage for j in pretraining] == ["pretrain", "switch"]
    assert main(["plan", *common, "pipeline.targets=[eval_los]"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pipeline.targets: 'eval_los' is not a stage" in err
    assert "allowed: pretrain, switch, rope_pretrained, eval_loss," in err


def test_a_plan_composes_each_config_once(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Composing costs 0.12-0.15 s of CPU: `plan` (and `run`) compose the pipeline's config once and
    each variant's once; the reference config that names a misspelled key's neighbours
    (check_override_keys) only once composing failed (test_user_mistakes: its one line)."""
    import ssmax.config.compose as compose_module
    import ssmax.config.remembered as remembered

    composed = []

    def counted(*overrides: str, config_name: str = "config") -> object:
        composed.append(overrides)
        return compose(*overrides, config_name=config_name)

    compose = compose_module.compose
    monkeypatch.setattr(compose_module, "compose", counted)  # check_override_keys's
    monkeypatch.setattr(remembered, "compose", counted)  # plan's (new overrides: not remembered)
    settings = ["preset=smoke", "pipeline.variants=[a_softmax,b_ssmax]",
                "trainer.pretrain.lr=0.001", f"paths.output_dir={tmp_path}"]  # fmt: skip
    assert main(["plan", *settings]) == 0
    assert len(composed) == 1 + 2  # the pipeline's, then (a)'s and (b)'s
    assert "pretrain/b_ssmax/seed0" in capsys.readouterr().out


def test_scaling_laws_run_beside_a_and_b() -> None:
    decl = load("scaling_laws")
    dag = build_dag(decl, decl.variants, [0])
    assert dag["switch/g_qwen_logn_inference/seed0"].inputs == ("pretrain/a_softmax/seed0",)
    # (g)'s law at inference only: its SFT model is (a)'s, not one trained under the law
    assert dag["sft/g_qwen_logn_inference/seed0"].inputs == ("sft/a_softmax/seed0",)
    for variant in ("b_ssmax", "h_qwen_logn", "i_llama4_temp", "j_sqrt_log_n"):
        assert dag[f"eval_niah/{variant}/seed0"].inputs == (f"rope_sft/{variant}/seed0",)
    assert len(dag) == 6 * 7 + 1 and decl.stages == PAPER.stages


def to_run(overrides: list[str]) -> set[str]:
    _, jobs = plan(overrides)
    return {job.name for job in jobs if job.done is None}


@pytest.fixture
def smoke_run(smoke_pipeline_held: list[str]) -> list[str]:
    return smoke_pipeline_held  # the run's smoke pipeline (conftest), held: a test adds a run


def test_smoke_pipeline_reports_every_variant(smoke_run: list[str]) -> None:
    cfg, jobs = plan(smoke_run)
    assert all(job.done is not None for job in jobs)
    report = next(j for j in jobs if j.stage == "report").done["outputs"]
    text = Path(report["report_md"]).read_text()
    for variant in ALL_VARIANTS:
        assert f"| {variant} |" in text
    results = report["results"]
    assert set(results["b_ssmax"]) >= {"pretrain val loss", "loss @1x", "loss @4x", "niah @2x"}
    assert 0.0 <= results["d_ssmax_bias"]["niah @4x"]["0"] <= 1.0  # seed 0 (JSON: text)


def test_second_run_is_all_cached_and_visible_in_mlflow(smoke_run: list[str], capsys) -> None:
    cfg, _ = plan(smoke_run)
    client = MlflowClient(tracking_uri(cfg))
    exp = client.get_experiment_by_name(cfg.tracking.experiment)

    def parents() -> list:
        return client.search_runs(
            [exp.experiment_id], "tags.kind = 'pipeline'", order_by=["start_time ASC"]
        )

    before = len(parents())  # the session's run, and any other test's re-runs
    assert main(["run", *smoke_run]) == 0
    out = capsys.readouterr().out
    assert "45 nodes: 45 cached" in out and "\nrun " not in out
    runs = parents()
    assert len(runs) == before + 1 and all(p.info.status == "FINISHED" for p in runs)
    first, second = runs[0].info.run_id, runs[-1].info.run_id  # the one that ran, this one
    children = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{first}'")
    assert len(children) == 45
    by_node = {c.data.tags["node"]: c for c in children}
    sft_b = by_node["sft/b_ssmax/seed0"]
    assert sft_b.data.tags["stage"] == "sft" and sft_b.data.metrics["train/loss"] > 0
    cached = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{second}'")
    assert len(cached) == 45 and all(c.data.tags["cached"] == "true" for c in cached)
    linked = next(c for c in cached if c.data.tags["node"] == "sft/b_ssmax/seed0")
    assert linked.data.tags["source_run_id"] == sft_b.info.run_id
    artifacts = [a.path for a in client.list_artifacts(second)]
    assert "report.md" in artifacts


def test_one_sft_setting_reruns_exactly_its_downstream(smoke_run: list[str]) -> None:
    changed = to_run([*smoke_run, "+pipeline.overrides.b_ssmax=['trainer.sft.lr=0.002']"])
    assert changed == {
        "sft/b_ssmax/seed0",
        "rope_sft/b_ssmax/seed0",
        "eval_niah/b_ssmax/seed0",
        "export/b_ssmax/seed0",
        "report",
    }
    pretrain = to_run([*smoke_run, "trainer.pretrain.max_steps=22"])
    assert (
        "pretrain/a_softmax/seed0" in pretrain
        and "switch/f_switch_during_pretrain/seed0" in (pretrain)
        and len(pretrain) == 45
    )


def test_gpu1_preset_runs_end_to_end_at_toy_dimensions(tmp_path: Path, shared_cache: Path) -> None:
    """The one-GPU preset's own settings (batches, schedule, evals, cuts) through every node to
    the report, on the CPU: only the model's dimensions, the steps and the eval sizes are made
    toy-sized. Strict reads; a non-default attention backend for the evals."""
    overrides = [
        "preset=gpu1", "model.n_layers=2", "model.n_heads=2", "model.dim=64", "model.ffn_dim=128",
        "data=embedded", "data.vocab_size=512", "data.seq_len=128", "data.sft_num_examples=64",
        "pipeline.variants=[a_softmax,b_ssmax]", "pipeline.strict_reads=true",
        "trainer.pretrain.max_steps=4", "trainer.pretrain.warmup_steps=1",
        "trainer.pretrain.global_batch=8", "trainer.pretrain.batch_size=8",
        "trainer.sft.epochs=1", "trainer.sft.batch_size=8", "trainer.sft.global_batch=8",
        "trainer.val_every_n_steps=2", "trainer.checkpoint_every_n_steps=2",
        "eval.loss.sequences=2", "eval.niah.samples=1", "eval.needle_scores.trials=2",
        "eval.niah.compile=false",  # inductor on the CPU: test_compiled_decoding_is_eager_...
        "eval.sdpa_first=math", f"paths.output_dir={tmp_path}", f"paths.cache_dir={shared_cache}",
    ]  # fmt: skip
    assert main(["run", *overrides]) == 0
    _, jobs = plan(overrides)
    assert all(job.done is not None for job in jobs) and len(jobs) == 15
    report = next(j for j in jobs if j.stage == "report").done["outputs"]
    text = Path(report["report_md"]).read_text()
    assert "| cut: eval.niah.samples | 1 here; paper 1,000 per (context, depth) cell" in text
    assert '| eval.sdpa_first | "math" |' in text


def test_plan_names_bad_input(capsys, tmp_path: Path) -> None:
    assert (
        main(
            [
                "plan",
                "preset=smoke",
                "pipeline.variants=[a_softmax,zz]",
                f"paths.output_dir={tmp_path}",
            ]
        )
        == 2
    )
    assert "pipeline.variants: unknown ['zz']" in capsys.readouterr().err
    assert main(["launch", "preset=smoke"]) == 2


def test_tracking_off_logs_nothing_to_mlflow(tmp_path: Path, shared_cache: Path) -> None:
    """tracking.enabled=false: the nodes run and keep their records, and no MLflow store,
    artifact folder or run (the pipeline's, an eval's) is made."""
    overrides = ["preset=smoke", "pipeline.variants=[a_softmax]", "pipeline.targets=[eval_loss]",
                 "tracking.enabled=false", f"paths.output_dir={tmp_path}",
                 f"paths.cache_dir={shared_cache}"]  # fmt: skip
    assert main(["run", *overrides]) == 0
    _, jobs = plan(overrides)
    assert {j.stage for j in jobs} == {"pretrain", "rope_pretrained", "eval_loss"}
    assert all(job.done is not None and job.done["run_id"] is None for job in jobs)
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlartifacts").exists()


def test_local_nodes_take_their_share_of_the_cores_at_most_omp_num_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """executor=local: a node's torch threads are the cores / workers, bounded by
    OMP_NUM_THREADS where it is set (a test suite's worker, a batch job), never below 1."""
    from ssmax.pipeline.local import node_threads

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert [node_threads(w) for w in (1, 2, 3, 16)] == [8, 4, 2, 1]
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert [node_threads(w) for w in (1, 2, 3, 16)] == [2, 2, 2, 1]
    for unset in ("", "0", "many"):  # not a count: the share alone
        monkeypatch.setenv("OMP_NUM_THREADS", unset)
        assert node_threads(1) == 8


def test_executor_order_seed_finishes_a_seed_before_starting_the_next(
    tmp_path: Path, shared_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """executor.order=seed (the registered GPU run's): one worker takes seed 0's eval before
    seed 1's pretraining, so a run stopped midway has whole seeds. The default (path) takes
    the longer chain first: both pretrainings, then the evals (measured: that order here)."""
    overrides = ["preset=smoke", "pipeline.variants=[a_softmax]", "pipeline.seeds=[0,1]",
                 "pipeline.targets=[eval_loss]", "executor=local", "executor.workers=1",
                 "executor.order=seed", "trainer.pretrain.max_steps=2",
                 "tracking.enabled=false", f"paths.output_dir={tmp_path}",
                 f"paths.cache_dir={shared_cache}"]  # fmt: skip
    assert main(["run", *overrides]) == 0
    started = [line.split()[1] for line in capsys.readouterr().out.splitlines()
               if line.startswith("run ") and "(pid" in line]  # fmt: skip  # a worker's
    assert started == ["pretrain/a_softmax/seed0", "eval_loss/a_softmax/seed0",
                       "pretrain/a_softmax/seed1", "eval_loss/a_softmax/seed1"]  # fmt: skip
