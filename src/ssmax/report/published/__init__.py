"""The published pages, made from the committed results of docs/results/ (`python -m
ssmax.report.published`, `make results-page`). pages: the command and the generated blocks of
docs/results.md and the README; board and board_figure: the leaderboard and its figure; runs:
the runs the leaderboard reads; rivals: the rival laws' pages."""
