"""What the reported stages declare to the report: each one's cells of the results table and
its figures (StageSpec.columns, .figures). The report sits a floor below the stages, so it
names none of them: ssmax.stages.report gathers their declarations and hands them here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# one node's outputs -> its cells: column name -> value (None: no cell), in the table's order
Cells = Callable[[Any], dict[str, float | None]]


@dataclass(frozen=True)
class Declared:
    # reported name (StageSpec.reported_as) -> its cells; the names in the table's order
    columns: dict[str, Cells]
    # the figures the stages' outputs feed: `module.function` of ssmax.report
    figures: tuple[str, ...] = ()
