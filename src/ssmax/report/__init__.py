"""The pages made from results: the report a pipeline's report node writes (Figs. 1-8, the
per-variant results, the paper's claims and their verdicts; ``ssmax.report.build.build_report``,
and ``python -m ssmax.report`` rebuilds it from a finished pipeline's output folder and MLflow
store; the MLflow UI: ``python -m ssmax.tracking.ui``), and the published pages
(``python -m ssmax.report.published``, ``make results-page``: docs/results.md's and the
README's generated blocks, the leaderboard and its figure). The verdicts themselves are decided
in ssmax.verdicts.
"""
