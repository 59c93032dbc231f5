"""The families a registration names, judged by the code's rule, and whether the orderings the
code forms are the registered ones (the judge runs today's code, not the registered commit's).

- primary, secondary (the confirmatory registration): the paper's claims (verdicts.claims).
- rivals (Holm; the arms'): the rivals' and arms' claims (verdicts.rivals.rival_claims) for the
  registered variants; its orderings are listed in the registration.
- leaderboard (Benjamini-Hochberg; the arms'): every registered law against (a) and (b) on
  each registered measure (verdicts.rivals.board), one claim-like record of 100 orderings.
"""

from __future__ import annotations

from collections import Counter

from ssmax.verdicts.claims import Claim, claims
from ssmax.verdicts.published_file import counts
from ssmax.verdicts.registered import Registration, is_paper, names
from ssmax.verdicts.results import Results
from ssmax.verdicts.rivals import BASES, better, board, board_rows_of, rival_claims
from ssmax.verdicts.text import (
    BOARD_COLUMNS,
    BOARD_NOTE,
    BOARD_VERDICTS,
    RIVALS_NOTE,
    board_line,
    board_rows,
    family_text,
    md_table,
    ordering_text,
)


def laws(reg: Registration) -> list[str]:
    return list(reg.data["rule"]["families"]["leaderboard"]["laws"])


def judge(reg: Registration, results: Results, flips: bool = True) -> list[Claim]:
    """Every registered family's claims, each family corrected on its own by the rule; the
    leaderboard as one record whose checks are its orderings. flips=False: no leave-one-out
    (multiplicity.rule), for verdicts shown as counts only."""
    families, out = names(reg), []
    if is_paper(reg):
        out += claims(results, flips)
    if "rivals" in families:
        out += rival_claims(results, reg.variants, flips)
    if "leaderboard" in families:
        out.append(board(results, laws(reg), flips)[1])
    return out


def registered(reg: Registration, family: str) -> list[str] | None:
    """A family's registered orderings (None: said in words only, as secondary)."""
    if family == "leaderboard":
        spec = reg.data["rule"]["families"]["leaderboard"]
        return [better(m, law, base).label() for law in spec["laws"] for m in spec["measures"]
                for base in BASES]  # fmt: skip
    return list(reg.orderings(family)) or None


def differs(reg: Registration, checked: list[Claim]) -> list[str]:
    """Each family whose orderings, as the code forms them, are not the registered ones."""
    out = []
    for family in names(reg):
        listed = registered(reg, family)
        formed = {k.ordering for c in checked if c.family == family for k in c.checks}
        if listed is not None and formed != set(listed):
            out.append(f"the code forms the family {family} of {len(formed)} orderings, not "
                       f"the {len(set(listed))} registered")  # fmt: skip
    return out


def summary(checked: list[Claim]) -> str:
    """'rivals: 13 claims, 2 hold, ...; leaderboard: 100 orderings, 3 better, ...'."""
    parts = []
    for family in dict.fromkeys(c.family for c in checked):
        of = [c for c in checked if c.family == family]
        if family == "leaderboard":
            told = Counter(BOARD_VERDICTS.get(k.verdict, "not separated").lower()
                           for c in of for k in c.checks)  # fmt: skip
            said = ", ".join(f"{told[w]} {w}" for w in ("better", "worse", "not separated", "n/a")
                             if told[w] or w != "n/a")  # fmt: skip
            parts.append(f"{family}: {sum(told.values())} orderings, {said}")
        else:
            parts.append(f"{family}: {len(of)} claims, {counts([c.verdict for c in of])}")
    return "; ".join(parts)


def tables(reg: Registration, checked: list[Claim], results: Results) -> list[str]:
    """The rivals' claims table and the leaderboard's, as the report prints them."""
    out = []
    rivals = [c for c in checked if c.family == "rivals"]
    if rivals:
        rows = [[c.text, family_text(c), f"**{c.verdict}**",
                 " · ".join(ordering_text(k) for k in c.checks) or c.value]
                for c in rivals]  # fmt: skip
        out += ["", f"Family rivals: {RIVALS_NOTE}", "",
                *md_table(["claim (paper)", "family", "verdict", "orderings"], rows)]  # fmt: skip
    for family in (c for c in checked if c.family == "leaderboard"):
        rows = board_rows(board_rows_of(results, laws(reg), family))
        out += ["", f"Family leaderboard: {BOARD_NOTE}", "", board_line(family), "",
                *md_table(BOARD_COLUMNS, rows)]  # fmt: skip
    return out
