"""The confirmatory run's registration (docs/registration/): its families are what the claims
code tests, its power rows recompute from the committed exploratory files, its seeds are fresh;
and its run of seeds records each seed at the registered commit (smoke scale)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ssmax.registration import power
from ssmax.registration.run import main as run_main
from ssmax.registration.run import planned, record_path
from ssmax.registration.spec import REGISTRATION, ROOT, load
from ssmax.report.claims import claims
from ssmax.report.gather import Results, Settings

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
    with pytest.raises(SystemExit, match="is not JSON"):
        load(bad)
    bad.write_text("{}")
    with pytest.raises(SystemExit, match="is not a registration: KeyError"):
        load(bad)
    with pytest.raises(SystemExit, match="no registration at"):
        load(tmp_path / "missing.json")


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
    path = smoke_registration(tmp_path)
    reg = load(path)
    args = ["cpu", "--registration", str(path), "--workdir", str(tmp_path / "work"),
            "--python", sys.executable]  # fmt: skip
    assert run_main(args) == 0
    rec = json.loads(record_path(reg, "cpu", 0).read_text())
    assert rec["seed"] == 0 and rec["run"]["seeds"] == [0]
    assert {n["git_commit"] for n in rec["nodes"].values()} == {reg.code_commit}
    assert len(rec["nodes"]) == 44  # every node of the seed but the report
    assert set(rec["results"]) == set(reg.variants)
    assert all(list(by) == ["0"] for ms in rec["results"].values() for by in ms.values())
    before = record_path(reg, "cpu", 0).stat().st_mtime_ns
    assert run_main(args) == 0
    assert record_path(reg, "cpu", 0).stat().st_mtime_ns == before


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
