"""The rival laws' claims (docs/rival-laws.md) and the leaderboard on hand-made per-seed
values whose answer is known in advance: a claim that holds, one contradicted, one
inconclusive; the leaderboard's Benjamini-Hochberg correction changing a verdict; and a run
without a rival law (the paper pipeline) whose report does not change."""

from __future__ import annotations

import json

import pytest

from ssmax.report.render import markdown, to_html
from ssmax.verdicts.claims import claims
from ssmax.verdicts.multiplicity import UNDECIDABLE, judge
from ssmax.verdicts.results import Results, Settings
from ssmax.verdicts.rivals import board_json, leaderboard, rival_claims
from ssmax.verdicts.text import RIVALS_NOTE, board_rows, claim_rows
from tests.typed_outputs import typed

VARIANTS = {"a": "a_softmax", "b": "b_ssmax", "k": "k_scale_invariant", "l": "l_asentmax",
            "m": "m_yarn_temp_inference"}  # fmt: skip
RIVAL_RUN = list(VARIANTS.values())
PAPER_RUN = ["a_softmax", "b_ssmax"]
LONG = ("5", "10", "20")
# a seed's effect, shared by every variant of that seed (paired), and a little noise
SHIFT = (0.0, 0.4, -0.3, 0.2, -0.1, 0.3, -0.2, 0.1, 0.25)
NOISE = (0.01, -0.02, 0.015, 0.0, -0.01, 0.02, -0.015, 0.005, -0.005)
# where the rivals' papers are right: lower loss past N, higher NIAH than (b) / (a)
LOSS = {"a": 5.0, "b": 4.6, "k": 4.3, "l": 4.4, "m": 4.8}
NIAH = {"a": 0.05, "b": 0.20, "k": 0.30, "l": 0.28, "m": 0.06}
# where they are wrong: each rival on the other side of its reference
LOSS_WRONG = {"a": 5.0, "b": 4.6, "k": 4.9, "l": 4.9, "m": 5.3}
NIAH_WRONG = {"a": 0.05, "b": 0.20, "k": 0.10, "l": 0.12, "m": 0.06}


def results(loss: dict[str, list[float]], niah: dict[str, list[float]]) -> Results:
    """Node outputs of the stages' shapes: the loss at 1x and past N (each multiple the same
    value plus its offset), NIAH accuracy past 1x (a grid with the 1x row at 1) and a top
    needle score."""
    inputs = {}
    for letter, values in loss.items():
        for seed, v in enumerate(values):
            at = {"1": 3.0, **{k: v + i / 10 for i, k in enumerate(LONG)}}
            inputs[f"eval_loss/{VARIANTS[letter]}/seed{seed}"] = {"loss_at": at}
    for letter, values in niah.items():
        for seed, v in enumerate(values):
            inputs[f"eval_niah/{VARIANTS[letter]}/seed{seed}"] = {
                "context_multiples": [1, 2, 4], "accuracy_grid": [[1.0], [v + 0.01], [v - 0.01]],
                "needle_scores": {"top_mean": 0.5 + SHIFT[seed] / 10}}  # fmt: skip
    return Results.from_inputs(typed(inputs), Settings("test", list(range(len(SHIFT))), 128))


def world(verdict: str, letters: str = "abklm") -> Results:
    """9 seeds (the permutation floor of 11 orderings under Holm: 2 / 2^9 <= 0.05 / 11) where
    every rival claim holds, is contradicted, or the two alternate by seed (inconclusive)."""
    loss, niah = {}, {}
    for seed, (shift, noise) in enumerate(zip(SHIFT, NOISE, strict=True)):
        wrong = verdict == "contradicted" or (verdict == "inconclusive" and seed % 2 == 1)
        for x in letters:
            loss.setdefault(x, []).append((LOSS_WRONG if wrong else LOSS)[x] + shift + noise)
            niah.setdefault(x, []).append((NIAH_WRONG if wrong else NIAH)[x] + shift / 10 + noise)
    return results(loss, niah)


def test_the_five_claims_of_the_doc_in_their_own_family() -> None:
    checked = rival_claims(world("holds"), RIVAL_RUN)
    assert [c.key for c in checked] == ["rival_k_loss", "rival_k_niah", "rival_l_loss",
                                        "rival_l_niah", "rival_m_loss"]  # fmt: skip
    labels = {c.key: [k.ordering for k in c.checks] for c in checked}
    assert labels["rival_k_loss"] == [f"k < b on loss@{k}" for k in LONG]
    assert labels["rival_l_loss"] == [f"l < b on loss@{k}" for k in LONG]
    assert labels["rival_m_loss"] == [f"m < a on loss@{k}" for k in LONG]
    assert labels["rival_k_niah"] == ["b < k on niah"] and labels["rival_l_niah"] == [
        "b < l on niah"
    ]
    assert {(c.family, c.m, c.floor) for c in checked} == {("rivals", 11, 9)}
    assert all(c.text.startswith("Claim of ") for c in checked)  # claims of their papers
    assert "does not contradict" in checked[1].text  # at least as good
    assert all(row[1].startswith("rivals (Holm, m = 11") for row in claim_rows(checked))


@pytest.mark.parametrize("verdict", ["holds", "contradicted", "inconclusive"])
def test_each_rival_claim_by_the_rule(verdict: str) -> None:
    for c in rival_claims(world(verdict), RIVAL_RUN):
        assert (c.verdict, c.uncorrected) == (verdict, verdict), (c.key, c.checks)
        assert all(len(k.differences) == 9 for k in c.checks)
        if verdict != "inconclusive":  # 9 seeds of one sign: 2 / 512 each, x 11 under Holm
            assert all(k.p_perm == pytest.approx(2 / 512) for k in c.checks)
            assert all(k.adj_perm == pytest.approx(11 * 2 / 512) for k in c.checks)


