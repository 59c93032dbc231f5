"""A training run's plan (ssmax.lit.plan): the training stages build it from a config they read
and never write, and a run folder's recorded config gives the same plan back, so
`python -m ssmax.train` of a node's config.yaml trains that node's run."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from ssmax.data.lm_module import lm_datamodule
from ssmax.data.sft_module import sft_datamodule
from ssmax.lit.plan import Epochs, Steps, TrainingPlan
from ssmax.stages import pretrain, sft, switch
from ssmax.stages.context import StageContext
from tests.conftest import make_cfg


def trained(weights: str) -> pretrain.Outputs:
    """A pretrain node's outputs with these weights (SFT reads only them)."""
    return pretrain.Outputs(weights=weights, switch_point="", switch_step=1, steps=2)


def node(stage: str, variant: str, out: Path, inputs: dict | None = None) -> StageContext:
    """A node's context on a read-only config: a stage that writes it raises."""
    cfg = make_cfg("preset=smoke", f"variant={variant}", config_name="pipeline")
    OmegaConf.set_readonly(cfg, True)
    return StageContext(f"{stage}/{variant}/seed0", stage, cfg, out / stage, inputs or {},
                        tags={"stage": stage})  # fmt: skip


def test_the_training_stages_plan_without_writing_their_config(tmp_path: Path) -> None:
    """Smoke: 20 steps, warmup 4, the switch at 87.5% (step 18); (f) trains the 2 left with a
    fresh warmup of 4% (at least 1) from (a)'s switch point and data position; SFT in epochs."""
    a = pretrain.train_start(node("pretrain", "a_softmax", tmp_path))
    assert (a.objective, a.data, a.length, a.save_at) == ("pretrain", lm_datamodule,
                                                          Steps(20, 4), (18,))  # fmt: skip
    assert a.init_from is None and a.run_dir == (tmp_path / "pretrain").resolve()
    outputs = pretrain.Outputs(weights="a.pt", switch_point="a18.pt", switch_data="d18.json",
                               switch_step=18, steps=20)  # fmt: skip
    f = switch.train_start(node("switch", "f_switch_during_pretrain", tmp_path, {"a": outputs}))
    assert (f.length, f.init_from, f.data_start, f.save_at) == (Steps(2, 1), "a18.pt",
                                                                "d18.json", ())  # fmt: skip
    e = switch.train_start(node("switch", "e_swap_after_pretrain", tmp_path, {"a": outputs}))
    assert (e.length, e.init_from, e.data_start) == (Steps(0, 4), "a.pt", None)
    s = sft.train_start(node("sft", "b_ssmax", tmp_path, {"p": trained("b.pt")}))
    assert (s.objective, s.data, s.init_from) == ("sft", sft_datamodule, "b.pt")
    assert isinstance(s.length, Epochs) and s.run_name == "sft/b_ssmax/seed0"


def test_a_recorded_config_gives_its_plan_back(tmp_path: Path) -> None:
    """recorded(cfg) puts the plan in the config's keys (cfg itself unchanged); from_config of
    it is the same plan, for pretraining's steps and for SFT's epochs."""
    outputs = pretrain.Outputs(weights="a.pt", switch_point="a18.pt", switch_data="d18.json",
                               switch_step=18, steps=20)  # fmt: skip
    ctx = node("switch", "f_switch_during_pretrain", tmp_path, {"a": outputs})
    plans = [
        switch.train_start(ctx),
        pretrain.train_start(node("pretrain", "a_softmax", tmp_path)),
        sft.train_start(node("sft", "b_ssmax", tmp_path, {"p": trained("b.pt")})),
    ]
    for plan in plans:
        record = plan.recorded(ctx.cfg)
        again = TrainingPlan.from_config(record, plan.data, plan.data_start)
        assert again == plan
    assert ctx.cfg.trainer.pretrain.max_steps == 20 and ctx.cfg.init_from is None
