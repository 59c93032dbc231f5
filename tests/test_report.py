"""The report of a real smoke pipeline run: figures, claims, md/html, rebuild, missing inputs."""

from __future__ import annotations

import dataclasses
import html
import json
from dataclasses import dataclass
from html.parser import HTMLParser
from importlib import import_module
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest
from omegaconf import OmegaConf

from ssmax.pipeline.declaration import available, load
from ssmax.pipeline.run import plan
from ssmax.pipeline.state import module_of
from ssmax.report.__main__ import main as report_main
from ssmax.report.build import build_report, settings_from_cfg
from ssmax.report.table import gather, rows
from ssmax.stages.outputs import read_outputs
from ssmax.stages.report import declared, reported
from ssmax.verdicts.claims import VERDICTS, claims
from ssmax.verdicts.results import Results
from ssmax.verdicts.text import RULE
from tests.conftest import first_pipeline_run, make_cfg
from tests.typed_outputs import typed

PNG = b"\x89PNG\r\n\x1a\n"
EVALUATED = ["a_softmax", "b_ssmax", "c_ssmax_no_scale", "d_ssmax_bias",
             "e_swap_after_pretrain", "f_switch_during_pretrain"]  # fmt: skip
FIG_COLUMNS = {  # the series each figure's CSV must hold
    "fig1": ["n", "softmax", "ssmax_s0.43"],
    "fig2": ["n", "p_n", "fit"],
    "fig3": ["z_max", "softmax_n10", "ssmax_s0.43_n100000", "ssmax_s1.0_n10"],
    "fig4": ["step", *EVALUATED[:4]],
    "fig5": ["context", *EVALUATED],
    "fig6": ["context_multiple", "depth", *EVALUATED],
    "fig7": ["rank", *EVALUATED],
    "fig8": ["rank", *EVALUATED, *(f"{v}_outcome" for v in EVALUATED)],
}


@dataclass
class Smoke:
    overrides: list[str]
    output_dir: Path
    report: dict[str, Any]  # the report node's outputs, as its record holds them
    inputs: dict[str, Any]  # the report node's inputs, typed, under their reported names

    @property
    def folder(self) -> Path:
        return Path(self.report["report_md"]).parent


@pytest.fixture(scope="module")
def smoke(smoke_pipeline: list[str]) -> Smoke:
    overrides = smoke_pipeline  # the session's smoke pipeline (conftest)
    cfg, jobs = plan(overrides)
    by_name = {j.name: j for j in jobs}
    report = by_name["report"]
    records = {name: by_name[name].done for name in report.input_dirs}
    modules = {name: module_of(record) for name, record in records.items()}
    outputs = {name: read_outputs(str(modules[name]), r) for name, r in records.items()}
    inputs = reported(outputs, modules)
    return Smoke(overrides, Path(cfg.paths.output_dir), report.done["outputs"], inputs)


def test_eval_niah_writes_needle_scores(smoke: Smoke) -> None:
    needle = smoke.inputs["eval_niah/b_ssmax/seed0"].needle_scores
    assert needle.context == 4 * 64 and needle.trials == 2  # smoke: 4x, 2 trials
    assert 0.0 < needle.map_max <= 1.0 and 0.0 < needle.top_mean <= 1.0
    assert 0.0 <= needle.full <= 1.0
    lines = Path(needle.map_csv).read_text().splitlines()
    assert lines[0] == "layer,head,score" and len(lines) == 1 + 2 * 2  # 2 layers x 2 heads
    trials = json.loads(Path(needle.trials_json).read_text())
    assert [t["score"] in ("full", "first_digit", "wrong") for t in trials] == [True, True]
    copy = smoke.inputs["eval_niah/b_ssmax/seed0"].copy  # the copy probe on the same model
    assert copy.gain == pytest.approx(copy.first - copy.repeat) and copy.first > 1.0


