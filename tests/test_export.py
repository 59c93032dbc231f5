"""Export to Hugging Face transformers: every law's folder, loaded by transformers, gives this
project's logits at 1x and 4x the training length (theta as trained and x50) and its greedy
NIAH answers; softmax needs no remote code. Real transformers, no mocks."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from ssmax.config.compose import ConfigError
from ssmax.data.lm import test_texts
from ssmax.data.tokenizer import load_tokenizer
from ssmax.evals import scaled_rope_theta
from ssmax.evals.haystack import build_sample, random_needle, take_haystack
from ssmax.evals.niah import greedy_decode
from ssmax.export.folder import write_export
from ssmax.model import Transformer
from ssmax.model.factory import model_config, variant_config
from tests.conftest import VARIANTS, make_cfg

transformers = pytest.importorskip("transformers")

# float32 tolerance of the logits, relative to the largest |logit|. Measured worst over every
# law, 1x/4x, both thetas: 5.7e-5 on these sharp random weights (init_std 0.2), 3e-7 at the
# training init (0.02). All of it is RoPE's angles rounding differently (this project: float64
# then float32; transformers: float32): with transformers' angles the logits are bit-equal.
RTOL = 1e-4
THETA_FACTOR = 50.0


def smoke_cfg(variant: str, cache: Path) -> DictConfig:
    # init_std 0.2: sharp attention, so that a wrong m_i changes the logits far past RTOL
    return make_cfg("preset=smoke", f"variant={variant}", f"paths.cache_dir={cache}",
                    "model.init_std=0.2")  # fmt: skip


def random_model(cfg: DictConfig, seed: int = 0) -> Transformer:
    """Random weights, and the law's own parameters (s, b, p_n) moved off their init."""
    torch.manual_seed(seed)
    model = Transformer(model_config(cfg), variant_config(cfg), cfg.data.seq_len).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("attn.s", "attn.b", "p_n")) or p.ndim == 1:
                p.add_(0.3 * torch.randn_like(p))
    return model


def load_hf(path: Path, theta_factor: float = 1.0):  # noqa: ANN201
    """The exported folder as transformers loads it; theta x factor is a config edit."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path, trust_remote_code=True)
    config.rope_parameters["rope_theta"] *= theta_factor
    return AutoModelForCausalLM.from_pretrained(path, config=config, trust_remote_code=True).eval()


def max_differences(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(max |a - b|, that over max |a|)."""
    diff = (a - b).abs().max().item()
    return diff, diff / a.abs().max().item()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> dict:
    """variant -> (project model, its config, exported folder)."""
    out = {}
    root = tmp_path_factory.mktemp("export")
    for variant in VARIANTS:
        cfg = smoke_cfg(variant, shared_cache)
        model = random_model(cfg)
        out[variant] = (model, cfg, write_export(model, cfg.data, root / variant))
    return out


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_equal_at_1x_and_4x_with_both_thetas(exported: dict, variant: str) -> None:
    model, cfg, path = exported[variant]
    n = cfg.data.seq_len
    ids = torch.randint(
        0, cfg.data.vocab_size, (2, 4 * n), generator=torch.Generator().manual_seed(1)
    )
    for factor in (1.0, THETA_FACTOR):
        hf = load_hf(path, factor)
        with torch.no_grad(), scaled_rope_theta(model, factor):
            for length in (n, 4 * n):
                ours, theirs = model(ids[:, :length]), hf(ids[:, :length]).logits
                _, rel = max_differences(ours, theirs)
                assert rel < RTOL, (variant, factor, length, rel)


