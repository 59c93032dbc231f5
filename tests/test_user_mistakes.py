# ruff: noqa: E501  (the table of bad inputs: one case per line)
"""Every mistake a new user can make (smoke preset, fresh output folders): one line on stderr
naming the key or file, exit status 2, no traceback, and nothing written to the output folder.
All fail at validation, before any work: run in process through the command lines' main(), and
a few in a subprocess for the real exit status. A re-run with the mistake fixed therefore
starts from an empty folder, as if the failure never happened."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ssmax.config.compose import ConfigError
from ssmax.model import ModelConfig, Transformer, VariantConfig
from ssmax.pipeline.__main__ import main as pipeline_main

SMOKE = ModelConfig(name="smoke", n_layers=2, n_heads=2, dim=32, ffn_dim=64, vocab_size=512)
TINY = ModelConfig(name="tiny", n_layers=3, n_heads=4, dim=64, ffn_dim=168, vocab_size=512)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Bad input files of every kind, and one good checkpoint to damage."""
    d = tmp_path_factory.mktemp("bad_inputs")
    (d / "text.txt").write_text("hello\n")
    torch.save(Transformer(SMOKE, VariantConfig(), 64).state_dict(), d / "smoke.pt")
    good = (d / "smoke.pt").read_bytes()
    (d / "truncated.pt").write_bytes(good[: len(good) // 2])
    torch.save(Transformer(TINY, VariantConfig(), 64).state_dict(), d / "tiny.pt")
    (d / "folder.pt").mkdir()
    (d / "empty.jsonl").write_text("")
    docs = [json.dumps({"text": f"document {i} " + "word " * 40}) for i in range(50)]
    (d / "bad.jsonl").write_text("\n".join([*docs, "{not json"]) + "\n")
    (d / "notext.jsonl").write_text(json.dumps({"content": "no text field"}) + "\n")
    (d / "bad_squad.json").write_text('{"data": [\n  {"title": "x", ')
    (d / "bad_squad.jsonl").write_text('{"id": "1", "context": "c", "question": "q", '
                                       '"answers": {"text": [], "answer_start": []}}\nnope\n')  # fmt: skip
    (d / "flat_squad.json").write_text(json.dumps({"data": [{"title": "t"}]}))
    (d / "a_file").write_text("")
    (d / "shards").mkdir()  # a prepared folder whose splits hold a few tokens each
    few = {s: {"files": [{"name": f"{s}-0.bin", "tokens": 100}]} for s in ("train", "validation")}
    (d / "shards" / "manifest.json").write_text(json.dumps(
        {"format": "ssmax-token-shards-1", "tokenizer": "?", "splits": few}))  # fmt: skip
    return d


SQUAD = "data.sft_source=squad_v2"
SLIM = "data.source=slimpajama"
NOFACTS = "data.facts.fraction=0"  # facts are planted in indexed rows, not in a stream
# (id, overrides of `python -m ssmax.pipeline run`, what the line must say); {d}: the files
CASES = [
    ("lr-not-a-number", ["trainer.pretrain.lr=abc"], "trainer.pretrain.lr='abc' has the wrong type; allowed: a number > 0"),
    ("lr-negative", ["trainer.pretrain.lr=-1"], "trainer.pretrain.lr=-1.0 must be > 0"),
    ("batch-zero", ["trainer.pretrain.batch_size=0"], "trainer.pretrain.batch_size=0 must be > 0"),
    ("seq-len-zero", ["data.seq_len=0"], "data.seq_len=0 must be > 0"),
    ("steps-float", ["trainer.pretrain.max_steps=1.5"], "trainer.pretrain.max_steps='1.5' has the wrong type"),
    ("seed-negative", ["seed=-1"], "seed=-1 must be >= 0"),
    ("seed-too-large", ["seed=4294967296"], "seed=4294967296 must be <= 4294967295"),
    ("seed-not-a-number", ["seed=abc"], "seed='abc' has the wrong type"),
    ("seeds-negative", ["pipeline.seeds=[0,-1]"], "pipeline.seeds[1]=-1 must be >= 0"),
    ("seeds-empty", ["pipeline.seeds=[]"], "pipeline.seeds=[] must have at least 1 item"),
    ("variants-empty", ["pipeline.variants=[]"], "pipeline.variants=[] must have at least 1 item"),
    ("variants-unknown", ["pipeline.variants=[zzz]"], "pipeline.variants: unknown ['zzz']"),
    # a list item given twice (issue 57): one line naming the key and the item
    ("variants-twice", ["pipeline.variants=[a_softmax,a_softmax]"], "pipeline.variants=['a_softmax', 'a_softmax'] has 'a_softmax' twice; allowed: each item once"),
    ("seeds-twice", ["pipeline.seeds=[0,1,0]"], "pipeline.seeds=[0, 1, 0] has 0 twice; allowed: each item once"),
    ("targets-twice", ["pipeline.targets=[pretrain,pretrain]"], "pipeline.targets=['pretrain', 'pretrain'] has 'pretrain' twice"),
    ("niah-multiples-twice", ["eval.niah.context_multiples=[2,4,2.0]"], "eval.niah.context_multiples=[2, 4, 2.0] has 2.0 twice; allowed: each item once"),
    ("loss-multiples-twice", ["eval.loss.report_multiples=[1,2,2]"], "eval.loss.report_multiples=[1, 2, 2] has 2 twice"),
    ("depths-twice", ["eval.niah.depths=[0.5,0.5]"], "eval.niah.depths=[0.5, 0.5] has 0.5 twice"),
    ("variant-unknown", ["variant=zzz"], "variant='zzz' is unknown"),
    ("preset-unknown", ["preset=zzz"], "preset='zzz' is unknown; allowed: gpu1, paper, smoke, tiny"),
    ("pipeline-unknown", ["pipeline.file=papr"], "pipeline.file='papr' is unknown (did you mean 'paper'?); allowed: paper, rival_laws, scaling_laws, or a path to a .yaml file"),
    ("pipeline-file-missing", ["pipeline.file=/nonexistent/p.yaml"], "pipeline.file='/nonexistent/p.yaml': no such file"),
    ("objective-unknown", ["objective=bogus"], "objective='bogus'; allowed"),
    ("key-misspelled", ["trainer.pretrain.lrr=1"], "trainer.pretrain.lrr is not a config key; nearest: trainer.pretrain.lr"),
    ("profile-unknown", ["executor=slurm", "executor/slurm/profile=zzz"], "executor/slurm/profile='zzz' is unknown; allowed: gpu8, local"),
    # seeds bundled (issue 59): an integer >= 0, and not where each node is its own SLURM job
    ("bundle-negative", ["executor.bundle=-1"], "executor.bundle=-1 must be >= 0"),
    ("bundle-not-an-integer", ["executor.bundle=abc"], "executor.bundle='abc' has the wrong type; allowed: an integer >= 0"),
    ("bundle-fraction", ["executor.bundle=2.5"], "executor.bundle='2.5' has the wrong type; allowed: an integer >= 0"),
    ("bundle-on-slurm", ["executor=slurm", "executor.bundle=4"], "executor.bundle=4 runs with executor=inprocess or executor=local; executor=slurm runs each node as its own job: set executor.bundle=0"),
    ("betas-out-of-range", ["trainer.pretrain.betas=[2,0.9]"], "trainer.pretrain.betas[0]=2.0 must be < 1"),
    ("betas-one-item", ["trainer.sft.betas=[0.9]"], "trainer.sft.betas=[0.9] must have 2 items"),
    ("fraction-over-one", ["data.val_fraction=1.5"], "data.val_fraction=1.5 must be < 1.0"),
    ("depth-over-one", ["eval.niah.depths=[0.5,1.5]"], "eval.niah.depths[1]=1.5 must be <= 1"),
    ("digits-reversed", ["data.facts.digits=[8,4]"], "data.facts.digits=[8, 4] must be [lo, hi], 1 <= lo <= hi"),
    ("facts-in-a-stream", [SLIM, "data.slimpajama_files=[{d}/bad.jsonl]"], "data.facts.fraction=0.5 plants facts in indexed rows (data.source=embedded or data.shards_dir), not in the data.source=slimpajama stream"),
    ("words-min-over-max", ["data.sft_context_words_min=90"], "data.sft_context_words_min=90 must be <= data.sft_context_words_max=70"),
    ("switch-fraction", ["protocol.switch_fraction=2"], "protocol.switch_fraction=2.0 must be < 1"),
    # a key that moved (the protocol's settings out of pipeline): the setting to write instead
    ("moved-key", ["pipeline.rope_factor=20"], "pipeline.rope_factor=20: pipeline.rope_factor is now protocol.rope_factor (the protocol's settings moved out of pipeline); set protocol.rope_factor=20"),
    ("moved-key-of-a-variant", ["+pipeline.overrides.a_softmax=['pipeline.switch_fraction=0.5']"], "pipeline.overrides.a_softmax: pipeline.switch_fraction=0.5: pipeline.switch_fraction is now protocol.switch_fraction"),
    ("accelerator-unknown", ["trainer.accelerator=tpuu"], "trainer.accelerator='tpuu'; allowed"),
    ("node-past-timeout", ["executor=local", "executor.timeout_min=1", "trainer.pretrain.max_steps=200000"], "pretrain/a_softmax/seed0 would take ~"),
    ("node-past-timeout-says-fix", ["executor=local", "executor.timeout_min=1", "trainer.pretrain.max_steps=200000"], "past executor.timeout_min=1 after which the local executor kills a node; raise executor.timeout_min to at least"),
    ("precision-unknown", ["trainer.precision=fp8"], "trainer.precision='fp8'; allowed"),
    ("override-unquoted", ["+pipeline.overrides.a_softmax=[trainer.pretrain.lr=abc]"], "'+pipeline.overrides.a_softmax=[trainer.pretrain.lr=abc]' is not a valid override (no viable alternative at input '[trainer.pretrain.lr='): quote a value"),
    ("override-bad-key", ["+pipeline.overrides.a_softmax=['trainer.pretrain.lrr=1']"], "trainer.pretrain.lrr is not a config key"),
    ("init-missing", ["init_from=/nonexistent/model.pt"], "init_from=/nonexistent/model.pt: no such file"),
    ("init-text", ["init_from={d}/text.txt"], "init_from={d}/text.txt does not load as a PyTorch checkpoint"),
    ("init-truncated", ["init_from={d}/truncated.pt"], "init_from={d}/truncated.pt does not load as a PyTorch checkpoint"),
    ("init-folder", ["init_from={d}/folder.pt"], "init_from={d}/folder.pt is a folder"),
    ("init-other-size", ["init_from={d}/tiny.pt"], "init_from={d}/tiny.pt does not fit the model: tok_emb.weight is [512, 64] there, [512, 32] here (the checkpoint: vocab 512, dim 64, 3 layers, ffn_dim 168; model=smoke: vocab 512, dim 32, 2 layers, ffn_dim 64; set model= or preset="),
    ("slimpajama-missing", [SLIM, NOFACTS, "data.slimpajama_files=[/nonexistent/x.jsonl]"], "data.slimpajama_files: no such file /nonexistent/x.jsonl"),
    ("slimpajama-empty", [SLIM, NOFACTS, "data.slimpajama_files=[{d}/empty.jsonl]"], "data.slimpajama_files: {d}/empty.jsonl is empty"),
    ("slimpajama-malformed", [SLIM, NOFACTS, "data.slimpajama_files=[{d}/bad.jsonl]"], "data.slimpajama_files: {d}/bad.jsonl line 51 is not JSON"),
    ("slimpajama-no-text", [SLIM, NOFACTS, "data.slimpajama_files={{train:[{d}/notext.jsonl]}}"], "data.slimpajama_files: {d}/notext.jsonl line 1 has no 'text' field"),
    ("squad-malformed-json", [SQUAD, "data.squad_files=[{d}/bad_squad.json]"], "data.squad_files: {d}/bad_squad.json line 2 is not JSON"),
    ("squad-malformed-jsonl", [SQUAD, "data.squad_files=[{d}/bad_squad.jsonl]"], "data.squad_files: {d}/bad_squad.jsonl line 2 is not JSON"),
    ("squad-not-nested", [SQUAD, "data.squad_files=[{d}/flat_squad.json]"], "data.squad_files: {d}/flat_squad.json is JSON but not SQuAD 2.0's nested format"),
    ("squad-missing", [SQUAD, "data.squad_files=[/nonexistent/s.json]"], "data.squad_files: no such file /nonexistent/s.json"),
    ("shards-missing", ["data.shards_dir=/nonexistent/shards"], "data.shards_dir=/nonexistent/shards holds no manifest.json"),
    # data that leaves nothing to train or validate on (issue 57): the setting and the data's size
    ("seq-len-no-validation", ["data.seq_len=200000"], "data.seq_len=200000 leaves no validation sequence: the embedded corpus's validation split has at most 122,088 tokens (a token a UTF-8 byte, and a document end each), fewer than the seq_len+1 = 200,001 one sequence takes"),
    ("seq-len-no-batch", ["data.seq_len=1000000"], "data.seq_len=1000000 leaves no training batch: the embedded corpus's training split has at most 3,823,033 tokens (a token a UTF-8 byte, and a document end each), 3 sequence(s) of seq_len+1 = 1,000,001 tokens, fewer than trainer.pretrain.batch_size=4 on 1 device"),
    ("seq-len-no-sequence", ["data.seq_len=4000000"], "data.seq_len=4000000 leaves no training sequence: the embedded corpus's training split has at most 3,823,033 tokens"),
    ("val-fraction-no-document", ["data.val_fraction=0.0001"], "data.val_fraction=0.0001 leaves no validation sequence: the embedded corpus's validation split holds no document"),
    ("shards-too-few-tokens", ["data.shards_dir={d}/shards"], "data.seq_len=64 leaves no training batch: data.shards_dir={d}/shards's training split has 100 tokens, 1 sequence(s) of seq_len+1 = 65 tokens, fewer than trainer.pretrain.batch_size=4 on 1 device"),
    # an eval context no memory here holds (issue 57): the setting, what it needs, what there is
    ("niah-context-no-memory", ["eval.niah.context_multiples=[2,100000000]"], "eval.niah.context_multiples[1]=100000000 asks for a context of 6,400,000,000 tokens (x data.seq_len=64), which needs at least 1.5 TiB for the keys and values of every layer (128 values of 2 bytes a token), more than the largest memory the plan sees ("),
    ("loss-context-no-memory", ["eval.loss.max_multiple=1000000000"], "eval.loss.max_multiple=1000000000 asks for a context of 64,000,000,000 tokens (x data.seq_len=64), which needs at least 7.5 TiB for the keys and values of one layer"),
    ("needle-context-no-memory", ["eval.needle_scores.context_multiple=1e10"], "eval.needle_scores.context_multiple=10000000000.0 asks for a context of 640,000,000,000 tokens"),
    ("sft-no-examples", ["data.sft_num_examples=1"], "data.sft_num_examples=1 leaves no SFT validation example: none of the generated examples is both answerable (the SQuAD filter; data.sft_unanswerable_fraction=0.1) and in the validation split (data.sft_val_fraction=0.05)"),
    ("output-dir-is-a-file", ["paths.output_dir={d}/a_file/out"], "paths.output_dir={d}/a_file/out: {d}/a_file is a file, not a folder"),
    ("output-dir-unwritable", ["paths.output_dir=/proc/ssmax-out"], "paths.output_dir=/proc/ssmax-out cannot be written"),
    ("option-unknown", ["--wiat"], "option '--wiat' is unknown; allowed: --wait, --help"),
    # a rival law's parameter out of its domain, or on a kernel that cannot run it (issue 43)
    ("tau-zero", ["pipeline.variants=[k_scale_invariant]", "variant.tau=0"], "variant.tau=0.0 must be > 0"),
    ("alpha-one", ["pipeline.variants=[l_asentmax]", "variant.alpha=1"], "variant.alpha=1.0 must be > 1"),
    ("entmax-on-flex", ["pipeline.variants=[l_asentmax]", "+pipeline.overrides.l_asentmax=['variant.path=flex']"], "variant.path='flex' cannot run variant.normalizer='entmax' (SDPA and FlexAttention normalise with softmax); allowed with it: 'auto', 'explicit'"),
    ("score-law-on-sdpa", ["pipeline.variants=[k_scale_invariant]", "+pipeline.overrides.k_scale_invariant=['variant.path=sdpa']"], "variant.path='sdpa' cannot run variant.score_law='scale_invariant'"),
]  # fmt: skip


def run_in_process(
    args: list[str], out: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, list[str]]:
    base = ["preset=smoke", f"paths.output_dir={out}", f"paths.cache_dir={cache}"]
    base = [b for b in base if not any(a.startswith(b.split("=")[0] + "=") for a in args)]
    capsys.readouterr()
    status = pipeline_main(["run", *base, *args])
    err = capsys.readouterr().err
    return status, [line for line in err.splitlines() if line.strip()]


@pytest.mark.parametrize(("args", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(
    args: list[str], says: str, files: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("PATH", "/nonexistent")  # no SLURM here, whatever the machine has
    out = tmp_path / "out"
    args = [a.format(d=files) for a in args]
    status, lines = run_in_process(args, out, tmp_path / "cache", capsys)
    assert status == 2
    assert lines == [f"error: {lines[0].removeprefix('error: ')}"] and len(lines) == 1, lines
    assert says.format(d=files) in lines[0]
    assert "Traceback" not in lines[0]
    assert not out.exists()  # no node, run or MLflow store that a later run could take up
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["run", "--help"], ["plan", "x=1", "--help"]])
def test_help_says_the_commands_and_runs_nothing(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert pipeline_main(argv) == 0
    said = capsys.readouterr().out
    assert all(f"\n{c} " in said for c in ("run", "plan", "status")) and "--wait" in said
    assert list(tmp_path.iterdir()) == []


def test_slurm_that_is_not_there_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no sbatch here
    out = tmp_path / "out"
    args = ["executor=slurm", "pipeline.variants=[a_softmax]"]
    status, lines = run_in_process(args, out, tmp_path / "cache", capsys)
    assert status == 2 and len(lines) == 1
    assert lines[0].startswith("error: executor=slurm: SLURM is not installed here (no sbatch)")
    assert not out.exists()


def test_debug_switch_shows_the_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSMAX_DEBUG", "1")
    with pytest.raises(ConfigError, match="seed=-1 must be >= 0"):
        pipeline_main(["plan", "preset=smoke", f"paths.output_dir={tmp_path}", "seed=-1"])


def entry(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    ("module", "args", "says"),
    [
        ("ssmax.pipeline", ["run", "trainer.pretrain.lr=abc"], "trainer.pretrain.lr='abc'"),
        ("ssmax.train", ["init_from={d}/truncated.pt"], "does not load as a PyTorch checkpoint"),
        ("ssmax.train", [SLIM, NOFACTS, "data.slimpajama_files=[{d}/bad.jsonl]"], "line 51 is not JSON"),
        ("ssmax.train", ["objective=sft", SQUAD, "init_from={d}/smoke.pt",
                         "data.squad_files=[{d}/bad_squad.json]"], "line 2 is not JSON"),
    ],
    ids=["pipeline-type", "train-checkpoint", "train-slimpajama", "train-squad"],
)  # fmt: skip
def test_entry_points_exit_2_with_one_line(
    module: str, args: list[str], says: str, files: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    args = [a.format(d=files) for a in args]
    command = args[:1] if args[0] == "run" else []  # the pipeline's command comes first
    done = entry(module, *command, "preset=smoke", f"paths.output_dir={out}", *args[len(command) :])
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines
    assert not out.exists()


def test_gpu_bench_script_refuses_an_unknown_part_before_any_work(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[1] / "scripts" / "gpu_bench.sh"
    env = os.environ | {"OUT": str(tmp_path / "out")}
    done = subprocess.run(["bash", str(script), "niah", "mfu"], capture_output=True, text=True,
                          env=env, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        "gpu_bench.sh: unknown part 'mfu' (allowed: niah, evals, step, sysmetrics, seeds, bits, "
        "replicate, rivals, bundle, confirm)\n"
    )
    assert not (tmp_path / "out").exists()  # nothing installed, nothing written


def test_mlflow_ui_on_a_busy_port_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ssmax.tracking.ui import main as ui_main

    (tmp_path / "mlflow.db").write_bytes(b"")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert ui_main(["--output-dir", str(tmp_path), "--port", str(port)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"--port {port} on 127.0.0.1 is in use" in lines[0]
    assert "make mlflow-ui PORT=" in lines[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: accelerator=gpu is right")
def test_gpu_asked_for_without_one_is_one_line_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    says = "error: trainer.accelerator=gpu but no CUDA device is visible here; allowed on this "
    out = tmp_path / "out"
    status, lines = run_in_process(["trainer.accelerator=gpu"], out, tmp_path / "cache", capsys)
    assert status == 2 and len(lines) == 1 and lines[0].startswith(says), lines
    assert not out.exists()
    done = entry("ssmax.train", "preset=smoke", f"paths.output_dir={out}",
                 "trainer.accelerator=gpu")  # fmt: skip
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(says), lines
    assert not out.exists()


def test_data_found_empty_once_built_is_one_line(
    tmp_path: Path, shared_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """data.seq_len past the validation split's tokens (54,572 at smoke's BPE) but within the
    bound known before any work (122,088: its bytes): ssmax.train says so in one line before it
    makes its run folder (what it wrote is the tokenizer's cache, which the fixed re-run reads);
    the pipeline's training node fails in one line instead of training and validating on
    nothing."""
    seq = "data.seq_len=100000"
    says = ("data.seq_len=100000 leaves no validation sequence: the embedded corpus's validation "
            "split has 54,572 tokens, fewer than the seq_len+1 = 100,001 one sequence takes")  # fmt: skip
    out, cache = tmp_path / "out", f"paths.cache_dir={shared_cache}"
    done = entry("ssmax.train", "preset=smoke", f"paths.output_dir={out}", cache, seq)
    lines = [line for line in done.stderr.splitlines() if line.strip()]  # and tokenizing's bars
    assert done.returncode == 2 and lines[-1].startswith(f"error: {says}"), done.stderr[-2000:]
    assert lines[-1].endswith("; lower data.seq_len or raise data.val_fraction")
    assert "Traceback" not in done.stderr and sum(li.startswith("error:") for li in lines) == 1
    assert not (out / "runs").exists() and not (out / "mlflow.db").exists()

    pipe = tmp_path / "pipe"
    args = ["preset=smoke", f"paths.output_dir={pipe}", cache, seq, "pipeline.variants=[a_softmax]",
            "pipeline.targets=[pretrain]", "tracking.enabled=false"]  # fmt: skip
    capsys.readouterr()
    assert pipeline_main(["run", *args]) == 1
    said = capsys.readouterr().out
    assert f"FAILED  pretrain/a_softmax/seed0: {says}" in said and "Traceback" not in said, said
    assert not list(pipe.rglob("done.json"))  # and its folder went: nothing to resume from


def test_generated_sft_counts_match_the_set(shared_cache: Path) -> None:
    """The preflight's count of answerable generated examples per split (no corpus read) is
    what the SQuAD filter leaves of the generated set."""
    from ssmax.config.compose import compose
    from ssmax.data.squad import load_squad
    from ssmax.data.squad_gen import answerable_per_split

    cfg = compose("preset=smoke", f"paths.cache_dir={shared_cache}", "data.sft_num_examples=200")
    counts = answerable_per_split(cfg.data)
    assert counts == {s: len(load_squad(cfg.data, s)) for s in ("train", "validation")}
    assert counts["validation"] > 0


@pytest.mark.parametrize("preset", ["smoke", "tiny", "paper", "gpu1"])
def test_presets_pass_the_size_checks_on_a_small_machine(
    preset: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No preset's eval context needs more than 8 GiB by plan's memory bound, nor leaves its
    data nothing to train or validate on (`python -m ssmax.pipeline plan preset=...` plans all
    four: docs/training.md)."""
    from ssmax.config.compose import compose
    from ssmax.preflight import memory
    from ssmax.preflight.data_sizes import check_data_sizes

    monkeypatch.setattr(memory, "machine_memory", lambda cfg: (8.0 * 2**30, "8 GiB"))
    cfg = compose(f"preset={preset}", config_name="pipeline")
    memory.check_eval_memory(cfg)
    check_data_sizes(cfg)
    with pytest.raises(ConfigError, match="more than the largest memory the plan sees"):
        memory.check_eval_memory(compose(f"preset={preset}", "eval.niah.context_multiples=[1e9]",
                                         config_name="pipeline"))  # fmt: skip


def test_training_an_inference_only_law_says_what_it_trains() -> None:
    """(g) and (m) apply their law at inference only; trained from scratch, a run says in one
    line that it trains softmax weights, which holds: their law is 1 at every training position."""
    from ssmax.config.compose import compose
    from ssmax.config.variants import facts, names
    from ssmax.model.laws import LAWS
    from ssmax.train import inference_only_line

    seen = []
    for name in names():
        cfg = compose("preset=smoke", f"variant={name}")
        line = inference_only_line(cfg)
        if not (facts(name).start and facts(name).inherit):
            assert line is None, name
            continue
        seen.append(name)
        v, n = cfg.variant, int(cfg.data.seq_len)
        start = facts(name).start["variant"]
        if v.scale == "none" and v.normalizer != "softmax":  # (p): a normaliser at every n
            assert "is no length law and acts at every position" in line, name
            continue
        if v.scale == "none":  # (k2): (k)'s own training, its RoPE as trained at the evals
            assert line.startswith(f"variant={name} trains as {start} does"), line
            continue
        law = LAWS[v.scale](torch.arange(1, n + 1, dtype=torch.float), train_len=n,
                            mscale_power=v.mscale_power)  # fmt: skip
        assert torch.equal(law, torch.ones(n)), name
        assert line == (
            f"variant={name} is inference-only: its law (variant.scale={v.scale}) is 1 at every "
            f"position up to data.seq_len={n}, so this run trains softmax weights, as a_softmax "
            "does; the law applies only at evaluation, past data.seq_len (the pipeline evaluates "
            f"a_softmax's own weights under it: conf/variant/{name}.yaml)"
        )
    assert seen == ["g_qwen_logn_inference", "k_scale_invariant_own_rope",
                    "m_yarn_temp_inference", "m_yarn_temp_per_pass_inference",
                    "m_yarn_whole_dynamic_inference", "p_adaptive_temp_inference"]  # fmt: skip