@pytest.mark.parametrize("key", list(FIG_COLUMNS))
def test_every_figure_is_a_png_with_its_numbers(smoke: Smoke, key: str) -> None:
    png = smoke.folder / f"{key}.png"
    assert smoke.report["figures"][key] == str(png)
    assert png.read_bytes()[:8] == PNG
    height, width, _ = matplotlib.image.imread(png).shape
    assert width >= 400 and height >= 300
    header, *rows = (smoke.folder / f"{key}.csv").read_text().splitlines()
    columns = header.split(",")
    assert set(FIG_COLUMNS[key]) <= set(columns), columns
    assert rows and all(len(r.split(",")) == len(columns) for r in rows)
    assert "pn_rationale" not in columns  # Fig. 2 only


def test_fig5_has_one_series_per_variant_over_every_position(smoke: Smoke) -> None:
    header, *rows = (smoke.folder / "fig5.csv").read_text().splitlines()
    assert len(rows) == 4 * 64  # eval.loss.max_multiple x the training length
    columns = header.split(",")
    assert [c for c in columns if c in EVALUATED] == EVALUATED  # prose, smoothed
    assert [
        c for c in columns if c.removeprefix("facts_") in EVALUATED and c.startswith("facts_")
    ] == [f"facts_{v}" for v in EVALUATED]  # the smoke run plants facts


def test_claims_table_lists_every_claim(smoke: Smoke) -> None:
    expected = [c.key for c in claims(Results.from_inputs({}, settings_from_cfg(_cfg(smoke))))]
    listed = json.loads((smoke.folder / "claims.json").read_text())
    assert [c["key"] for c in listed] == expected
    assert sorted(smoke.report["claims"]) == sorted(expected)  # done.json sorts keys
    md, page = (smoke.folder / name for name in ("report.md", "report.html"))
    assert RULE in md.read_text() and html.escape(RULE) in page.read_text()
    for claim in listed:
        assert claim["verdict"] in VERDICTS and claim["checks"]
        assert f"| {claim['text']} |" in md.read_text()
        assert html.escape(claim["text"]) in page.read_text()
    # every variant, one seed: every claim is judged, and one seed decides nothing (below
    # every family's permutation floor: not decidable, as registered on 2026-11-29)
    judged = [c["verdict"] for c in listed if c["key"] != "pn_log_law"]
    assert set(judged) == {"not decidable"}


def test_results_table_keeps_the_numbers(smoke: Smoke) -> None:
    results = smoke.report["results"]
    assert set(results["b_ssmax"]) >= {"pretrain val loss", "loss @1x", "loss @4x", "niah @2x"}
    assert set(results["b_ssmax"]) >= {"niah mean", "needle top mean", "copy gain"}
    text = (smoke.folder / "report.md").read_text()
    assert "| b_ssmax |" in text and "| preset | smoke |" in text and "| seeds | [0] |" in text
    assert "planted facts in 50% of the rows" in text  # what the models were trained on
    assert text.count("- **Paper:**") == 8 and "- **This run:** Highest needle score" in text
    assert '"The special magic Tokyo number is: 8106422."' in text  # Fig. 7, from the config


def test_results_name_each_value_by_its_seed() -> None:
    """results.json: seed -> value in numeric order (seed10 after seed9; as text, before)."""
    inputs = {f"pretrain/a_softmax/seed{s}": {"val_loss": 1.0 + s / 100} for s in (10, 9, 3)}
    table = gather(typed(inputs), declared().columns)
    assert table == {"a_softmax": {"pretrain val loss": {3: 1.03, 9: 1.09, 10: 1.1}}}
    assert list(table["a_softmax"]["pretrain val loss"]) == [3, 9, 10]
    assert rows(table) == (["variant", "pretrain val loss"], [["a_softmax", "1.073 ± 0.038"]])


