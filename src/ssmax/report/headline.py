"""The README's results, one line per primary claim (issue 58 item 7), generated from the
published files: each claim's orderings with their effect and 95% t-interval on the CPU seeds
3-12, the verdict there under the registered rule, the H100's effect where it ran the chains, and
whether the line is exploratory or confirmatory. A block of report.published (`make
results-page`): the README says no more than these files show."""

from __future__ import annotations

from ssmax.verdicts.claims import PRIMARY, Checked, Claim, claims
from ssmax.verdicts.published_file import Published
from ssmax.verdicts.results import Results, Settings, Table
from ssmax.verdicts.text import SHORT


def _effect(k: Checked) -> str:
    return f"{k.ordering.replace(' on ', ' in ')} by {k.difference}"


def line(cpu: Claim, gpu: dict[str, Checked], seeds: str) -> str:
    """One claim: its orderings' effects on the CPU seeds, its verdict, the H100's effects."""
    effects = "; ".join(_effect(k) for k in cpu.checks if k.differences)
    missing = [k.ordering for k in cpu.checks if not k.differences]
    gone = f" ({', '.join(missing)}: not in the files)" if missing else ""
    ran = [gpu[k.ordering] for k in cpu.checks if k.ordering in gpu]
    on_gpu = [f"{k.ordering.split(' on ')[1]} {k.difference}" for k in ran if k.differences]
    h100 = f"; on an H100 (bf16, seeds 3-10): {', '.join(on_gpu)}" if on_gpu else ""
    return (f"- {SHORT[cpu.key]}: **{cpu.shown}** on {seeds}, exploratory. High - low: "
            f"{effects}{gone}{h100}.")  # fmt: skip


def headline(both: Published, gpu: Table) -> str:
    """The block: a line per primary claim, CPU seeds of `both`, the H100's table `gpu`."""
    seeds = both.run["seeds"]
    where = f"{len(seeds)} CPU seeds ({seeds[0]}-{seeds[-1]})"
    gpu_seeds = sorted({s for ms in gpu.values() for by in ms.values() for s in by})
    settings = Settings(both.run["preset"], gpu_seeds, both.run["train_len"])
    on_gpu = {k.ordering: k for c in claims(Results(settings, {}, table=gpu)) for k in c.checks}
    by_key = {c.key: c for c in claims(both.results())}
    return "\n".join(line(by_key[key], on_gpu, where) for key in PRIMARY)
