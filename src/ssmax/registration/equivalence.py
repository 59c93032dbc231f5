"""Whether a commit computes what the registered commit computes: the check that holds a gpu
run to its registration ("at a commit whose training and eval code differs from code_commit
only by the device path and the bundling").

    python -m ssmax.registration.equivalence [--registration F] [--commit C] [--workdir DIR]

The registration's pipeline at the smoke preset, solo nodes on this machine's CPU, once from a
copy of code_commit and once from a copy of C (default HEAD; `git archive`, each with this
interpreter's packages); then every file that carries a number (NUMBERS: weights, the evals'
outputs, the exported models, the data positions) compared byte for byte, and the report's
results.json value for value. The outcome goes to docs/results/<name>/equivalence.json (one
entry per commit checked, written atomically), which the judge reads: a gpu run's commit is
accepted where it is code_commit, or where its src/, conf/ and pipelines/ equal those of a
commit found equal here (a later commit that changed docs only needs no new check). The device
path and the bundling are not exercised here (no GPU, no bundle): their equality to the CPU's
solo nodes is the bundle tests' (tests/test_bundle*.py).
"""

from __future__ import annotations

import datetime
import fnmatch
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ssmax.files.atomic import atomic_write_json
from ssmax.host.cli import Parser
from ssmax.tracking.manifest import cpu_model
from ssmax.verdicts.registered import REGISTRATION, ROOT, Registration, cli, load, shown

NUMBERS = ("*.pt", "*.csv", "*.jsonl", "*.safetensors", "needle_trials.json", "data_step*.json")
CODE = ("src", "conf", "pipelines")  # what a node computes is read from these (not docs/)
SHOWN = 20  # differing files named in an entry


ABOUT = (
    "Commits checked against the registration's code commit by python -m "
    "ssmax.registration.equivalence: the smoke pipeline of its variants on the CPU, solo, "
    "from copies of both; equal: every weight, eval output, export and data position byte "
    "for byte, and the report's results value for value."
)


def equivalence_path(reg: Registration) -> Path:
    return reg.records("cpu").parent / "equivalence.json"


def entries_of(reg: Registration) -> list[dict]:
    path = equivalence_path(reg)
    return json.loads(path.read_text())["checks"] if path.is_file() else []


def smoke_at(
    root: Path, commit: str, into: Path, reg: Registration, extra: tuple[str, ...]
) -> Path:
    """The registration's pipeline at the smoke preset from a copy of `commit`, into `into`;
    its output folder."""
    code = into / "code"
    code.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(root), "archive", commit], capture_output=True,
                             check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(code)], input=archive, check=True)
    out = into / "outputs"
    argv = [sys.executable, "-m", "ssmax.pipeline", "run", "preset=smoke",
            f"pipeline.file={reg.pipeline}", f"pipeline.variants=[{','.join(reg.variants)}]",
            "pipeline.seeds=[0]", "executor=inprocess", *extra,
            f"paths.output_dir={out}"]  # fmt: skip
    env = os.environ | {"PYTHONPATH": str(code / "src")}  # the copy's code, these packages
    done = subprocess.run(argv, cwd=code, env=env, capture_output=True, text=True)
    if done.returncode:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise SystemExit(f"the smoke pipeline at {commit} failed (exit {done.returncode}):\n{tail}")
    return out