class _Sources(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.urls += [v or "" for k, v in attrs if k in ("src", "href")]


def test_html_is_self_contained(smoke: Smoke) -> None:
    parser = _Sources()
    parser.feed((smoke.folder / "report.html").read_text())
    assert parser.tags.count("img") == 8
    assert parser.urls and all(u.startswith("data:image/png;base64,") for u in parser.urls)
    assert not {"link", "script", "iframe"} & set(parser.tags)


def test_report_is_an_artifact_of_the_pipeline_run(smoke: Smoke) -> None:
    client, parent = first_pipeline_run(_cfg(smoke))
    names = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"report.md", "report.html", "fig7.png", "fig8.csv", "claims.json"} <= names


def test_rebuild_from_disk_and_mlflow(
    smoke: Smoke, smoke_pipeline_held: list[str], tmp_path: Path, capsys
) -> None:  # held: the latest pipeline run is whole
    assert report_main(["--output-dir", str(smoke.output_dir), "--dest", str(tmp_path)]) == 0
    assert "report:" in capsys.readouterr().out
    for name in ("claims.json", "results.json", "fig5.csv", "fig8.csv"):
        assert (tmp_path / name).read_text() == (smoke.folder / name).read_text(), name
    assert "pipeline run" in (tmp_path / "report.md").read_text()
    assert report_main(["--output-dir", str(tmp_path / "nowhere")]) == 2


def test_missing_inputs_give_na_not_a_crash(smoke: Smoke, tmp_path: Path) -> None:
    only_b = {k: v for k, v in smoke.inputs.items() if "/b_ssmax/" in k}
    out = build_report(only_b, settings_from_cfg(_cfg(smoke)), tmp_path / "b", declared())
    assert out["figures"]["fig2"].startswith("n/a") and not out["figures"]["fig1"].startswith("n/a")
    assert out["figures"]["fig6"].endswith("fig6.png")  # one panel is still a figure
    assert set(out["claims"].values()) == {"n/a"}
    empty = build_report({}, settings_from_cfg(_cfg(smoke)), tmp_path / "none", declared())
    assert [k for k, v in empty["figures"].items() if not v.startswith("n/a")] == ["fig1", "fig3"]
    assert "n/a: no eval_niah results" in Path(empty["report_md"]).read_text()


def test_a_pipeline_without_some_variants_names_the_claims_it_cannot_test(
    smoke: Smoke, tmp_path: Path
) -> None:
    ab = {k: v for k, v in smoke.inputs.items() if "/a_softmax/" in k or "/b_ssmax/" in k}
    settings = dataclasses.replace(
        settings_from_cfg(_cfg(smoke)), variants=["a_softmax", "b_ssmax"]
    )
    out = build_report(ab, settings, tmp_path / "ab", declared())
    assert sorted(out["claims"]) == ["needle_b_above_a", "niah_b_above_a"]
    assert set(out["claims"].values()) == {"not decidable"}  # one seed
    md = Path(out["report_md"]).read_text()
    assert (
        "Not tested here: 17 claim(s) of the paper need variants this pipeline does not run" in md
    )
    assert md.count("| Sec. ") == 2


def _cfg(smoke: Smoke):  # noqa: ANN202 - DictConfig
    cfg, _ = plan(smoke.overrides)
    return cfg


def test_settings_name_the_tokenizer_the_models_used() -> None:
    from ssmax.report.build import trained_on

    gpt2 = make_cfg("preset=smoke", "data.tokenizer=gpt2", "data.vocab_size=50257")
    assert "GPT-2's BPE (50,257 tokens)" in trained_on(gpt2.data)["pretraining data"]
    bpe = trained_on(make_cfg("preset=smoke").data)["pretraining data"]
    assert "a byte-level BPE of 512 tokens trained on the corpus" in bpe and "GPT-2" not in bpe


