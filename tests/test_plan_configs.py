"""plan() composes each variant once and gives its other seeds a copy with their seed
(ssmax.pipeline.run.compose_node's `made`): every node's config and fingerprint must be what
composing it with Hydra gives, for every variant of both declared pipelines, those with
overrides of their own included ((k)'s own RoPE, (l)'s NAPE, the inference-only laws)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ssmax.config.compose import absolute_paths
from ssmax.pipeline.run import compose_node, compose_pipeline, plan, sets_seed


@pytest.mark.parametrize("pipeline", ["paper", "rival_laws"])
def test_each_seed_s_config_is_the_one_hydra_composes(pipeline: str, tmp_path: Path) -> None:
    overrides = ["preset=tiny", f"pipeline.file={pipeline}", "pipeline.seeds=[13,40]",
                 f"paths.output_dir={tmp_path}"]  # fmt: skip
    base, jobs = plan(overrides)
    fresh = {}
    for variant in base.pipeline.variants:
        cfg = compose_node(overrides, compose_pipeline(overrides), variant, 40)  # Hydra's own
        absolute_paths(cfg)
        fresh[variant] = OmegaConf.to_yaml(cfg, resolve=True)
    seen = {j.variant for j in jobs if j.seed == 40}
    assert seen == set(base.pipeline.variants)
    for job in jobs:
        if job.seed == 40:
            assert job.cfg_yaml == fresh[job.variant], job.name
    assert {j.cfg_yaml for j in jobs if j.seed == 13}.isdisjoint(fresh.values())


def test_a_variant_that_sets_its_own_seed_is_composed_for_each() -> None:
    assert sets_seed("seed=3") and sets_seed("+seed=3") and sets_seed("~seed")
    assert not sets_seed("data.seed=3") and not sets_seed("seeds=[1]")
    overrides = ["preset=smoke", "pipeline.seeds=[0,1]",
                 "+pipeline.overrides.a_softmax=['seed=7']"]  # fmt: skip
    base = compose_pipeline(overrides)
    made: dict = {}
    assert compose_node(overrides, base, "a_softmax", 0, made).seed == 7
    assert compose_node(overrides, base, "a_softmax", 1, made).seed == 7
    assert compose_node(overrides, base, "b_ssmax", 0, made).seed == 0
    assert compose_node(overrides, base, "b_ssmax", 1, made).seed == 1
