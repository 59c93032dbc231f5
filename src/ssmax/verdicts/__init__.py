"""The verdicts: how each claim of the paper (and of the rival laws' papers) is decided on the
per-seed values of a run, under the rule registered before the verdicts (issue 42; the
registration of 2026-11-29), and the published runs they are decided on.

What a verdict is decided on: results (a run's outputs or a published table, its settings),
metrics (a claim's metric per seed), pn_fit (the learned p_n's log fit). How: claims (the
paper's claims, the rule), stats (intervals, tests, power), multiplicity (a family's
corrections, leave-one-out), rivals (the rival laws' claims, the leaderboard), design (a
reduced preset's design criteria; the seeds where a skill did not form), replicate (another
run judged on its own pairs), against (a run's seeds placed against the published ones).
The published runs as data: published_file. In words: text. The pages made from them are the
report's (ssmax.report); the registered runs judged by them, the registration's
(ssmax.registration).
"""
