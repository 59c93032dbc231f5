"""The confirmatory run's registration (docs/registration/): its families are what the claims
code tests, its power rows recompute from the committed exploratory files, its seeds are fresh;
and its run of seeds records each seed at the registered commit (smoke scale)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ssmax.registration import judge, power
from ssmax.registration.run import main as run_main
from ssmax.registration.run import planned, record_path
from ssmax.verdicts.claims import claims
from ssmax.verdicts.registered import DESIGN, REGISTRATION, ROOT, Registration, load
from ssmax.verdicts.results import Results, Settings
from ssmax.verdicts.stats import paired_t_power

TINY_COLUMNS = ("pretrain val loss", "loss @1x", "loss @5x", "loss @10x", "loss @20x",
                "loss @1x training theta", "niah @1x", "niah past 1x",
                "needle top mean")  # fmt: skip


def test_the_primary_family_is_the_claims_codes() -> None:
    reg = load()
    table = {v: {c: {0: 1.0, 1: 2.0} for c in TINY_COLUMNS} for v in reg.variants}
    table["pn_rationale"] = {"p_n log fit R²": {0: 0.5, 1: 0.6}}
    results = Results(Settings("tiny", [0, 1], 128), {}, table=table, absent={})
    primary = {k.ordering for c in claims(results) if c.family == "primary" for k in c.checks}
    assert primary == set(reg.primary)
    assert len(reg.primary) == 15


def test_the_power_rows_recompute() -> None:
    reg = load()
    assert power.rows(reg) == reg.data["seed_count"]["power"]
    assert reg.data["seed_count"]["n_cpu"] == len(reg.seeds_of("cpu")) == 24


def test_registered_seeds_are_fresh() -> None:
    """No exploratory file holds a registered or spare seed (only the run's own records may)."""
    reg = load()
    fresh = set(reg.seeds) | set(reg.seeds_of("gpu")) | set(reg.spares)
    for path in (ROOT / "docs" / "results").glob("*.json"):
        results = json.loads(path.read_text()).get("results", {})
        seen = {int(s) for ms in results.values() for by in ms.values() for s in by}
        assert not seen & fresh, path


def test_a_bad_registration_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(SystemExit, match="is not JSON") as refused:
        load(bad)
    assert "a registration is its .json file: docs/registration/arms-2026-11-29.json" in str(
        refused.value)  # its page given for it: the files there are  # fmt: skip
    bad.write_text("{}")
    with pytest.raises(SystemExit, match="is not a registration: KeyError"):
        load(bad)
    with pytest.raises(SystemExit, match="no registration at"):
        load(tmp_path / "missing.json")
    with pytest.raises(SystemExit, match="is a folder; a registration is its .json file: docs/"):
        load(tmp_path)  # the folder docs/registration/ given for a file of it


@pytest.mark.parametrize("entry", ["run", "judge", "equivalence", "power"])
def test_every_registration_command_says_a_bad_file_in_one_line(entry: str) -> None:
    """`make confirm REGISTRATION=nope.json` and the others: 'error: ...' naming the
    registrations there are, status 2 (was: no prefix, status 1)."""
    argv = {"run": ["cpu", "--registration", "nope.json"], "power": ["nope.json"]}.get(
        entry, ["--registration", "nope.json"])  # fmt: skip
    said = subprocess.run([sys.executable, "-m", f"ssmax.registration.{entry}", *argv],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert said.returncode == 2, said.stderr
    assert said.stderr.startswith("error: no registration at nope.json; registered: ")
    assert "docs/registration/confirmatory-2026-11-29.json" in said.stderr
    assert said.stderr.count("\n") == 1, said.stderr


def smoke_registration(tmp_path: Path, **changes: object) -> Path:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    data = json.loads(REGISTRATION.read_text())
    data |= {"preset": "smoke", "code_commit": head, "seeds": [0], "spares": [7],
             "runs": {"cpu": {"seeds": [0]}}} | changes  # fmt: skip
    path = tmp_path / "registration" / "smoke.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    return path


@pytest.mark.slow
def test_a_seed_runs_at_the_registered_commit_and_is_recorded(tmp_path: Path) -> None:
    """One smoke seed through the driver: a clone at HEAD runs it, the record names every
    node with HEAD's commit and holds the seed's values; run again, nothing runs."""
    path = smoke_registration(tmp_path, variants=["a_softmax", "b_ssmax"])  # 15 nodes, not 45
    reg = load(path)
    args = ["cpu", "--registration", str(path), "--workdir", str(tmp_path / "work"),
            "--python", sys.executable]  # fmt: skip
    assert run_main(args) == 0
    rec = json.loads(record_path(reg, "cpu", 0).read_text())
    assert rec["seed"] == 0 and rec["run"]["seeds"] == [0]
    assert {n["git_commit"] for n in rec["nodes"].values()} == {reg.code_commit}
    assert len(rec["nodes"]) == 14  # every node of the seed but the report
    assert set(rec["results"]) == set(reg.variants)
    assert all(list(by) == ["0"] for ms in rec["results"].values() for by in ms.values())
    before = record_path(reg, "cpu", 0).stat().st_mtime_ns
    assert run_main(args) == 0
    assert record_path(reg, "cpu", 0).stat().st_mtime_ns == before


def test_a_finished_run_makes_no_checkout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make confirm` on a run whose every seed has a record (the confirmatory cpu run, 24 of
    24) says so and clones nothing: the checkout's make setup took minutes for no seed."""
    work = tmp_path / "work"
    assert run_main(["cpu", "--workdir", str(work)]) == 0
    assert not work.exists()
    assert capsys.readouterr().out.endswith(": 24 seeds recorded, 0 to go\n")


def test_a_seed_that_fails_twice_is_recorded_and_a_spare_takes_its_place(tmp_path: Path) -> None:
    path = smoke_registration(tmp_path, variants=["no_such_variant"])
    reg = load(path)
    args = ["cpu", "--registration", str(path), "--workdir", str(tmp_path / "work"),
            "--python", sys.executable, "--max-seeds", "1"]  # fmt: skip
    assert run_main(args) == 0
    failed = json.loads(record_path(reg, "cpu", 0, failed=True).read_text())
    assert failed["attempts"] == 2 and failed["log_tail"]
    assert planned(reg, "cpu") == [7]


def test_a_checkout_at_another_commit_is_refused(tmp_path: Path) -> None:
    path = smoke_registration(tmp_path, code_commit="0" * 40)
    (tmp_path / "work").mkdir()
    subprocess.run(["git", "clone", "-q", str(ROOT), str(tmp_path / "work" / "code")], check=True)
    with pytest.raises(SystemExit, match="not the registered 0000"):
        run_main(["cpu", "--registration", str(path), "--workdir", str(tmp_path / "work"),
                  "--python", "python"])  # fmt: skip


COLUMNS = (*TINY_COLUMNS, "p_n log fit R²")


def hand_made(tmp_path: Path, seeds: list[int], commit: str = "c" * 40,
              source: Path = REGISTRATION, lead: str = "b_ssmax") -> Path:  # fmt: skip
    """A registration like source over `seeds` (code_commit c...c) and a record for each:
    `lead` above every other variant in NIAH by 0.3 in every seed, everything else equal up to
    seed noise."""
    data = json.loads(source.read_text())
    data |= {"code_commit": "c" * 40, "seeds": seeds, "spares": [], "runs": {"cpu": {}}}
    path = tmp_path / "registration" / "hand.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    reg = load(path)
    for seed in seeds:
        hand_record(reg, "cpu", seed, commit, lead)
    return path


def hand_record(reg: Registration, run: str, seed: int, commit: str, lead: str) -> None:
    """hand_made's record of one seed of one run."""
    noise = (seed * 37 % 11) / 100
    results = {v: {c: {str(seed): 1.0 + noise + (0.3 if v == lead and "niah" in c else 0.0)}
                   for c in TINY_COLUMNS}
               for v in reg.variants if v != "pn_rationale"}  # fmt: skip
    if "pn_rationale" in reg.variants:
        results["pn_rationale"] = {"p_n log fit R²": {str(seed): 0.5 + noise}}
    rec = {"run": {"preset": "tiny", "seeds": [seed], "train_len": 128, "cpu": "hand"},
           "seed": seed, "wall_s": 60.0, "results": results,
           "nodes": {f"pretrain/a_softmax/seed{seed}": {"git_commit": commit}}}  # fmt: skip
    record_path(reg, run, seed).parent.mkdir(parents=True, exist_ok=True)
    record_path(reg, run, seed).write_text(json.dumps(rec))


def min_detectable_recompute(reg: Registration, m: int) -> None:
    """The registration's min_detectable_sd: the smallest effect (in sd of the per-seed
    difference, to 0.001) with power 0.8 at 0.05 / m for each seed count; and its 24 cpu seeds."""
    level = reg.data["rule"]["alpha"] / m
    for n, d in reg.data["seed_count"]["min_detectable_sd"].items():
        assert paired_t_power(d, 1.0, int(n), level) >= 0.8
        assert paired_t_power(d - 0.002, 1.0, int(n), level) < 0.8
    assert reg.data["seed_count"]["n_cpu"] == len(reg.seeds_of("cpu")) == 24


def results_beside(reg: Registration) -> Iterator[tuple[Path, dict]]:
    """Every results file under docs/results/ but the registration's own seed records (path,
    its "results"): what ran before or beside it."""
    for path in (ROOT / "docs" / "results").rglob("*.json"):
        if not path.is_relative_to(reg.records(DESIGN).parent):
            yield path, json.loads(path.read_text()).get("results", {})


def committed_as_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(judge, "first_committed", lambda path: Path(path).read_text())


def test_an_unfinished_run_computes_no_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = hand_made(tmp_path, [1, 2, 3, 4])
    record_path(load(path), "cpu", 4).unlink()
    committed_as_is(monkeypatch)
    text = judge.page(load(path))
    assert "3 of 4 planned seeds recorded (1, 2, 3)" in text
    assert "Interim: no verdict" in text and "Verdicts" not in text and " p t " not in text
    assert "| (b) | niah past 1x | 1.340 | 1.380 | 1.310 |" in text  # every seed's values


def test_a_finished_run_that_matches_its_registration_is_confirmatory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    committed_as_is(monkeypatch)
    text = judge.page(load(hand_made(tmp_path, list(range(1, 13)))))
    assert "**Verdicts (confirmatory):" in text
    assert "differs from the registration" not in text
    (niah,) = [r for r in text.splitlines() if r.startswith("| Sec. 3.3, Fig. 6: (b) retrieves")]
    assert "| **holds** |" in niah  # the 0.3 lead in every seed; its loss equal: no lead
    (loss,) = [r for r in text.splitlines() if r.startswith("| Sec. 3.1, Fig. 4:")]
    assert "| **holds** |" not in loss


@pytest.mark.parametrize("how", ["commit", "edited", "extra seed"])
def test_a_run_that_does_not_match_is_exploratory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    path = hand_made(tmp_path, list(range(1, 13)), commit="d" * 40 if how == "commit" else "c" * 40)
    reg = load(path)
    if how == "extra seed":  # a record of a seed the registration does not name
        extra = json.loads(record_path(reg, "cpu", 1).read_text()) | {"seed": 99}
        record_path(reg, "cpu", 99).write_text(json.dumps(extra).replace('"1"', '"99"'))
    committed_as_is(monkeypatch)
    if how == "edited":
        monkeypatch.setattr(judge, "first_committed", lambda path: "{}")
    text = judge.page(reg)
    assert "**Verdicts (exploratory (it does not match its registration)):" in text
    said = {"commit": "nodes ran ['ddd", "edited": "differs from the version first committed",
            "extra seed": "seeds not registered: [99]"}[how]  # fmt: skip
    assert said in text
    assert "exploratory: it does not match its registration" in judge.readme_lines(reg)


def test_a_seed_whose_skill_did_not_form_stays_in_and_is_shown_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = hand_made(tmp_path, list(range(1, 13)))
    reg = load(path)
    rec = json.loads(record_path(reg, "cpu", 5).read_text())
    rec["results"]["d_ssmax_bias"]["niah @1x"]["5"] = 0.35  # 7 of 20 at the training length
    record_path(reg, "cpu", 5).write_text(json.dumps(rec))
    rec = json.loads(record_path(reg, "cpu", 6).read_text())
    rec["results"]["c_ssmax_no_scale"]["niah @1x"]["6"] = 0.5  # 10 of 20: on the bound, formed
    record_path(reg, "cpu", 6).write_text(json.dumps(rec))
    committed_as_is(monkeypatch)
    run = judge.gather(reg, "cpu")
    assert judge.invalid_seeds(run) == [5]
    assert len(judge.judged(run)[0].checks[0].differences) == 12  # seed 5 stays in the verdict
    text = judge.page(reg)
    assert "Without the seeds where a variant did not form the skill ([5])" in text
    (niah,) = [r for r in text.splitlines() if r.startswith("| Sec. 3.3, Fig. 6: (b) retrieves")]
    assert "(n=12)" in niah  # the verdict's: every seed
    (row,) = [r for r in text.splitlines() if r.startswith("| (d) | yes")]
    assert row.count("**no**") == 1


@pytest.mark.slow  # every registered ordering and its leave-one-out: ~14 s on 2 cores (2026-11-29)
def test_the_confirmatory_page_is_up_to_date() -> None:
    assert judge.main(["--check"]) == 0, "python -m ssmax.registration.judge"


def test_the_registration_states_the_validity_criterion_the_judge_applies() -> None:
    said = load().data["validity"]["criterion"]
    assert "NIAH accuracy at 1x" in said and f">= {judge.SKILL_AT_LEAST}" in said


def test_a_failed_seed_is_replaced_by_the_next_spare_in_order(tmp_path: Path) -> None:
    path = hand_made(tmp_path, [1, 2, 3])
    data = json.loads(path.read_text()) | {"spares": [7, 8]}
    path.write_text(json.dumps(data))
    reg = load(path)
    for seed in (2, 7):  # 2 failed twice, and so did its first spare
        record_path(reg, "cpu", seed, failed=True).write_text(json.dumps({"seed": seed}))
    assert planned(reg, "cpu") == [1, 8, 3]
    record_path(reg, "cpu", 3, failed=True).write_text(json.dumps({"seed": 3}))
    with pytest.raises(SystemExit, match="seed 3 failed and no spare seed is left"):
        planned(reg, "cpu")


def test_the_gpu_run_is_one_bundled_pipeline_on_the_device(tmp_path: Path) -> None:
    """runs.gpu: every planned seed at once, the pretraining bundled on the GPU."""
    from ssmax.registration.gpu import command

    reg = load()
    argv = command(reg, [13, 14, 15], tmp_path, "python", 16)
    assert argv[1:4] == ["-m", "ssmax.pipeline", "run"]
    assert {"preset=tiny", "pipeline.file=paper", "pipeline.seeds=[13,14,15]",
            "trainer.accelerator=gpu", "preset.hardware=gpu", "executor.bundle=3",
            "executor=local", "executor.workers=16",
            "executor.order=seed", "tracking.enabled=false"} <= set(argv)  # fmt: skip
    assert f"pipeline.variants=[{','.join(reg.variants)}]" in argv
    assert len(reg.seeds_of("gpu")) == 48


def test_a_gpu_run_records_each_seed_with_its_device_and_commit(
    tmp_path: Path, smoke_pipeline: list[str]
) -> None:
    """Each seed's record from the report over all the run's seeds (here the shared smoke
    pipeline's, seed 0, standing in for a GPU run's outputs); then nothing is left to run."""
    from ssmax.registration.gpu import record_seeds

    (out,) = [o.split("=", 1)[1] for o in smoke_pipeline if o.startswith("paths.output_dir=")]
    path = smoke_registration(tmp_path, runs={"cpu": {"seeds": [0]}, "gpu": {"seeds": [0]}})
    reg = load(path)
    assert record_seeds(reg, Path(out), [1], "f" * 40, 1.0, ["python", "x"]) == []  # no report
    assert record_seeds(reg, Path(out), [0], "f" * 40, 60.0, ["python", "-m", "x"]) == [0]
    rec = json.loads(record_path(reg, "gpu", 0).read_text())
    assert rec["registered_run"] == "gpu" and rec["seed"] == 0 and rec["commit"] == "f" * 40
    assert rec["device"] == "none" and rec["command"] == "-m x"  # the smoke pipeline ran on a CPU
    assert "switch/f_switch_during_pretrain/seed0" in rec["nodes"]
    assert set(rec["results"]) == set(reg.variants)
    assert run_main(["gpu", "--registration", str(path), "--workdir", str(tmp_path)]) == 0
    # the judge holds a seed's commit to the registered code (ssmax.registration.equivalence)
    said = judge.conformity(judge.gather(reg, "gpu"))
    assert [s for s in said if s.startswith("seed 0: ran fffffff, whose code")], said
    assert record_seeds(reg, Path(out), [0], reg.code_commit, 60.0, ["python", "-m", "x"]) == [0]
    assert not [s for s in judge.conformity(judge.gather(reg, "gpu")) if "whose code" in s]


def test_the_readme_lines_say_how_far_until_complete_then_each_primary_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    committed_as_is(monkeypatch)
    path = hand_made(tmp_path, list(range(1, 13)))
    record_path(load(path), "cpu", 12).unlink()
    lines = judge.readme_lines(load(path)).splitlines()
    assert lines == ["- Run `cpu`: 11 of 12 registered seeds recorded (1-11); no verdict until "
                     "every seed is in (the registration's conduct)."]  # fmt: skip
    hand_record(load(path), "cpu", 12, "c" * 40, "b_ssmax")
    lines = judge.readme_lines(load(path)).splitlines()
    primary = [c for c in judge.judged(judge.gather(load(path), "cpu")) if c.family == "primary"]
    assert len(lines) == len(primary) + 1  # the run's counts, then a line a primary claim
    assert lines[0].startswith("- **Run `cpu`**, 12 seeds (1-12), hand, confirmatory: the "
                               "primary family **1 hold, 0 contradicted, 4 inconclusive** "
                               "(of 5); the other families: ")  # fmt: skip
    (niah,) = [r for r in lines if r.startswith("  - Sec. 3.3, Fig. 6: (b) retrieves")]
    assert "**holds**" in niah
    assert "a < b on niah by +0.3 [+0.3, +0.3] (n=12), holds" in niah  # lead, interval, verdict


def test_the_readme_keeps_a_block_for_each_committed_registration() -> None:
    """Where each registration's lines stand; their content is held to the records by the
    pages' --check (test_the_confirmatory_page_is_up_to_date, and the arms' own)."""
    readme, results = (p.read_text() for p in judge.LINES_IN)
    for path in sorted((judge.ROOT / "docs/registration").glob("*.json")):
        name = load(path).name
        assert f"<!-- registered:{name} " in readme and f"<!-- /registered:{name} -->" in readme
    assert "<!-- registered:confirmatory-2026-11-29 " in results
    assert judge.with_readme_block(load(), "no block here", "lines") == "no block here"
