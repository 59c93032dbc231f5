"""A registration as data: docs/registration/<name>.json, the machine-readable twin of the page
beside it. What a confirmatory run must match (seeds, variants, preset, the commit its nodes
ran) and the rule that judges it, fixed before any of its seeds ran."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the repository, where docs/ lies
REGISTRATION = ROOT / "docs" / "registration" / "confirmatory-2026-11-29.json"
DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")  # a registration's name ends in its date
DESIGN = "design"  # the records of the design seeds: docs/results/<name>/design/, not a run


def shown(path: Path) -> str:
    """The path from the repository's root, however it was given (the pages say the same)."""
    full = Path(path).resolve()
    return str(full.relative_to(ROOT)) if full.is_relative_to(ROOT) else str(path)


@dataclass(frozen=True)
class Registration:
    name: str  # the file's stem; its seed records lie in docs/results/<name>/<run>/
    code_commit: str  # every node of every seed ran this commit's code
    preset: str
    pipeline: str  # pipelines/<pipeline>.yaml
    variants: tuple[str, ...]
    seeds: tuple[int, ...]  # the registered seeds, in the order they run
    spares: tuple[int, ...]  # taken in order for a seed that fails twice for a technical cause
    primary: tuple[str, ...]  # the primary family's ordering labels (verdicts.claims); () where
    # the registration judges other families only (rule.families: each with its orderings)
    runs: dict[str, dict]  # run name (cpu, gpu) -> its machine, seeds and how it is run
    data: dict  # the whole file
    path: Path = REGISTRATION
    design_seeds: tuple[int, ...] = ()  # run first, at code_commit on the cpu; decide nothing

    def records(self, run: str) -> Path:
        """The folder of one run's seed records: docs/results/<name>/<run>/ beside the
        registration's docs/registration/."""
        return self.path.parent.parent / "results" / self.name / run

    def orderings(self, family: str) -> tuple[str, ...]:
        """A registered family's ordering labels ('x < y on metric'), as verdicts.claims names
        them; () where the family lists none (it is every ordering of a kind, in words)."""
        listed = self.data["rule"]["families"].get(family, {}).get("orderings", ())
        return tuple(listed) if isinstance(listed, list) else ()

    def seeds_of(self, run: str) -> tuple[int, ...]:
        """A run's seeds; DESIGN: the design seeds."""
        if run == DESIGN:
            return self.design_seeds
        return tuple(self.runs[run].get("seeds", self.seeds))

    @property
    def page(self) -> Path:
        """The run's generated page, docs/<name less its date>.md beside docs/registration/:
        docs/confirmatory.md, docs/arms.md."""
        return self.path.parent.parent / f"{DATED.sub('', self.name)}.md"


def _known() -> str:
    return ", ".join(shown(p) for p in sorted(REGISTRATION.parent.glob("*.json")))


def load(path: Path = REGISTRATION) -> Registration:
    """The registration at path; a one-line SystemExit naming what is missing or malformed."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SystemExit(f"no registration at {path}; registered: {_known()}") from None
    except json.JSONDecodeError as e:  # its page (.md) given for it, most likely
        raise SystemExit(f"{path} is not JSON ({e.msg}, line {e.lineno}); a registration is "
                         f"its .json file: {_known()}") from None  # fmt: skip
    try:
        return Registration(
            name=path.stem, code_commit=str(data["code_commit"]), preset=str(data["preset"]),
            pipeline=str(data["pipeline"]), variants=tuple(data["variants"]),
            seeds=tuple(int(s) for s in data["seeds"]),
            spares=tuple(int(s) for s in data.get("spares", ())),
            primary=tuple(data["rule"]["families"].get("primary", {}).get("orderings", ())),
            runs=dict(data["runs"]), data=data, path=path,
            design_seeds=tuple(int(s) for s in data.get("design_seeds", ())),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as e:
        raise SystemExit(f"{path} is not a registration: {type(e).__name__} {e}") from None


def cli(main: Callable[[list[str] | None], int]) -> int:
    """A registration command's entry: a refusal (a SystemExit with a message, raised anywhere
    below main) as one line `error: <message>` on stderr and exit status 2, as the project's
    other entries say a bad input; argparse's own exits pass through."""
    try:
        return main(None)
    except SystemExit as refusal:
        if refusal.code is None or isinstance(refusal.code, int):
            raise
        print(f"error: {refusal.code}", file=sys.stderr)
        return 2
