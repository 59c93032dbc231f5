"""A pipeline declared as data: pipelines/<name>.yaml (see pipelines/paper.yaml).

It names the variants, the seeds, the stages (node stage -> module in ssmax.stages), where a
variant starts, the chain of stages after that and what the report reads. Nothing here knows a
variant or a stage by name.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, fields
from pathlib import Path

from omegaconf import OmegaConf

from ssmax.config.variants import facts

PIPELINES_DIR = Path(__file__).resolve().parents[3] / "pipelines"
START = "start"  # in chain and `report: reads`: the variant's first node
OPTIONAL = {"export"}  # keys a declaration may leave out


@dataclass(frozen=True)
class Declaration:
    name: str
    variants: list[str]
    seeds: list[int]
    stages: dict[str, str]  # node stage -> module in ssmax.stages
    start: dict[
        str, str
    ]  # scratch: stage of a variant from scratch; from_other: started from another
    chain: dict[str, str]  # stage -> the stage (same variant and seed) it reads, or "start"
    report: dict[str, object]  # stage: the report's stage; reads: stages (or "start") it reads
    # stage: one node per variant and seed after training; reads: its stages (or "start") that
    # the variant has (every variant has its start; those with evals their chain too)
    export: dict[str, object] | None = None

    # The engine reads the two sections below through these, under the names of their roles:
    # the YAML's keys are the language's, whichever stage each names.
    @property
    def final_stage(self) -> str:
        """The stage of the pipeline's one last node, which reads every variant's (`report:`)."""
        return str(self.report["stage"])

    @property
    def final_reads(self) -> list[str]:
        """The stages (or "start") whose nodes of every variant and seed the last node reads."""
        return [str(s) for s in self.report["reads"]]

    @property
    def after_training(self) -> dict[str, object] | None:
        """One node per variant and seed after its training (`export:`): stage, reads."""
        return self.export


def available() -> list[str]:
    return sorted(p.stem for p in PIPELINES_DIR.glob("*.yaml"))


def load(name: str) -> Declaration:
    """pipelines/<name>.yaml, or a path to a YAML file; checked before any work."""
    given = name.endswith((".yaml", ".yml"))  # a path, not a name of pipelines/
    path = Path(name) if given else PIPELINES_DIR / f"{name}.yaml"
    if not path.is_file():
        if given:
            raise ValueError(f"pipeline.file={name!r}: no such file")
        near = difflib.get_close_matches(name, available(), n=1)
        guess = f" (did you mean {near[0]!r}?)" if near else ""
        raise ValueError(f"pipeline.file={name!r} is unknown{guess}; allowed: "
                         f"{', '.join(available())}, or a path to a .yaml file")  # fmt: skip
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    allowed = [f.name for f in fields(Declaration) if f.name != "name"]
    unknown = sorted(set(raw) - set(allowed))
    missing = sorted(set(allowed) - set(raw) - OPTIONAL)
    if unknown or missing:
        key = (unknown or missing)[0]
        raise ValueError(f"{path}: key {key!r} is {'unknown' if unknown else 'missing'}; "
                         f"keys: {', '.join(allowed)}")  # fmt: skip
    decl = Declaration(name=path.stem, **raw)
    _check(decl, path)
    return decl


def _check(decl: Declaration, path: Path) -> None:
    stages = set(decl.stages)
    named = [*decl.start.values(), *decl.chain, decl.final_stage]
    reads = [*decl.chain.values(), *decl.final_reads]
    after = decl.after_training
    if after:
        named, reads = [*named, after["stage"]], [*reads, *after["reads"]]
    bad = [s for s in named if s not in stages]
    bad += [s for s in reads if s not in stages | {START}]
    if bad:
        raise ValueError(f"{path}: stage {bad[0]!r} is not in stages: {', '.join(decl.stages)}")
    seen = {START}
    for stage, source in decl.chain.items():
        if source not in seen:
            raise ValueError(f"{path}: chain.{stage} reads {source!r}, which comes later")
        seen.add(stage)


def from_scratch(decl: Declaration) -> list[str]:
    """The declared variants pretrained from scratch that get evals ((a)-(d) in the paper)."""
    return [v for v in decl.variants if facts(v).start is None and facts(v).evals]


if __name__ == "__main__":  # `python -m ssmax.pipeline.declaration paper --from-scratch`
    import sys

    print(
        ",".join(from_scratch(load(sys.argv[1])))
        if "--from-scratch" in sys.argv
        else load(sys.argv[1])
    )
