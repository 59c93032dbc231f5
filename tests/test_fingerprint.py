"""The node fingerprint at unit level: what changes a node's key (a declared config key, an
input's key, the code it runs, its data, a local data file edited in place) and what must not
(settings that shape no result, another stage's keys, the modules of NO_RESULT only). No
pipeline runs: tests/test_cache_key.py checks the same end to end on the smoke pipeline.
scripts/mutation_check.py seeds bugs in the fingerprint that these tests must see.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from ssmax.config.compose import compose
from ssmax.pipeline import fingerprint as fp
from ssmax.pipeline.stage_code import PACKAGE, _imported, no_result
from ssmax.stages.spec import stage_spec
from ssmax.verdicts.published_file import PUBLISHED, ROOT

# modules whose code shapes what a node writes (the model, the data, the evals, the stages, the
# report, the variants and their config; tracking/models.py: what export registers in MLflow)
RESULT_CODE = ("model/", "data/", "evals/", "lit/", "report/", "export/", "stages/",
               "config/compose.py", "config/variants.py", "preflight/settings.py",
               "preflight/weights.py", "host/compiling.py", "host/devices.py",
               "tracking/models.py")  # fmt: skip


def key(module: str, cfg: DictConfig, inputs: tuple[str, ...] = ()) -> str:
    return fp.fingerprint(module, module, stage_spec(module), cfg, list(inputs))


def changed(cfg: DictConfig, setting: str, value: object) -> DictConfig:
    out = cfg.copy()
    OmegaConf.update(out, setting, value, force_add=True)
    return out


def test_inputs_code_and_data_each_change_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = compose("preset=smoke")
    before, rope = key("eval_niah", cfg, ("upstream",)), key("rope", cfg, ("upstream",))
    assert key("eval_niah", cfg, ("upstream",)) == before  # stable
    assert key("eval_niah", cfg, ("upstream, rerun",)) != before  # an input's new result
    with monkeypatch.context() as m:
        m.setattr(fp, "code_hash", lambda paths: "edited code")
        assert key("eval_niah", cfg, ("upstream",)) != before
    with monkeypatch.context() as m:
        m.setattr(fp, "data_manifest", lambda cfg, sft=False: "another corpus")
        assert key("eval_niah", cfg, ("upstream",)) != before
        assert key("rope", cfg, ("upstream",)) == rope  # it reads no data key


def test_code_hash_reads_each_module_s_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fp, "PACKAGE", tmp_path)
    (tmp_path / "pkg").mkdir()
    module, nested = tmp_path / "a.py", tmp_path / "pkg" / "b.py"
    module.write_text("x = 1\n")
    nested.write_text("y = 2\n")
    code_hash = fp.code_hash.__wrapped__  # not the per-process cache
    before = code_hash(("a.py", "pkg"))
    module.write_text("x = 2\n")  # same name and size, other code
    after = code_hash(("a.py", "pkg"))
    assert after != before
    nested.write_text("y = 3\n")  # a folder stands for every module in it
    assert code_hash(("a.py", "pkg")) != after


def test_declared_config_counts_and_the_rest_does_not() -> None:
    cfg = compose("preset=smoke")
    pretrain, sft = key("pretrain", cfg), key("sft", cfg)
    assert key("pretrain", changed(cfg, "model.dim", 2 * cfg.model.dim)) != pretrain
    assert key("pretrain", changed(cfg, "trainer.precision", "bf16-mixed")) != pretrain
    # not read: MLflow names, where files live and how many workers read them
    assert key("pretrain", changed(cfg, "tracking.experiment", "other")) == pretrain
    assert key("pretrain", changed(cfg, "tracking.system_metrics", False)) == pretrain
    assert key("eval_niah", changed(cfg, "tracking.system_metrics_interval_s", 1.0)) == key(
        "eval_niah", cfg
    )
    assert key("pretrain", changed(cfg, "data.cache_dir", "/elsewhere")) == pretrain
    assert key("pretrain", changed(cfg, "data.num_workers", 3)) == pretrain
    # an SFT setting reruns SFT, not pretraining ("data:lm" leaves the SFT keys out)
    more_sft = changed(cfg, "data.sft_num_examples", 2 * cfg.data.sft_num_examples)
    assert key("pretrain", more_sft) == pretrain and key("sft", more_sft) != sft
    # a variant's facts count where a stage declares one (pretrain: variant.facts.pretrain)
    assert key("sft", changed(cfg, "variant.facts.label", "(a) renamed")) == sft
    assert key("pretrain", changed(cfg, "variant.facts.pretrain", "short")) != pretrain


def test_a_stream_s_shards_count_for_pretraining_only() -> None:
    """Streamed SlimPajama is packed per (rank, DataLoader worker): the worker count shapes
    pretraining's rows (training_data), not the loss eval's, which reads the same data:lm."""
    cfg = compose("preset=smoke", "data=slimpajama")
    workers = changed(cfg, "data.num_workers", cfg.data.num_workers + 2)
    assert key("pretrain", workers) != key("pretrain", cfg)
    assert key("eval_loss", workers) == key("eval_loss", cfg)


def test_a_local_file_edited_to_the_same_size_changes_the_key_of_its_readers(
    tmp_path: Path,
) -> None:
    """The SFT set's local file, rewritten at the same size: SFT (reads "data") reruns;
    pretraining (reads "data:lm", not the SFT set) does not."""
    squad = tmp_path / "squad.json"
    squad.write_text('{"v": 1}\n')
    cfg = compose("preset=smoke", "data.sft_source=squad_v2", f"data.squad_files=[{squad}]")
    sft, pretrain = key("sft", cfg), key("pretrain", cfg)
    stat = squad.stat()
    squad.write_text('{"v": 2}\n')
    os.utime(squad, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a later write
    assert squad.stat().st_size == stat.st_size
    assert key("sft", cfg) != sft
    assert key("pretrain", cfg) == pretrain


def test_code_that_computes_results_is_never_no_result() -> None:
    """NO_RESULT may list logging, locks, bookkeeping; a module a result comes from would leave
    its nodes cached after an edit."""
    files = sorted(f.relative_to(PACKAGE).as_posix() for f in PACKAGE.rglob("*.py"))
    bookkeeping = ("stages/spec.py", "stages/costing.py")  # what a stage declares, its cost
    computes = [f for f in files if f.startswith(RESULT_CODE) and f not in bookkeeping]
    assert len(computes) > 40 and "evals/niah.py" in computes
    assert [f for f in computes if no_result(f)] == []


def test_a_module_imported_by_name_and_relative_imports_are_followed(tmp_path: Path) -> None:
    """`from ssmax.evals import niah` imports the module niah; `from .haystack import x` in
    ssmax.evals.<module>, and `from ..model import attention`, name modules of its package and
    of the one above. (src names every import in full today, and only pipeline/ imports a module
    by name: this is how the code reads the imports a later module may write.)"""
    probe = tmp_path / "probe.py"
    probe.write_text("from ssmax.evals import niah\nfrom .haystack import build_sample\n"
                     "from ..model import attention\n")  # fmt: skip
    imported = _imported(probe, "ssmax.evals.probe")
    assert {"ssmax.evals.niah", "ssmax.evals.haystack", "ssmax.model.attention"} <= imported


def test_a_declared_file_changes_only_its_stages_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report reads the published run (StageSpec.files): a new published file makes the
    report again (issue 57); no other stage's key holds the file."""
    cfg = compose("preset=smoke")
    (declared,) = stage_spec("report").files
    monkeypatch.setattr(fp, "REPO", tmp_path)
    absent = key("report", cfg), key("pretrain", cfg)
    (tmp_path / declared).parent.mkdir(parents=True)
    (tmp_path / declared).write_text('{"results": {}}')
    first = key("report", cfg), key("pretrain", cfg)
    (tmp_path / declared).write_text('{"results": {"a_softmax": {}}}')
    second = key("report", cfg), key("pretrain", cfg)
    assert len({absent[0], first[0], second[0]}) == 3
    assert absent[1] == first[1] == second[1]
    assert declared == str(PUBLISHED.relative_to(ROOT))  # the file verdicts.against reads