@pytest.mark.parametrize("variant", VARIANTS)
def test_with_transformers_rope_angles_the_logits_are_bit_equal(
    exported: dict, variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ssmax.model.transformer

    model, cfg, path = exported[variant]
    hf = load_hf(path)

    def hf_angles(positions: torch.Tensor, head_dim: int, theta: float, **_: object) -> tuple:
        cos, sin = hf.model.rotary_emb(torch.zeros(1), positions[None])  # transformers' own
        return cos[0], sin[0]

    monkeypatch.setattr(ssmax.model.transformer, "rope_angles", hf_angles)
    ids = torch.arange(4 * cfg.data.seq_len)[None] % cfg.data.vocab_size
    with torch.no_grad():
        assert torch.equal(model(ids), hf(ids).logits)


def test_a_wrong_law_is_far_outside_the_tolerance(exported: dict) -> None:
    # (b)'s weights run as plain softmax: the law is what the equality above checks
    from transformers import LlamaForCausalLM

    model, cfg, path = exported["b_ssmax"]
    ids = torch.arange(4 * cfg.data.seq_len)[None] % cfg.data.vocab_size
    plain = LlamaForCausalLM.from_pretrained(path).eval()
    with torch.no_grad():
        _, rel = max_differences(model(ids), plain(ids).logits)
    assert rel > 100 * RTOL


def test_softmax_loads_without_remote_code(exported: dict) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaForCausalLM

    path = exported["a_softmax"][2]
    assert not list(path.glob("*.py")) and "auto_map" not in AutoConfig.from_pretrained(path)
    assert type(AutoModelForCausalLM.from_pretrained(path)) is LlamaForCausalLM
    for variant in set(VARIANTS) - {"a_softmax"}:  # the others ship their law
        assert (exported[variant][2] / "modeling_ssmax.py").exists()


# a fresh interpreter where ssmax cannot be imported loads every exported folder, and the
# folder it saves back (what MLflow's transformers flavour does), and saves their logits
WITHOUT_SSMAX = """
import sys, tempfile, torch
sys.modules["ssmax"] = None  # import ssmax... fails: the folder must hold all its code
from transformers import AutoModelForCausalLM
ids, out = torch.load(sys.argv[1]), {}
for path in sys.argv[3:]:
    hf = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True).eval()
    with tempfile.TemporaryDirectory() as again:
        hf.save_pretrained(again)  # the loaded remote code saves its files, laws.py, positions.py
        back = AutoModelForCausalLM.from_pretrained(again, trust_remote_code=True).eval()
    with torch.no_grad():
        out[path] = (hf(ids).logits, back(ids).logits)
torch.save(out, sys.argv[2])
"""


def test_every_law_ships_the_models_own_laws_file_and_loads_without_ssmax(
    exported: dict, tmp_path: Path
) -> None:
    # one file for the laws (ssmax/model/laws.py), one for the positions (positions.py): the
    # model runs them, the folder carries them as they are
    import os
    import subprocess
    import sys

    from ssmax.model import laws, positions

    folders = {v: exported[v][2] for v in VARIANTS if v != "a_softmax"}
    for module in (laws, positions):
        source = Path(module.__file__).read_bytes()
        for path in folders.values():
            assert (path / Path(module.__file__).name).read_bytes() == source, path
    data = exported["b_ssmax"][1].data  # every variant's: the smoke preset's
    ids = torch.arange(4 * data.seq_len)[None] % data.vocab_size
    torch.save(ids, tmp_path / "ids.pt")
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules")}  # no other test's copy
    args = [str(tmp_path / "ids.pt"), str(tmp_path / "out.pt"), *map(str, folders.values())]
    run = subprocess.run([sys.executable, "-c", WITHOUT_SSMAX, *args], env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    out = torch.load(tmp_path / "out.pt")
    for variant, path in folders.items():
        theirs, saved_back = out[str(path)]
        with torch.no_grad():
            ours = exported[variant][0](ids)
        assert max_differences(ours, theirs)[1] < RTOL, variant
        assert torch.equal(theirs, saved_back), variant


@pytest.mark.parametrize("factor", [1.0, THETA_FACTOR])
@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_generate_is_the_niah_decoding(exported: dict, variant: str, factor: float) -> None:
    from transformers import AutoTokenizer

    model, cfg, path = exported[variant]
    model, tokenizer = copy.deepcopy(model), load_tokenizer(cfg.data)
    with torch.no_grad():  # EOS the most likely token: generate must never pick it either
        model.lm_head.weight[tokenizer.eos_id] = model.lm_head.weight.mean(0) * 50
    rng = random.Random(variant)
    city, number = random_needle(rng)
    context = 2 * cfg.data.seq_len  # past N
    hay = take_haystack(test_texts(cfg.data, seed=3), tokenizer, context)
    sample = build_sample(tokenizer, hay, city, number, context, 0.5, 8, cfg.data.sft_prompt)
    with scaled_rope_theta(model, factor):  # eval_niah decodes at theta x50
        ours = greedy_decode(model, sample.ids, 8, tokenizer.eos_id)
    hf = load_hf(path, factor)
    hf.lm_head.weight.data[tokenizer.eos_id] = model.lm_head.weight[tokenizer.eos_id]
    prompt = torch.tensor([sample.ids])
    theirs = hf.generate(prompt, attention_mask=torch.ones_like(prompt))[0, len(sample.ids) :]
    assert theirs.tolist() == ours and tokenizer.eos_id not in ours
    text = tokenizer.decode(sample.ids)  # the exported tokenizer is the training one
    exported_tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    assert exported_tokenizer(text)["input_ids"] == sample.ids


@pytest.mark.parametrize(
    "variant", ["b_ssmax", "k_scale_invariant", "l_asentmax", "l_asentmax_nape",
                "m_yarn_whole_dynamic_inference", "p_adaptive_temp_inference", "q_sink"],
)  # fmt: skip
def test_left_padding_does_not_count_as_keys_seen(exported: dict, variant: str) -> None:
    # batched generate: n_i = position_ids + 1 counts a row's own tokens, not its padding; the
    # general path's distances (by cache slot) and its mask skip the padding too; a pass's L
    # (dynamic YaRN) is the row's own, and its keys' positions count back from its last one
    _, cfg, path = exported[variant]
    hf = load_hf(path)
    short, long = (torch.randint(1, cfg.data.vocab_size, (1, k)) for k in (30, 40))
    alone = hf.generate(short, attention_mask=torch.ones_like(short))[0, 30:]
    pad = torch.full((1, 10), hf.config.pad_token_id)
    batch = torch.cat([torch.cat([pad, short], 1), long])
    mask = (batch != -1).long()
    mask[0, :10] = 0
    assert torch.equal(hf.generate(batch, attention_mask=mask)[0, 40:], alone)


def test_gpt2_tokenizer_exports_as_tiktoken_encodes(shared_cache: Path) -> None:
    from ssmax.export.folder import hf_tokenizer

    cfg = make_cfg("preset=smoke", f"paths.cache_dir={shared_cache}", "data.tokenizer=gpt2",
                   "data.vocab_size=50257").data  # fmt: skip
    ours, theirs = load_tokenizer(cfg), hf_tokenizer(cfg)
    text = "The special magic Tokyo number is: 8106422.\n\nQuestion:  what?  Ünïcode 🙂"
    assert theirs(text)["input_ids"] == ours.encode(text)
    assert theirs.eos_token_id == ours.eos_id


# ------------------------------------------------------------------ the command line
def export_cli(*args: str) -> int:
    """The command's exit status (a mistake argparse finds exits from within main)."""
    from ssmax.export.__main__ import main

    try:
        return main(list(args))
    except SystemExit as stop:
        return int(stop.code or 0)


def test_cli_exports_weights_with_their_config(exported: dict, tmp_path: Path, capsys) -> None:
    from omegaconf import OmegaConf

    model, cfg, _ = exported["d_ssmax_bias"]
    run = tmp_path / "run"
    run.mkdir()
    torch.save(model.state_dict(), run / "model.pt")
    (run / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    assert export_cli("--weights", str(run / "model.pt"), "--out", str(tmp_path / "hf"),
                      "--rope-factor", "50") == 0  # fmt: skip
    hf = load_hf(tmp_path / "hf")  # theta x50 written into config.json
    assert hf.config.rope_parameters["rope_theta"] == 50 * cfg.model.rope_theta
    ids = torch.arange(2 * cfg.data.seq_len)[None]
    with torch.no_grad(), scaled_rope_theta(model, THETA_FACTOR):
        assert max_differences(model(ids), hf(ids).logits)[1] < RTOL


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda r: ["--weights", str(r / "nope.pt"), "--out", str(r / "o")],
         "--weights=" + "{r}/nope.pt: no such file"),
        (lambda r: ["--weights", str(r / "model.pt"), "--config", str(r / "none.yaml"),
                    "--out", str(r / "o")], "--config={r}/none.yaml: no such file"),
        (lambda r: ["--weights", str(r / "model.pt"), "--config", str(r / "other.yaml"),
                    "--out", str(r / "o")], "lacks layers.0.attn.s: not variant=b_ssmax's"),
        (lambda r: ["--weights", str(r / "model.pt"), "--config", str(r / "bad.yaml"),
                    "--out", str(r / "o")], "has no model: not a run's config"),
        (lambda r: ["--weights", str(r / "model.pt"), "--out", str(r)], "exists; allowed"),
        (lambda r: ["--weights", str(r / "model.pt")], "--out is required with --weights"),
        (lambda r: ["--out", str(r / "o")], "one of the arguments --node --weights is required"),
        (lambda r: ["--weights", str(r / "model.pt"), "--out", str(r / "o"), "--rope-factor",
                    "x"], "argument --rope-factor: invalid float value: 'x'"),
        # the edges (issue 34): an --out under a file, theta x inf or nan (JSON holds neither),
        # weights missing with the config.yaml that would be beside them
        (lambda r: ["--weights", str(r / "model.pt"), "--out", str(r / "model.pt" / "o")],
         "--out={r}/model.pt/o: {r}/model.pt is a file; allowed: a new path"),
        (lambda r: ["--weights", str(r / "model.pt"), "--out", str(r / "model.pt" / "a" / "o")],
         "{r}/model.pt is a file; allowed: a new path"),
        (lambda r: ["--weights", str(r / "model.pt"), "--out", str(r / "o"),
                    "--rope-factor=inf"], "--rope-factor=inf; allowed: a finite number > 0"),
        (lambda r: ["--weights", str(r / "model.pt"), "--out", str(r / "o"),
                    "--rope-factor=nan"], "--rope-factor=nan; allowed: a finite number > 0"),
        (lambda r: ["--weights", str(r / "gone" / "model.pt"), "--out", str(r / "o")],
         "--weights={r}/gone/model.pt: no such file; give a run's model.pt"),
    ],
)  # fmt: skip
def test_cli_bad_input_is_one_line_and_writes_nothing(
    exported: dict, tmp_path: Path, capsys, make, error: str
) -> None:
    from omegaconf import OmegaConf

    model, cfg, _ = exported["a_softmax"]  # softmax weights: no s for (b)
    torch.save(model.state_dict(), tmp_path / "model.pt")
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    (tmp_path / "other.yaml").write_text(OmegaConf.to_yaml(exported["b_ssmax"][1], resolve=True))
    (tmp_path / "bad.yaml").write_text("seed: 0\n")
    before = sorted(tmp_path.rglob("*"))
    assert export_cli(*make(tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and error.format(r=tmp_path) in err, err
    assert sorted(tmp_path.rglob("*")) == before  # no folder, no temporary left


def strict_json(text: str) -> object:
    """json.loads that refuses NaN and Infinity, which are not JSON."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_every_file_is_strict_json(exported: dict) -> None:
    for _, _, path in exported.values():
        for file in path.glob("*.json"):
            assert "__float__" not in file.read_text(), file  # transformers' NaN and infinity
            strict_json(file.read_text())


@pytest.mark.parametrize(
    ("bad", "error"),
    [("s", "config.json would hold ssmax_s[0][1] = nan; allowed: finite numbers only"),
     ("theta", "rope_factor=inf; allowed: a finite number > 0")],
)  # fmt: skip
def test_nan_and_infinity_are_refused_before_anything_is_written(
    exported: dict, tmp_path: Path, bad: str, error: str
) -> None:
    # a diverged run's law, or theta x inf: transformers writes {"__float__": "NaN"} and
    # json.dumps a bare NaN, neither of which other JSON readers take
    model, cfg, _ = exported["b_ssmax"]
    model, factor = copy.deepcopy(model), float("inf") if bad == "theta" else 1.0
    if bad == "s":
        with torch.no_grad():
            model.layers[0].attn.s[1] = float("nan")
    with pytest.raises(ConfigError) as err:
        write_export(model, cfg.data, tmp_path / "out", factor)
    assert str(err.value) == error
    assert list(tmp_path.iterdir()) == []  # not even a temporary folder


# ------------------------------------------------------------------ the pipeline's export
def test_stage_export_names_the_trained_node_and_its_fingerprint(
    exported: dict, tmp_path: Path
) -> None:
    # the export stage's ssmax.json: the node that trained the weights, and the fingerprint the
    # runner gives the stage with its inputs' outputs
    from ssmax.stages import export, sft
    from ssmax.stages.context import StageContext

    model, cfg, _ = exported["b_ssmax"]
    name, fingerprint = "sft/b_ssmax/seed0", "9a004d568695fa99" + "0" * 48
    torch.save(model.state_dict(), tmp_path / "model.pt")
    outputs = sft.Outputs(weights=str(tmp_path / "model.pt"))
    cfg = OmegaConf.merge(cfg, {"tracking": {"enabled": False}})
    ctx = StageContext("export/b_ssmax/seed0", "export", cfg, tmp_path / "export", {name: outputs},
                       fingerprints={name: fingerprint})  # fmt: skip
    folder = Path(export.run(ctx).models["sft"])
    info = strict_json((folder / "ssmax.json").read_text())
    assert info["node"] == name and info["fingerprint"] == fingerprint


def test_export_fingerprint_covers_the_shipped_law_and_plan_needs_no_transformers() -> None:
    import subprocess
    import sys

    from ssmax.pipeline.stage_code import stage_code

    code = set(stage_code("export"))
    assert {"export/modeling_ssmax.py", "export/hf.py", "model/attention.py",
            "model/laws.py", "model/positions.py"} <= code  # fmt: skip
    # what it registers in MLflow is its result (tracking/models.py); the rest of tracking/ not
    assert [f for f in code if f.startswith("tracking/")] == ["tracking/models.py"]
    check = "import sys, ssmax.stages.export; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert out.stdout.strip() == "False"  # plan and status import stages: no transformers


PROMPT = "The special magic Tokyo number is: 8106422.\nWhat is the special magic number?"


@pytest.mark.slow
def test_smoke_pipeline_exports_every_variant(smoke_pipeline: list[str]) -> None:
    from ssmax.pipeline.run import plan
    from ssmax.stages.context import load_model

    cfg, jobs = plan(smoke_pipeline)
    by_name = {j.name: j for j in jobs}
    exports = [j for j in jobs if j.stage == "export"]
    assert {j.variant for j in exports} == set(cfg.pipeline.variants)
    for job in exports:
        outputs = job.done["outputs"]
        for name in job.input_dirs:  # its start node's model, and its SFT's where it has one
            stage = name.split("/")[0]
            path = Path(outputs["models"][stage])
            assert path.is_relative_to(job.dir) and outputs["registered"][stage]["version"] >= 1
            info = strict_json((path / "ssmax.json").read_text())
            assert info["node"] == name and info["fingerprint"] == by_name[name].fingerprint
            node_cfg = OmegaConf.create(by_name[name].cfg_yaml)
            model = load_model(node_cfg, by_name[name].done["outputs"]["weights"])
            ids = torch.arange(4 * node_cfg.data.seq_len)[None] % node_cfg.data.vocab_size
            with torch.no_grad():
                _, rel = max_differences(model(ids), load_hf(path)(ids).logits)
            assert rel < RTOL, (name, rel)
    report = next(j for j in jobs if j.stage == "report").done["outputs"]
    assert "models:/ssmax-b_ssmax/" in Path(report["report_md"]).read_text()
    assert "= @smoke-sft-seed0" in Path(report["report_md"]).read_text()


@pytest.mark.slow
def test_registered_versions_carry_their_stage_as_alias(smoke_pipeline: list[str]) -> None:
    """models:/ssmax-<variant>@<stage> and @<preset>-<stage>-seed<seed> name the version the
    export registered for that node."""
    from mlflow import MlflowClient

    from ssmax.pipeline.run import plan
    from ssmax.tracking.store import tracking_uri

    cfg, jobs = plan(smoke_pipeline)
    client = MlflowClient(tracking_uri(cfg))
    checked = 0
    for job in (j for j in jobs if j.stage == "export"):
        for stage, found in job.done["outputs"]["registered"].items():
            for alias in (stage, f"smoke-{stage}-seed{job.seed}"):
                named = client.get_model_version_by_alias(found["name"], alias)
                assert int(named.version) == found["version"], (alias, found)
                checked += 1
            assert found["aliases"] == [stage, f"smoke-{stage}-seed{job.seed}"]
    assert checked >= 2 * len(cfg.pipeline.variants)


@pytest.mark.slow
def test_cli_exports_a_pipeline_node(smoke_pipeline: list[str], tmp_path: Path, capsys) -> None:
    # a rope_* node exports at its theta: x50
    assert export_cli("--node", "rope_sft/b_ssmax/seed0", "--out", str(tmp_path / "x"),
                      *smoke_pipeline) == 0  # fmt: skip
    assert load_hf(tmp_path / "x").config.rope_parameters["rope_theta"] == 10_000.0 * 50
    assert export_cli("--node", "sft/zz/seed0", "--out", str(tmp_path / "y"), *smoke_pipeline) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "allowed: pretrain/a_softmax/seed0," in err
    assert not (tmp_path / "y").exists()


@pytest.mark.slow
def test_registered_version_loads_back_and_predicts(smoke_pipeline: list[str]) -> None:
    import mlflow
    from mlflow import MlflowClient

    from ssmax.pipeline.run import plan
    from ssmax.stages.context import load_model
    from ssmax.tracking.models import logged_model_id
    from ssmax.tracking.store import tracking_uri

    cfg, jobs = plan(smoke_pipeline)
    client = MlflowClient(tracking_uri(cfg))
    job = next(j for j in jobs if j.name == "export/b_ssmax/seed0")
    version = job.done["outputs"]["registered"]["sft"]
    found = client.get_model_version(version["name"], str(version["version"]))
    sft = next(j for j in jobs if j.name == "sft/b_ssmax/seed0")
    assert found.tags["fingerprint"] == sft.fingerprint and found.run_id == sft.done["run_id"]
    assert found.tags["preset"] == "smoke" and found.tags["seed"] == "0"
    # a LoggedModel of the SFT run (MLflow 3's Models tab), ready, linked to its version
    logged = client.get_logged_model(logged_model_id(found))  # from its models:/m-<id> source
    assert logged.source_run_id == sft.done["run_id"] and str(logged.status) == "READY"
    linked = json.loads(logged.tags["mlflow.modelVersions"])
    assert {"name": found.name, "version": found.version} in linked
    assert "MLmodel" in {a.path for a in client.list_logged_model_artifacts(logged.model_id)}
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(tracking_uri(cfg))
    try:
        (answer,) = mlflow.pyfunc.load_model(version["uri"]).predict([PROMPT])
        parts = mlflow.transformers.load_model(version["uri"], return_type="components")
    finally:
        mlflow.set_tracking_uri(previous)
    # the exported generation config: the project's greedy decoding, never EOS
    model = load_model(OmegaConf.create(sft.cfg_yaml), sft.done["outputs"]["weights"])
    tokenizer = load_tokenizer(OmegaConf.create(sft.cfg_yaml).data)
    tokens = greedy_decode(model, tokenizer.encode(PROMPT), 8, tokenizer.eos_id)
    ids = torch.tensor([tokenizer.encode(PROMPT)])
    assert parts["model"].generate(ids)[0, ids.shape[1] :].tolist() == tokens
    # the pipeline's text drops trailing whitespace (the smoke model answers with spaces)
    assert (
        answer.startswith(PROMPT)
        and answer.rstrip() == (PROMPT + tokenizer.decode(tokens)).rstrip()
    )
