"""`plan` prints what a pipeline costs before it runs: tokens, FLOPs, GPU-hours, wall, disk."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ssmax.pipeline import measured
from ssmax.pipeline.__main__ import main
from ssmax.pipeline.declaration import PIPELINES_DIR, available, load
from ssmax.pipeline.plan_cost import (
    NodeCost,
    critical_path_hours,
    downstream_flops,
    duration,
    plan_costs,
    scheduled_hours,
    stage_cost,
)
from ssmax.pipeline.run import plan
from ssmax.stages.costing import StageCost, per_token
from ssmax.stages.spec import StageSpec

PAPER_N = 162_148_608  # App. A, Table 1 model, variant (a) (conf/model/llama_162m.yaml)
H100 = 989e12 * 0.40  # the cost block's peak and MFU


pytestmark = pytest.mark.slow  # composing the paper DAG's node configs: ~10 s


@pytest.fixture(scope="module")
def paper(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("plan")
    variants = "[b_ssmax,e_swap_after_pretrain,f_switch_during_pretrain,pn_rationale]"  # + (a)
    base, jobs = plan(
        [
            "preset=paper",
            "executor=slurm",
            "executor/slurm/profile=gpu8",
            f"pipeline.variants={variants}",
            f"paths.output_dir={out}",
            f"cost.measured_file={out}/none.json",
        ]
    )  # fmt: skip; the assumed MFU
    return {"base": base, "costs": {c.name: c for c in plan_costs(base, jobs)}}


def test_paper_pretraining_cost(paper: dict) -> None:
    a = paper["costs"]["pretrain/a_softmax/seed0"]
    tokens = 200_000 * 2048 * 1024  # Sec. 3.1 / App. B: 200k steps of 2048 x 1024 tokens
    assert a.tokens == tokens
    assert a.flops == tokens * (6 * PAPER_N + 12 * 12 * 768 * 1024)
    assert a.gpu_hours(H100) == pytest.approx(a.flops / H100 / 3600)
    assert a.gpus == 8 and a.wall_hours(H100) == pytest.approx(a.gpu_hours(H100) / 8)
    assert a.disk == PAPER_N * (12 + 4 + 4)  # last.ckpt with Adam, model.pt, model_step.pt
    f = paper["costs"]["switch/f_switch_during_pretrain/seed0"]
    assert f.tokens == 25_000 * 2048 * 1024  # the last 12.5%
    assert paper["costs"]["pretrain/pn_rationale/seed0"].tokens == f.tokens  # 25k steps
    e = paper["costs"]["switch/e_swap_after_pretrain/seed0"]
    assert e.tokens == e.flops == e.gpus == 0


def test_paper_eval_cost(paper: dict) -> None:
    loss = paper["costs"]["eval_loss/b_ssmax/seed0"]
    # Sec. 3.2 (+ 1: the last position's target), then the first 1x at the training theta
    assert loss.tokens == 100_000 * 20_001 + 100_000 * 1025
    assert loss.gpus == 1  # the profile's default: one GPU per eval job
    niah = paper["costs"]["eval_niah/b_ssmax/seed0"]
    cells = 5 * 1000  # Sec. 3.3: 5 depths x 1000 samples per context
    contexts = sum(m * 1024 for m in (1, 2, 4, 6, 8, 10))
    base = 1 * 1024  # the same cells at 1x with the training theta (base_theta_multiples)
    # + Fig. 7's map and Fig. 8's 100 trials
    assert niah.tokens == cells * (contexts + base) + 8000 * 101


def test_critical_path_is_the_longest_chain(paper: dict) -> None:
    costs = list(paper["costs"].values())
    chain = ["pretrain/a_softmax/seed0", "switch/f_switch_during_pretrain/seed0",
             "eval_loss/f_switch_during_pretrain/seed0"]  # fmt: skip
    longest = sum(paper["costs"][n].wall_hours(H100) for n in chain)
    assert critical_path_hours(costs, H100) == pytest.approx(longest)
    assert longest < sum(c.wall_hours(H100) for c in costs)


def test_plan_prints_the_dag_and_the_cost_table(tmp_path: Path, capsys) -> None:
    gpu = "preset.hardware=gpu"  # the smoke preset costed as a GPU one's
    assert main(["plan", "preset=smoke", gpu, f"paths.output_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "to-run  pretrain/a_softmax/seed0" in out and "nodes: 0 cached" in out
    # nothing measured for the smoke model: every kind says what it assumed, every row too
    for kind in ("training", "Fig. 5 loss", "NIAH"):
        assert f"  {kind}: assumed 40% MFU of 989 TFLOP/s = 395.6 TFLOP/s" in out
    row = next(line for line in out.splitlines() if line.startswith("pretrain/b_ssmax/seed0 "))
    assert len(row.split()) == 10 and row.split()[4] == "assumed"  # disk is 2 words
    assert next(line for line in out.splitlines() if line.startswith("total "))
    assert "with independent nodes side by side" in out and "shards (data.shards_dir" in out


def test_a_cpu_preset_is_costed_on_a_cpu_before_any_node_finished(tmp_path: Path, capsys) -> None:
    # a fresh tiny folder was costed at an H100's rate: 0.03 s for a pretraining that takes
    # minutes here. A CPU preset's nodes take cost.cpu_flops and no GPU-hours.
    args = ["plan", "preset=tiny", f"paths.output_dir={tmp_path}", "cost.cpu_flops=1e10"]
    base, jobs = plan(args[1:])
    costs = {c.name: c for c in plan_costs(base, jobs)}
    pretrain = costs["pretrain/b_ssmax/seed0"]
    assert pretrain.cpu and pretrain.gpus == 0 and pretrain.gpu_hours(H100) == 0
    assert pretrain.wall_hours(H100) == pytest.approx(pretrain.flops / 1e10 / 3600)
    assert pretrain.basis == "assumed" and pretrain.flops > 1e12
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "cost on a CPU" in out and "CPU nodes: assumed 10 GFLOP/s a node" in out
    row = next(line for line in out.splitlines() if line.startswith("pretrain/b_ssmax/seed0 "))
    assert row.split()[3:6] == ["-", "assumed", "cpu"] and "TFLOP/s" not in out


def test_downstream_flops_orders_the_longest_remaining_path_first(paper: dict) -> None:
    def node(name: str, flops: float, *inputs: str) -> NodeCost:
        return NodeCost(name, 0, flops, 1, 0, list(inputs))

    # a -> b -> d and a -> c; e alone: d's chain outweighs c's, e waits on nothing
    costs = [node("a", 1), node("e", 5), node("b", 2, "a"), node("c", 4, "a"), node("d", 3, "b")]
    assert downstream_flops(costs) == {"a": 6, "e": 5, "b": 5, "c": 4, "d": 3}
    level = downstream_flops(list(paper["costs"].values()))
    first = max(level, key=level.__getitem__)
    assert first == "pretrain/a_softmax/seed0"  # (e) and (f) wait on it as well


def test_plan_uses_the_rates_measured_on_the_named_gpu(tmp_path: Path, capsys) -> None:
    """A measured-throughput file (as `make bench` writes it) sets each kind of node's
    GPU-hours and is named in the table; another GPU's plan falls back to the assumed MFU."""
    rates = tmp_path / "throughput.json"
    common = {"measured": "2026-01-02", "commit": "abc1234", "batch": 4}
    measured.record(rates, "Test GPU X1 96GB", "smoke", "train", value=2e5, length=64, **common)
    measured.record(rates, "Test GPU X1 96GB", "smoke", "eval_loss", value=0.5, length=2000,
                    **common)  # fmt: skip
    measured.record(rates, "Test GPU X1 96GB", "smoke", "niah", value=0.01, length=256, **common)
    args = ["preset=smoke", "preset.hardware=gpu", f"paths.output_dir={tmp_path}",
            f"cost.measured_file={rates}"]  # fmt: skip
    base, jobs = plan([*args, "cost.gpu=x1"])
    costs = {c.name: c for c in plan_costs(base, jobs)}
    cfg = base  # the smoke preset's model, as (a) has it: (b)'s s adds 1e-5 to the FLOPs
    train = costs["pretrain/b_ssmax/seed0"]
    assert train.rate is not None and train.rate.device == "Test GPU X1 96GB"
    # at the measured sequence length (the smoke preset's own: 64) hours are tokens / rate
    assert cfg.data.seq_len == 64
    assert train.gpu_hours(1.0) == pytest.approx(train.tokens / 2e5 / 3600)
    loss = costs["eval_loss/b_ssmax/seed0"]  # FLOPs at the FLOP/s one 2,000-token pass reached
    flop_rate = 2000 * per_token(cfg, 2000, training=False)[0] / 0.5
    assert loss.gpu_hours(1.0) == pytest.approx(loss.flops / flop_rate / 3600, rel=1e-4)
    assert costs["eval_niah/b_ssmax/seed0"].rate.kind == "niah"

    assert main(["plan", *args, "cost.gpu=x1"]) == 0
    out = capsys.readouterr().out
    assert "  training: 200,000 tokens/s at sequence length 64, batch 4 (measured: Test GPU X1 " \
        "96GB, 2026-01-02, abc1234)" in out  # fmt: skip
    assert "  Fig. 5 loss: 500.0 ms per sequence of 2,000 tokens" in out
    assert "  NIAH: 10.0 ms per sample at 256 tokens" in out and "assumed" not in out
    assert main(["plan", *args, "cost.gpu=H200"]) == 0  # nothing measured on an H200
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("pretrain/b_ssmax/seed0 "))
    assert "(measured:" not in out and row.split()[4] == "assumed"
    assert "  training: assumed 40% MFU" in out


