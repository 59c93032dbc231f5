"""A pipeline run's progress on each finished node's line (ssmax.pipeline.progress): nodes ended
of those it runs, and the time left at the run's own pace in FLOPs."""

from __future__ import annotations

import time

from ssmax.pipeline.progress import Progress


def test_the_time_left_is_the_pace_so_far_over_the_flops_left() -> None:
    progress = Progress(
        {"pretrain": 3e9, "eval": 1e9, "report": 0.0}, start=time.perf_counter() - 6
    )
    assert progress.after({}) == "0/3"  # nothing done: no pace yet
    said = progress.after({"pretrain": "done", "cached/elsewhere": "cached"})  # not its node
    assert said.startswith("1/3, ~2") and said.endswith(" s left"), said  # 6 s x 1e9 / 3e9
    assert progress.after({"pretrain": "done", "eval": "done"}) == "2/3"  # none left: no estimate
    assert progress.after({"report": "done"}) == "3/3"


def test_a_node_that_will_not_run_is_neither_done_nor_left() -> None:
    """A failed node's dependants are blocked: their FLOPs will not run, so they are not
    time left, and no FLOPs of theirs make the pace look faster than it is."""
    flops = {"pretrain/a": 4e9, "eval/a": 1e9, "pretrain/b": 4e9, "eval/b": 1e9}
    progress = Progress(flops, start=time.perf_counter() - 8)
    said = progress.after({"pretrain/a": "done"})
    assert said.startswith("1/4, ~1") and said.endswith(" s left"), said  # 8 s x 6e9 / 4e9 = 12
    said = progress.after({"pretrain/b": "failed", "eval/b": "blocked"})
    assert said.startswith("3/4, ~2") and said.endswith(" s left"), said  # 8 s x 1e9 / 4e9 = 2
    assert progress.after({"eval/a": "done"}) == "4/4"


def test_nodes_without_a_declared_cost_are_counted_not_timed() -> None:
    progress = Progress({"a": 0.0, "b": 0.0})
    assert progress.after({"a": "done"}) == "1/2"
