"""What a registered run has recorded: each seed's record file, the seeds it plans (a seed
that failed twice replaced by the next spare), those still to run, and what a seed's nodes'
done records say of how they ran. Shared by the cpu run (ssmax.registration.run) and the gpu
run (ssmax.registration.gpu)."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from ssmax.verdicts.registered import Registration


def nodes_of(outputs: Path, seed: int) -> dict[str, dict]:
    """node -> what its done record says of how it ran (the newest record of each node)."""
    out: dict[str, tuple[float, dict]] = {}
    for done in (outputs / "pipeline" / "nodes").glob(f"*/*/seed{seed}/*/done.json"):
        rec = json.loads(done.read_text())
        keep = {k: rec.get(k) for k in ("fingerprint", "git_commit", "cpu", "gpus",
                                        "packages_sha", "wall_s")}  # fmt: skip
        if rec.get("bundle"):  # trained in a bundle (issue 59): its size and seeds
            keep["bundle"] = rec["bundle"]
        if rec["node"] not in out or done.stat().st_mtime > out[rec["node"]][0]:
            out[rec["node"]] = (done.stat().st_mtime, keep)
    return {node: rec for node, (_, rec) in sorted(out.items())}


def report_over(outputs: Path, seeds: list[int]) -> Path | None:
    """results.json of the newest finished report node over exactly these seeds (None: no
    such node has finished)."""
    found = []
    for done in (outputs / "pipeline" / "nodes" / "report").glob("*/done.json"):
        cfg = OmegaConf.load(done.parent / "config.yaml")
        if list(cfg.pipeline.seeds) == list(seeds):
            found.append(done)
    if not found:
        return None
    return max(found, key=lambda p: p.stat().st_mtime).parent / "report" / "results.json"


def pipeline_argv(reg: Registration, seeds: list[int], outputs: Path, python: str,
                  *extra: str) -> list[str]:  # fmt: skip
    """The registered pipeline over these seeds into outputs (local executor), then extra."""
    return [python, "-m", "ssmax.pipeline", "run", f"preset={reg.preset}",
            f"pipeline.file={reg.pipeline}", f"pipeline.seeds=[{','.join(map(str, seeds))}]",
            f"pipeline.variants=[{','.join(reg.variants)}]", "executor=local", *extra,
            f"paths.output_dir={outputs}"]  # fmt: skip