def test_a_measured_file_that_is_not_json_is_one_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "throughput.json"
    bad.write_text("{not json")
    code = main(["plan", "preset=smoke", f"paths.output_dir={tmp_path}",
                 f"cost.measured_file={bad}"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"cost.measured_file={bad} is not JSON" in err


def test_the_project_file_holds_what_each_rate_needs() -> None:
    """bench/throughput.json (what `make bench` wrote, or the issue's H100 figures): every
    entry loads, with its unit, the date and what it was measured on."""
    data = measured.load()
    assert data, "bench/throughput.json is missing or empty"
    for device, models in data.items():
        for model, kinds in models.items():
            for kind, entry in kinds.items():
                assert entry["unit"] == measured.KINDS[kind]
                rate = measured.lookup(data, device, model, kind)
                assert rate is not None and rate.value > 0 and rate.measured.startswith("20")


def test_gpu1_is_the_paper_cut_to_one_gpu_day(tmp_path: Path) -> None:
    """gpu1: the paper preset's model, data, tokenizer, length and evals; each cut names a key
    whose value differs from the paper's and is shown in the report's settings; one seed of the
    whole pipeline at the rates measured on an H100 (bench/throughput.json) <= 24 GPU-hours."""
    from omegaconf import OmegaConf

    from ssmax.config.compose import compose
    from ssmax.report.build import settings_from_cfg

    base, jobs = plan(["preset=gpu1", f"paths.output_dir={tmp_path}"])
    paper_cfg = compose("preset=paper", f"paths.output_dir={tmp_path}")
    for key in ("model", "data", "eval.niah.context_multiples", "eval.niah.depths",
                "eval.loss.max_multiple", "eval.needle_scores", "trainer.pretrain.global_batch",
                "trainer.pretrain.lr", "trainer.sft.global_batch"):  # fmt: skip
        assert OmegaConf.select(base, key) == OmegaConf.select(paper_cfg, key), key
    details = settings_from_cfg(base).details
    assert base.preset.cuts, "gpu1 states its cuts"
    for key, paper in base.preset.cuts.items():
        here = OmegaConf.select(base, key)
        assert here is not None and here != OmegaConf.select(paper_cfg, key), key
        assert details[f"cut: {key}"] == f"{here} here; {paper}"
    costs = plan_costs(base, jobs)
    assert all(c.rate is not None for c in costs if c.flops)  # every number measured on an H100
    assert sum(c.gpu_hours(1.0) for c in costs) <= 24


def test_more_seeds_cost_what_the_finished_seed_took(smoke_pipeline: list[str], capsys) -> None:
    """Nodes of a seed not run yet take the wall time the finished seed's twins recorded
    (their FLOP/s applied to the same FLOPs), and the table says so (basis "done")."""
    overrides = [*smoke_pipeline, "pipeline.seeds=[0,7]"]
    base, jobs = plan(overrides)
    costs = {c.name: c for c in plan_costs(base, jobs)}
    twins = [j for j in jobs if j.seed == 0 and not j.inline and j.done is not None]
    assert len(twins) >= 10
    for twin in twins:
        new = costs[twin.name.replace("seed0", "seed7")]
        assert new.seconds == pytest.approx(twin.done["wall_s"]), twin.name
        assert new.basis == "done" and new.wall_hours(1.0) == pytest.approx(new.seconds / 3600)
    # twice the pretraining steps: twice the FLOPs of the twin's record, twice its seconds
    base, jobs = plan([*overrides, "trainer.pretrain.max_steps=40"])
    longer = {c.name: c for c in plan_costs(base, jobs)}["pretrain/b_ssmax/seed7"]
    twin = next(j for j in twins if j.name == "pretrain/b_ssmax/seed0")
    assert twin.done["flops"] == costs["pretrain/b_ssmax/seed7"].flops > 0
    assert longer.seconds == pytest.approx(2 * twin.done["wall_s"])
    assert main(["plan", *overrides, "executor=local"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("pretrain/b_ssmax/seed7 "))
    assert row.split()[4] == "done" and "(basis done): from the wall times of finished" in out
    assert "with executor.workers=2" in out
    # what the run takes: seed 7's nodes only (seed 0's are cached), as the table prices them
    left = next(line for line in out.splitlines() if line.startswith("left to run ("))
    base, jobs = plan(overrides)
    todo = [c for c in plan_costs(base, jobs) if not c.cached]
    assert {c.name.split("/")[-1] for c in todo if "/" in c.name} == {"seed7"}
    assert left.startswith(f"left to run ({len(todo)} of {len(jobs)} nodes;")
    hours = sum(c.wall_hours(1.0) for c in todo)
    assert f"): {duration(hours)} one node after another" in left


def test_scheduled_hours_fill_the_workers_slots() -> None:
    def node(name: str, seconds: float, *inputs: str) -> NodeCost:
        return NodeCost(name, 0, seconds, 1, 0, list(inputs), seconds=seconds * 3600)

    # a(2) -> b(1); c(2); z (computes nothing) after b; d(3) after c and z
    costs = [node("a", 2), node("c", 2), node("b", 1, "a"), node("z", 0, "b"),
             node("d", 3, "c", "z")]  # fmt: skip
    assert scheduled_hours(costs, 1.0, workers=1) == 8  # one after another
    assert scheduled_hours(costs, 1.0, workers=2) == 6  # a | c, then b, then d after z
    assert scheduled_hours(costs, 1.0, workers=9) == critical_path_hours(costs, 1.0) == 6


@pytest.mark.parametrize("name", available())
def test_every_declared_stage_declares_its_cost(name: str) -> None:
    # beside its SPEC; those that compute nothing declare it (rope, report)
    for module in load(name).stages.values():
        assert stage_cost(module) is not None, module


def test_a_stage_without_a_declared_cost_shows_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stage module with a SPEC but no cost(): its nodes say so in the plan and stay out of
    its totals, where a stage that computes nothing declares zero."""
    probe = types.ModuleType("ssmax.stages.probe_no_cost")
    probe.SPEC = StageSpec(reads=("seed",))
    monkeypatch.setitem(sys.modules, probe.__name__, probe)
    decl = OmegaConf.load(PIPELINES_DIR / "paper.yaml")
    decl.stages.export = "probe_no_cost"  # the export node, run by a stage declaring no cost
    path = tmp_path / "probe.yaml"
    OmegaConf.save(decl, path)
    args = ["preset=smoke", f"pipeline.file={path}", "pipeline.variants=[a_softmax]",
            f"paths.output_dir={tmp_path}"]  # fmt: skip
    costs = {c.name: c for c in plan_costs(*plan(args))}
    assert costs["export/a_softmax/seed0"].undeclared == "probe_no_cost"
    rope = costs["rope_pretrained/a_softmax/seed0"]  # declared: nothing
    assert rope.undeclared is None and rope.tokens == rope.flops == rope.disk == 0
    assert stage_cost("rope")(OmegaConf.create(), "rope_sft", []) == StageCost()
    assert main(["plan", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if line.startswith("export/a_softmax/seed0 "))
    assert row.split()[1:] == ["no", "cost", "declared", "(ssmax.stages.probe_no_cost)"]
    assert ("not counted: 1 nodes whose stage declares no cost (ssmax.stages.probe_no_cost: no "
            "cost(cfg, stage, inputs) beside its SPEC)") in lines  # fmt: skip
    assert not any(line.startswith("rope_pretrained/") for line in lines)  # no row: nothing
