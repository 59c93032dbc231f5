"""The reproduction's report: Figs. 1-8, the per-variant results, the paper's claims.

``build_report`` is what the pipeline's report node runs; ``python -m ssmax.report`` rebuilds
the report from a finished pipeline's output folder and MLflow store (the MLflow UI:
``python -m ssmax.tracking.ui``).
"""

from ssmax.report.build import build_report, settings_from_cfg

__all__ = ["build_report", "settings_from_cfg"]
