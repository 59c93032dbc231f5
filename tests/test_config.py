"""Every preset x variant composes and validates; bad values fail in one clear line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError

import ssmax.config.compose as compose_module
from ssmax.config import remembered, variants
from ssmax.config.compose import CONF_DIR, ConfigError, check_cli_choices, check_override_keys
from ssmax.config.rules import one_line
from ssmax.config.schema_pipeline import MOVED_KEYS, PipelineConfig
from ssmax.preflight.settings import validate
from tests.conftest import PRESETS, VARIANTS, make_cfg


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_preset_and_variant_composes(preset: str, variant: str) -> None:
    cfg = make_cfg(f"preset={preset}", f"variant={variant}")
    validate(cfg)
    assert cfg.variant.name == variant and cfg.preset.name == preset
    assert cfg.model.vocab_size == cfg.data.vocab_size
    # the facts' own merge of the variant files (config.variants) reads what Hydra composes
    assert OmegaConf.to_container(cfg.variant) == variants.full(variant)


def test_paper_preset_has_the_paper_hyperparameters() -> None:
    cfg = make_cfg("preset=paper")
    p, s = cfg.trainer.pretrain, cfg.trainer.sft
    assert (cfg.model.n_layers, cfg.model.n_heads, cfg.model.dim, cfg.model.ffn_dim) == (
        12,
        12,
        768,
        2048,
    )
    assert (cfg.model.vocab_size, cfg.data.seq_len, cfg.model.rope_theta) == (50257, 1024, 1e4)
    assert (p.lr, list(p.betas), p.weight_decay, p.grad_clip) == (6e-4, [0.9, 0.95], 0.1, 1.0)
    assert (p.schedule, p.warmup_steps, p.max_steps, p.global_batch) == (
        "constant",
        1000,
        200_000,
        2048,
    )
    assert (s.lr, list(s.betas), s.weight_decay, s.schedule) == (2e-5, [0.9, 0.999], 0.0, "cosine")
    assert (s.warmup_epochs, s.epochs, s.global_batch) == (1.0, 10, 128)
    assert (cfg.data.tokenizer, cfg.data.source, cfg.data.sft_source) == (
        "gpt2",
        "slimpajama",
        "squad_v2",
    )


def test_paper_preset_has_the_paper_eval_sizes() -> None:
    """Sec. 3.2: 100,000 sequences of 20,000 tokens; Sec. 3.3: 1000 NIAH samples per cell;
    Sec. 3.4: 100 needle-score trials. The CPU presets keep small ones."""
    paper = make_cfg("preset=paper", config_name="pipeline").eval
    assert paper.loss.sequences == 100_000 and round(1024 * paper.loss.max_multiple) == 20_000
    assert (paper.niah.samples, paper.needle_scores.trials) == (1000, 100)
    for preset in ("tiny", "smoke"):
        small = make_cfg(f"preset={preset}", config_name="pipeline").eval
        assert small.loss.sequences <= 8 and small.niah.samples <= 4
        assert small.needle_scores.trials <= 20
    text = (CONF_DIR / "preset" / "paper.yaml").read_text()
    for line, section in (("sequences: 100000", "Sec. 3.2"), ("max_multiple: 19.53125", "Sec. 3.2"),
                          ("samples: 1000", "Sec. 3.3"), ("trials: 100", "Sec. 3.4")):  # fmt: skip
        assert section in next(t for t in text.splitlines() if line in t)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer.pretrain.lr=-1"], "trainer.pretrain.lr=-1"),
        (["data.seq_len=0"], "data.seq_len=0 must be > 0"),
        (["preset=paper", "model=tiny"], "model=tiny does not match preset=paper"),
        (["data.tokenizer=gpt2"], "data.vocab_size=1024 must be 50257"),
        (["objective=rl"], "objective='rl'"),
        (["trainer.pretrain.global_batch=20"], "must be a multiple of batch_size"),
        (["variant.scale=cube"], "variant.scale='cube'"),
        (["variant=k_scale_invariant", "variant.tau=-1"], "variant.tau=-1.0 must be > 0"),
        (["variant=l_asentmax", "variant.alpha=0.5"], "variant.alpha=0.5 must be > 1"),
        (["variant=l_asentmax", "variant.path=sdpa"], "variant.path='sdpa' cannot run"),
        (
            ["variant=b_ssmax", "variant.normalizer=entmax", "variant.path=flex"],
            "variant.path='flex' cannot run variant.normalizer='entmax'",
        ),
    ],
)
def test_bad_values_name_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        validate(make_cfg(*overrides))


def test_unknown_group_choice_names_the_allowed_ones() -> None:
    with pytest.raises(ConfigError, match="variant='zzz' is unknown; allowed: a_softmax"):
        check_cli_choices(["variant=b_ssmax,zzz"])
    check_cli_choices(["variant=a_softmax,b_ssmax", "trainer.pretrain.lr=1", "seed=3"])


def run_entry(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ssmax.train", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["variant=zzz"], "variant='zzz' is unknown"),
        (["trainer.pretrain.lr=-0.1"], "trainer.pretrain.lr=-0.1 must be > 0"),
    ],
)
def test_entry_bad_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path) -> None:
    out = run_entry(*args, f"paths.output_dir={tmp_path}")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert not (tmp_path / "mlflow.db").exists()  # nothing started


def test_cfg_job_prints_the_resolved_config() -> None:
    out = run_entry("--cfg", "job", "preset=paper", "variant=d_ssmax_bias")
    assert out.returncode == 0, out.stderr
    assert "name: d_ssmax_bias" in out.stdout and "global_batch: 2048" in out.stdout


@pytest.mark.parametrize("arg", ["trainer.pretrain.lrr=1", "+trainer.pretrain.lrr=1"])
def test_misspelled_key_fails_in_one_line_naming_neighbours(arg: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_override_keys([arg, "preset=smoke"])
    message = str(err.value)
    assert "\n" not in message and "trainer.pretrain.lrr" in message
    assert "nearest: trainer.pretrain.lr" in message
    check_override_keys(
        ["trainer.pretrain.lr=1", "+pipeline.overrides.b_ssmax=[seed=1]"], "pipeline"
    )


def test_paper_preset_has_the_paper_protocol() -> None:
    """Sec. 3 (f): the switch at 175k of 200k steps, a warmup of 1,000 of the last 25,000;
    Sec. 2.1: (pn) 25k of 200k; Sec. 3.2, 3.3: theta 10,000 -> 500,000 at the evals."""
    protocol = make_cfg("preset=paper", config_name="pipeline").protocol
    assert OmegaConf.to_container(protocol) == {
        "switch_fraction": 0.875, "switch_warmup_fraction": 0.04, "pn_fraction": 0.125,
        "rope_factor": 50,
    }  # fmt: skip


@pytest.mark.parametrize("old", sorted(MOVED_KEYS))
def test_a_moved_key_fails_in_one_line_naming_its_new_key(old: str) -> None:
    """An earlier release's key (pipeline.rope_factor, now protocol.rope_factor): on the
    command line, the setting to write instead; in a YAML file (one_line), the key."""
    new = MOVED_KEYS[old]
    assert OmegaConf.select(make_cfg(config_name="pipeline"), new) is not None
    for arg in (f"{old}=0.5", f"+{old}=0.5"):
        with pytest.raises(ConfigError) as err:
            check_override_keys(["preset=smoke", arg], "pipeline")
        assert str(err.value) == (f"{arg}: {old} is now {new} (the protocol's settings moved "
                                  f"out of pipeline); set {new}=0.5")  # fmt: skip
    check_override_keys(["preset=smoke", f"{new}=0.5"], "pipeline")
    key, name = old.split(".")
    with pytest.raises(ConfigKeyError) as merged:
        OmegaConf.merge(OmegaConf.structured(PipelineConfig), {key: {name: 0.5}})
    said = one_line(merged.value)
    assert said == f"{old} is now {new} (the protocol's settings moved out of pipeline); set {new}"


def test_unknown_root_key_fails_in_one_line() -> None:
    """output_dir=x (the key is paths.output_dir): neither a config group nor a root key."""
    with pytest.raises(ConfigError) as err:
        check_override_keys(["preset=smoke", "output_dir=/tmp/x", "seed=3"], "pipeline")
    message = str(err.value)
    assert "\n" not in message and "output_dir is not a config key" in message
    assert message.endswith("nearest: paths.output_dir")
    check_override_keys(["seed=3", "executor=slurm", "executor/slurm/profile=gpu8"], "pipeline")
    with pytest.raises(ConfigError) as err:  # nothing near: the root's own keys, every one
        check_override_keys(["foo=bar"], "pipeline")
    listed = str(err.value).partition("keys under the root: ")[2].split(", ")
    assert {"seed", "paths", "model", "trainer", "pipeline", "cost"} <= set(listed), listed
    assert "name" not in listed and "output_dir" not in listed  # (leaves of preset, paths)


def test_a_config_composed_again_is_a_copy_of_the_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """ssmax.config.remembered: the same overrides compose once per process; each caller gets
    its own copy, equal to what compose gives; an error is raised every time."""
    calls = []

    def counted(*overrides: str, config_name: str = "config") -> object:
        calls.append(overrides)
        return compose_module.compose(*overrides, config_name=config_name)

    monkeypatch.setattr(remembered, "compose", counted)
    remembered._remembered.cache_clear()
    first = remembered.composed("preset=smoke", "variant=b_ssmax", "seed=7")
    first.seed = 8  # the caller's copy
    again = remembered.composed("preset=smoke", "variant=b_ssmax", "seed=7")
    assert len(calls) == 1 and again.seed == 7
    fresh = compose_module.compose("preset=smoke", "variant=b_ssmax", "seed=7")
    assert OmegaConf.to_yaml(again) == OmegaConf.to_yaml(fresh)
    assert OmegaConf.is_struct(again) == OmegaConf.is_struct(fresh)
    for _ in range(2):
        with pytest.raises(ConfigError, match="max_steps"):
            remembered.composed("preset=smoke", "trainer.pretrain.max_steps=many")
    assert len(calls) == 1 + 2


def test_an_edited_conf_file_is_composed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    for module in (compose_module, remembered):  # both read conf/ from the copy
        monkeypatch.setattr(module, "CONF_DIR", conf)
    before = remembered.composed("preset=smoke").trainer.pretrain.max_steps
    smoke = conf / "preset" / "smoke.yaml"
    text = smoke.read_text()
    assert f"max_steps: {before}" in text  # the value this test edits
    smoke.write_text(text.replace(f"max_steps: {before}", f"max_steps: {before + 1}", 1))
    assert remembered.composed("preset=smoke").trainer.pretrain.max_steps == before + 1