def test_settings_say_whether_another_cpu_gives_the_same_numbers() -> None:
    def details(*overrides: str, older: bool = False) -> dict[str, str]:
        cfg = make_cfg(*overrides, config_name="pipeline")
        cfg.pipeline.variants, cfg.pipeline.seeds = ["a_softmax"], [0]  # as plan() fills them
        if older:  # the config of a run from before preset.hardware, as make report reads it
            cfg = OmegaConf.create(OmegaConf.to_container(cfg))
            del cfg.preset["hardware"]
        return settings_from_cfg(cfg).details

    pinned = details("preset=tiny")["CPU kernels"]
    assert pinned.startswith("pinned to avx2 (trainer.cpu_isa): the same numbers, bit for bit")
    assert "may differ there" in pinned  # not shown across machines (ssmax.host.cpu_isa)
    own = details("preset=smoke", "trainer.cpu_isa=null")["CPU kernels"]
    assert "a verdict near its interval's edge may differ there" in own
    assert "CPU kernels" not in details("preset=paper")
    assert details("preset=tiny", older=True)["CPU kernels"] == pinned
    assert "CPU kernels" not in details("preset=paper", older=True)


def test_settings_read_the_rope_factor_of_a_config_from_before_the_protocol_block() -> None:
    """A run's config.yaml written before protocol.* has the RoPE factor under pipeline
    (`make report` rebuilds an older folder's report from it)."""
    cfg = make_cfg("preset=smoke", "protocol.rope_factor=20", config_name="pipeline")
    cfg.pipeline.variants, cfg.pipeline.seeds = ["a_softmax"], [0]  # as plan() fills them
    now = settings_from_cfg(cfg).details["RoPE theta at eval"]
    older = OmegaConf.to_container(cfg)
    older["pipeline"]["rope_factor"] = older.pop("protocol")["rope_factor"]
    assert settings_from_cfg(OmegaConf.create(older)).details["RoPE theta at eval"] == now
    assert now.endswith(" x 20")


@pytest.mark.slow
def test_report_of_a_run_without_a_report_node(tmp_path: Path, shared_cache: Path) -> None:
    # pretraining only: the settings come from a training node's own config, which names no
    # pipeline seeds or variants; the report takes them from the nodes it found
    from ssmax.pipeline.__main__ import main

    out = tmp_path / "out"
    assert main(["run", "preset=smoke", "pipeline.variants=[a_softmax]",
                 "pipeline.targets=[pretrain]", f"paths.output_dir={out}",
                 f"paths.cache_dir={shared_cache}"]) == 0  # fmt: skip
    assert report_main(["--output-dir", str(out), "--dest", str(tmp_path / "report")]) == 0
    assert "| seeds | [0] |" in (tmp_path / "report" / "report.md").read_text()


@pytest.mark.parametrize("pipeline", available())
def test_the_stages_a_report_reads_declare_how(pipeline: str) -> None:
    """Every stage the report node of a pipeline reads declares the name the report reads its
    outputs under (StageSpec.reported_as); the report names no stage of its own."""
    decl = load(pipeline)
    read = [decl.start.values() if s == "start" else [s] for s in decl.report["reads"]]
    modules = {decl.stages[stage] for stages in read for stage in stages}
    declared = {m: import_module(f"ssmax.stages.{m}").SPEC.reported_as for m in modules}
    assert None not in declared.values(), declared
    assert {"pretrain", "eval_loss", "eval_niah", "export"} == set(declared.values())


def test_reported_renames_by_the_stage_and_leaves_out_the_rest() -> None:
    f = "f_switch_during_pretrain/seed0"
    inputs = {"pretrain/a/seed0": {"x": 1}, f"switch/{f}": {"x": 2},
              "rope_sft/a/seed0": {"x": 3}, "old/a/seed0": {"x": 4}}  # fmt: skip
    modules = {"pretrain/a/seed0": "pretrain", f"switch/{f}": "switch",
               "rope_sft/a/seed0": "rope", "old/a/seed0": None}  # fmt: skip
    assert reported(inputs, modules) == {"pretrain/a/seed0": {"x": 1}, f"pretrain/{f}": {"x": 2}}
    # a done record from before records named their module: its stage's, where a module has it
    assert module_of({"node": "switch/f/seed0"}) == "switch"
    assert module_of({"node": "rope_sft/f/seed0"}) is None
    assert module_of({"node": "rope_sft/f/seed0", "module": "rope"}) == "rope"
