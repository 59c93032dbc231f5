"""A pipeline run's progress on each finished node's line (ssmax.pipeline.progress): nodes ended
of those it runs, and the time left at the run's own pace in FLOPs."""

from __future__ import annotations

import time

from ssmax.pipeline.progress import Progress


def test_the_time_left_is_the_pace_so_far_over_the_flops_left() -> None:
    progress = Progress(
        {"pretrain": 3e9, "eval": 1e9, "report": 0.0}, start=time.perf_counter() - 6
    )
    assert progress.after([]) == "0/3"  # nothing done: no pace yet
    said = progress.after(["pretrain", "cached/elsewhere"])  # a node it does not run: not counted
    assert said.startswith("1/3, ~2") and said.endswith(" s left"), said  # 6 s x 1e9 / 3e9
    assert progress.after(["pretrain", "eval"]) == "2/3"  # every FLOP done: no estimate
    assert progress.after(["report"]) == "3/3"


def test_nodes_without_a_declared_cost_are_counted_not_timed() -> None:
    progress = Progress({"a": 0.0, "b": 0.0})
    assert progress.after(["a"]) == "1/2"