def numbers(outputs: Path) -> dict[str, str]:
    """sha256 of every NUMBERS file of the nodes, keyed by stage/variant/seed/... without the
    fingerprint folder (it names the code, which may differ)."""
    nodes, out = outputs / "pipeline" / "nodes", {}
    for path in sorted(nodes.rglob("*")):
        if path.is_file() and any(fnmatch.fnmatch(path.name, p) for p in NUMBERS):
            parts = path.relative_to(nodes).parts
            key = "/".join(parts[:3] + parts[4:]) if parts[0] != "report" else "/".join(
                parts[:1] + parts[2:])  # fmt: skip
            out[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def results(outputs: Path) -> dict | None:
    found = sorted((outputs / "pipeline" / "nodes" / "report").glob("*/report/results.json"))
    return json.loads(found[-1].read_text()) if found else None


def compare(old: Path, new: Path) -> dict:
    """How two smoke output folders' numbers agree: files compared, those that differ or lie
    on one side only, and whether the reports' results are equal."""
    a, b = numbers(old), numbers(new)
    differ = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
    one_side = sorted(a.keys() ^ b.keys())
    same_results = results(old) == results(new)
    return {"compared": len(a.keys() & b.keys()), "differing": differ[:SHOWN],
            "n_differing": len(differ), "one_side": one_side[:SHOWN],
            "results_equal": same_results,
            "equal": bool(a) and not differ and not one_side and same_results}  # fmt: skip


def check(reg: Registration, commit: str, workdir: Path, root: Path = ROOT,
          extra: tuple[str, ...] = (), keep: Path | None = None) -> dict:  # fmt: skip
    """The entry for `commit` (module docstring); keep: a folder to leave the two runs in
    (registered/, checked/), else they go with a temporary folder in workdir."""
    full = rev_parse(root, commit)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        into = keep or Path(tmp)
        old = smoke_at(root, reg.code_commit, into / "registered", reg, extra)
        new = smoke_at(root, full, into / "checked", reg, extra)
        outcome = compare(old, new)
    return {"commit": full, "against": reg.code_commit, "preset": "smoke", "extra": list(extra),
            "date": datetime.date.today().isoformat(), "cpu": cpu_model(), **outcome}  # fmt: skip


def rev_parse(root: Path, commit: str) -> str:
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", f"{commit}^{{commit}}"],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode:
        raise SystemExit(f"no commit {commit!r} in {root}")
    return done.stdout.strip()


def same_code(root: Path, a: str, b: str) -> bool:
    """Whether the two commits' CODE folders are equal (False where either is unknown)."""
    done = subprocess.run(["git", "-C", str(root), "diff", "--quiet", a, b, "--", *CODE],
                          capture_output=True)  # fmt: skip
    return done.returncode == 0


def accepted(reg: Registration, commit: str, root: Path = ROOT) -> bool:
    """Whether a gpu run at `commit` meets the registration: code_commit's code, or the code of
    a commit found equal on the whole registered pipeline (no extra overrides)."""
    if commit.startswith(reg.code_commit[:7]) or same_code(root, reg.code_commit, commit):
        return True
    return any(e["equal"] and not e["extra"] and e["against"] == reg.code_commit
               and same_code(root, e["commit"], commit) for e in entries_of(reg))  # fmt: skip


def code_rule(reg: Registration, given: str = "") -> str:
    """How a run off the registered commit (the gpu run) is held to its code, and what has been
    checked, for its page (given: how the command names a registration other than the
    default)."""
    path, entries = equivalence_path(reg), entries_of(reg)
    found = "none checked yet"
    if entries:
        e = entries[-1]  # the newest: main appends
        found = (
            f"{len(entries)} checked, the latest {e['commit'][:7]} ({e['date']}, "
            f"{e['cpu']}): {'equal' if e['equal'] else 'NOT equal'}, {e['compared']} files"
        )
    return (f"Its code: {reg.code_commit[:7]}'s, or a commit whose src/, conf/ and pipelines/ "
            "are those of one shown to compute what it does on the CPU (`python -m "
            f"ssmax.registration.equivalence{given}`: the smoke pipeline's weights, evals and "
            f"exports byte for byte, its results value for value; {shown(path)}): {found}. Each "
            "seed's record names its commit; the judge holds it to this.")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = Parser("ssmax.registration.equivalence", description=__doc__.split("\n\n")[0])
    parser.add_argument("--registration", type=Path, default=REGISTRATION)
    parser.add_argument("--commit", default="HEAD", help="the commit to check (HEAD)")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the two smoke pipelines run (a temporary folder in it)",
    )
    args = parser.parse_args(argv)
    reg = load(args.registration)
    entry = check(reg, args.commit, args.workdir)
    path = equivalence_path(reg)
    entries = [e for e in entries_of(reg) if e["commit"] != entry["commit"]] + [entry]
    atomic_write_json(path, {"about": ABOUT, "checks": entries}, indent=1)
    verdict = "equal" if entry["equal"] else "NOT equal"
    print(
        f"{entry['commit'][:7]} against {reg.code_commit[:7]}: {verdict} "
        f"({entry['compared']} files compared, {entry['n_differing']} differ, "
        f"{len(entry['one_side'])} on one side only, results "
        f"{'equal' if entry['results_equal'] else 'differ'}); written to {path}"
    )
    return 0 if entry["equal"] else 1


if __name__ == "__main__":
    sys.exit(cli(main))
