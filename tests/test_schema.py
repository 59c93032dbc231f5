"""The typed schema (ssmax.config.schema): every field documented, wrong types and unknown keys fail
in one line on compose, ranges and choices come from the schema's rules."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from ssmax.config import schema, schema_pipeline
from ssmax.config.compose import ConfigError, compose, first_choices
from ssmax.config.rules import describe
from ssmax.model import attention, transformer
from ssmax.preflight.settings import check_compose, validate


def _documented_fields(module: object) -> list[tuple[str, str, bool]]:
    """(class, field, has a comment on its line) for every dataclass field in the module."""
    source = inspect.getsource(module)
    lines = source.splitlines()
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        if not dataclasses.is_dataclass(getattr(module, node.name, None)):
            continue
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                text = " ".join(lines[item.lineno - 1 : (item.end_lineno or item.lineno)])
                out.append((node.name, item.target.id, "#" in text))
    return out


@pytest.mark.parametrize(
    "module", [schema, schema_pipeline, attention, transformer], ids=lambda m: m.__name__
)
def test_every_field_has_a_one_line_doc(module: object) -> None:
    fields = _documented_fields(module)
    assert fields
    missing = [f"{c}.{f}" for c, f, ok in fields if not ok]
    assert not missing, f"fields without a doc comment: {missing}"


def test_composed_configs_are_typed_by_the_schema() -> None:
    train = compose("preset=smoke")
    pipe = compose("preset=smoke", config_name="pipeline")
    assert OmegaConf.get_type(train) is schema.TrainConfig
    assert OmegaConf.get_type(pipe) is schema_pipeline.PipelineConfig
    assert OmegaConf.get_type(pipe.trainer.pretrain) is schema.PretrainConfig
    assert "pipeline" not in train and train.executor.partition is None  # no profile
    # defaults come from the schema alone: conf/trainer/default.yaml holds none
    assert pipe.trainer.pretrain.eps == schema.PretrainConfig.eps
    assert pipe.executor.max_requeues == schema.ExecutorConfig.max_requeues == 5
    assert pipe.data.sft_prompt == schema.DataConfig.sft_prompt
    assert pipe.model.vocab_size == pipe.data.vocab_size


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.pretrain.lr=abc", "lr='abc' has the wrong type; allowed: a number > 0"),
        ("trainer.devices=two", "devices='two' has the wrong type; allowed: an integer > 0"),
        ("data.max_eval_sequences=x", "allowed: an integer, or null"),
        ("pipeline.seeds=[a]", "pipeline.seeds[0]='a' has the wrong type; allowed: an integer"),
        ("+trainer.pretrain.lrr=1", "trainer.pretrain.lrr is not a config key; nearest: lr"),
    ],
)  # fmt: skip
def test_wrong_type_or_unknown_key_is_one_line(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate(compose(override, config_name="pipeline"))
    assert "\n" not in str(err.value) and message in str(err.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("executor.workers=0", "executor.workers=0 must be > 0"),
        ("trainer.sft.schedule=step", "schedule='step'; allowed: ('constant', 'cosine')"),
        ("data.facts.fraction=-0.5", "data.facts.fraction=-0.5 must be >= 0.0"),
        ("eval.loss.max_multiple=0", "eval.loss.max_multiple=0 must be > 0"),
    ],
)  # fmt: skip
def test_ranges_and_choices_come_from_the_schema(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate(compose(override, config_name="pipeline"))


def test_describe_and_first_choices() -> None:
    assert describe("trainer.sft.schedule") == "one of ('constant', 'cosine')"
    assert describe("tracking.tracking_uri") == "a string, or null"
    assert first_choices(["variant=a_softmax,b_ssmax", "seed=range(3)", "hydra.job.chdir=true",
                          "pipeline.seeds=[0,1]"]) == ["variant=a_softmax", "seed=0",
                                                       "pipeline.seeds=[0,1]"]  # fmt: skip
    cfg = check_compose(["variant=b_ssmax,c_ssmax_no_scale", "preset=smoke"])
    assert cfg.variant.name == "b_ssmax"


def test_variant_facts_take_the_schema_defaults() -> None:
    from ssmax.config.variants import facts

    b = facts("b_ssmax")  # its YAML names letter, label, colour; the rest is (a)'s or default
    assert (b.evals, b.pretrain, b.start) == (True, "full", None)


def test_entry_wrong_type_is_one_line_and_exit_2(tmp_path) -> None:  # noqa: ANN001
    out = subprocess.run(
        [sys.executable, "-m", "ssmax.train", "trainer.pretrain.lr=abc",
         f"paths.output_dir={tmp_path}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines == ["error: trainer.pretrain.lr='abc' has the wrong type; allowed: a number > 0"]
    assert not (tmp_path / "mlflow.db").exists()


def test_slurm_multirun_profile_merges_into_the_typed_executor() -> None:
    """`python -m ssmax.train -m hydra/launcher=ssmax_slurm +executor/slurm/profile=local`: the
    profile fills the schema's executor block, and the launcher reads it (max_requeues from the
    schema's default)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from ssmax.config.compose import CONF_DIR
    from ssmax.pipeline.slurm.launcher import register_resolvers

    register_resolvers()
    overrides = ["hydra/launcher=ssmax_slurm", "+executor/slurm/profile=local", "preset=smoke"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose("config", overrides=overrides, return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert (launcher.partition, launcher.max_num_timeout, launcher.timeout_min) == ("debug", 5, 30)