def test_only_the_claims_whose_laws_ran() -> None:
    """A run of (a), (b) and (k): the two claims of (k), Holm over their 4 orderings."""
    checked = rival_claims(world("holds"), ["a_softmax", "b_ssmax", "k_scale_invariant"])
    assert [c.key for c in checked] == ["rival_k_loss", "rival_k_niah"]
    assert {c.m for c in checked} == {4}


def test_without_a_rival_law_nothing_changes() -> None:
    """The paper pipeline: no rival claim, no leaderboard, the same report; and the paper's
    claims, their families and verdicts, the same whether or not rival values are there."""
    res = world("holds")
    assert rival_claims(res, PAPER_RUN) == [] and leaderboard(res, PAPER_RUN) == ([], None)
    only_ab = world("holds", "ab")
    rows = lambda r: [(c.key, c.family, c.m, c.verdict, [k.adj_perm for k in c.checks])  # noqa: E731
                      for c in claims(r)]  # fmt: skip
    assert rows(res) == rows(only_ab)
    settings = Settings("test", [0], 128, variants=PAPER_RUN)
    paper = claims(only_ab)
    before = markdown(settings, (["variant"], []), paper, [])
    assert (
        markdown(settings, (["variant"], []), paper, [], board=leaderboard(res, PAPER_RUN))
        == before
    )
    assert "Leaderboard" not in before and "rivals" not in before


def test_the_leaderboard_lists_every_law_against_a_and_b() -> None:
    rows, board = leaderboard(world("holds"), RIVAL_RUN)
    measures = ["niah", "needle_top", *(f"loss@{k}" for k in LONG)]
    assert [(r.law, r.measure) for r in rows] == [(x, m) for x in "klm" for m in measures]
    assert board is not None and (board.family, board.m) == ("leaderboard", 30)
    k_loss = next(r for r in rows if (r.law, r.measure) == ("k", "loss@5"))
    # positive: the law's better side; (k) is 0.7 below (a) and 0.3 below (b) in every seed
    assert k_loss.against["a"].difference.startswith("+0.7")
    assert k_loss.against["b"].difference.startswith("+0.3")
    assert k_loss.own.startswith("4.372 [")  # 4.3 + the mean seed shift (0.072), unsigned
    cells = {(r.law, r.measure): row for r, row in zip(rows, board_rows(rows), strict=True)}
    assert cells["k", "loss@5"][3].endswith("BETTER") and cells["k", "niah"][4].endswith("BETTER")
    # (l) retrieves better than (b) and its loss is lower; no law's needle score differs
    assert cells["l", "niah"][4].endswith("BETTER") and cells["l", "loss@20"][4].endswith("BETTER")
    assert all(cells[x, "needle_top"][i].endswith("no count of seeds decides an effect this small")
               for x in "klm" for i in (3, 4))  # fmt: skip
    json.dumps(board_json(rows, board))  # leaderboard.json


def test_benjamini_hochberg_over_the_leaderboard_changes_a_verdict() -> None:
    """(k) retrieves better than (a), and than (b), in 9 of 9 seeds (permutation p 2 / 512, t
    p tiny): alone, and uncorrected, each holds; among the leaderboard's 30 orderings, all else
    without effect, Benjamini-Hochberg takes the permutation p of the two to 30 / 2 x 2 / 512 =
    0.059: not separated, the two tests disagreeing, with the seeds it would take; 9 seeds are
    below the family's permutation floor (11): not decidable at 9 seeds."""
    flat = {x: [4.6 + s + n for s, n in zip(SHIFT, NOISE, strict=True)] for x in VARIANTS}
    niah = {x: [0.2 + s / 10 + (n if x in "ab" else -n) for s, n in zip(SHIFT, NOISE, strict=True)]
            for x in VARIANTS}  # fmt: skip
    niah["k"] = [v + 0.1 + n / 5 for v, n in zip(niah["a"], NOISE, strict=True)]
    rows, board = leaderboard(results(flat, niah), RIVAL_RUN)
    k = next(r for r in rows if (r.law, r.measure) == ("k", "niah")).against["a"]
    alone = judge({"leaderboard": {k.ordering: k.differences}})["leaderboard"][k.ordering]
    assert alone.verdict == "holds" and k.uncorrected == "holds"
    assert k.p_perm == pytest.approx(2 / 512) and k.adj_perm == pytest.approx(15 * 2 / 512)
    assert k.verdict == UNDECIDABLE and k.adj_t < 0.05  # 9 seeds: the floor at 0.05 / 30 is 11
    cell = board_rows([r for r in rows if (r.law, r.measure) == ("k", "niah")])[0][3]
    assert "not separated (not decidable at 9 seeds), decided by" in cell
    assert "t and permutation disagree" in cell


def test_the_report_shows_both_where_a_rival_law_ran() -> None:
    res = world("holds")
    checked = claims(res) + rival_claims(res, RIVAL_RUN)
    settings = Settings("test", list(range(9)), 128, variants=RIVAL_RUN)
    board = leaderboard(res, RIVAL_RUN)
    md = markdown(settings, (["variant"], []), checked, [], board=board)
    page = to_html(settings, (["variant"], []), checked, [], board=board)
    assert "## Leaderboard" in md and "<h2>Leaderboard</h2>" in page
    assert RIVALS_NOTE in md and "Family: leaderboard (Benjamini-Hochberg, m = 30" in md
    assert md.count("| Claim of ") == 5 and md.count("| (k) | ") == 5
