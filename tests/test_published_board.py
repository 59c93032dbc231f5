"""The leaderboard of docs/results.md and its figure (report.published.board and
report.published.board_figure, issue 60 item 4): up to date against the published files, a cell
recomputed from the file by hand (scipy, numpy, nothing of the project's statistics), a law
added to a copy of a results file picked up by the table and the figure without a change of
code, and "-" where a law's run did not measure it."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ssmax.report.published.board import board_block, leaderboard
from ssmax.report.published.board_figure import (
    FIGURE,
    FIGURE_CSV,
    curves,
    digest,
    draw,
    figure,
    figure_files,
    figure_stale,
    png_source,
)
from ssmax.report.published.rivals import RIVALS
from ssmax.report.published.runs import SOURCES, Source, load_run, sources
from ssmax.verdicts.published_file import ROOT

ARMS = ROOT / "docs" / "results" / "arms-2026-11-29" / "cpu"  # its seed records, one a seed
LAWS, BASES = ("k_scale_invariant", "l_asentmax", "m_yarn_temp_inference"), ("a_softmax", "b_ssmax")
MEASURES = {"niah past 1x": 1, "needle top mean": 1, "loss @5x": -1, "loss @10x": -1,
            "loss @20x": -1}  # the better side: higher accuracy, lower loss  # fmt: skip


@pytest.fixture(scope="module")
def page() -> str:
    return board_block()


def rows(block: str) -> dict[str, list[str]]:
    """The table's rows by law letter: their cells."""
    out = {}
    for line in block.splitlines():
        if line.startswith("| (") and line.count(" | ") > 3:
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            out[cells[0][1 : cells[0].index(")")]] = cells
    return out


def by_hand(source: Path, law: str, base: str, measure: str) -> tuple[float, float, float]:
    """law against base on a measure, from the file itself (or a registered run's folder, one
    file a seed): mean and 95% t-interval of the paired differences, positive on the law's
    better side."""
    files = sorted(source.glob("seed*.json")) if source.is_dir() else [source]
    pairs = [(v[law][measure], v[base][measure])
             for v in (json.loads(f.read_text())["results"] for f in files)]  # fmt: skip
    d = np.array(
        [MEASURES[measure] * (x[s] - y[s]) for x, y in pairs for s in sorted(set(x) & set(y))]
    )
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return d.mean(), d.mean() - half, d.mean() + half


def family_adjusted(file: Path) -> dict[tuple[str, str, str], tuple[float, float]]:
    """The rival laws' leaderboard family by hand: every law against (a) and (b) on every
    measure, the paired t-test's and the exact sign-flip test's p, Benjamini-Hochberg."""
    values = json.loads(file.read_text())["results"]
    keys, p_t, p_perm = [], [], []
    for law, measure, base in itertools.product(LAWS, MEASURES, BASES):
        x, y = values[law][measure], values[base][measure]
        d = np.array([x[s] - y[s] for s in sorted(set(x) & set(y))])
        flips = np.array(list(itertools.product((1, -1), repeat=len(d))))
        keys.append((law, measure, base))
        p_t.append(stats.ttest_1samp(d, 0.0).pvalue)
        p_perm.append(np.mean(np.abs(flips @ d) >= abs(d.sum()) - 1e-12))
    adj = [stats.false_discovery_control(p, method="bh") for p in (p_t, p_perm)]
    return {k: (adj[0][i], adj[1][i]) for i, k in enumerate(keys)}


def test_the_figure_is_what_the_files_give() -> None:
    """The committed numbers of the figure are what the files give now, and the PNG was drawn
    from them (their digest in its metadata); else `make results-page`."""
    numbers, _ = figure_files()
    assert FIGURE_CSV.read_text() == numbers
    assert png_source(FIGURE) == digest(numbers)
    assert not figure_stale(numbers)
    assert figure_stale(numbers.replace("0.", "0.9", 1))


def test_a_cell_recomputes_from_the_file(page: str) -> None:
    """(m) against (b) at 20x, (l) against (a) on NIAH past N and at 20x, from the rival laws'
    file (the first run that holds them): effect and interval from the file by hand, and the
    mark from the family's p-values corrected by hand (decided where both are below 0.05)."""
    table = rows(page)
    columns = ["law", "where", "niah past 1x", "needle top mean", "loss @5x", "loss @10x",
               "loss @20x"]  # fmt: skip
    adjusted = family_adjusted(RIVALS)
    for letter, law, base, measure, shown in [
        ("m", "m_yarn_temp_inference", "b_ssmax", "loss @20x", "▲"),
        ("l", "l_asentmax", "a_softmax", "niah past 1x", "○"),
        ("l", "l_asentmax", "a_softmax", "loss @20x", "▼"),
    ]:
        mean, lo, hi = by_hand(RIVALS, law, base, measure)
        cell = table[letter][columns.index(measure)].split("<br>")[BASES.index(base)]
        assert cell == f"{base[0]}: {mean:+.2f} [{lo:+.2f}, {hi:+.2f}] {shown}"
        p_t, p_perm = adjusted[law, measure, base]
        decided = p_t < 0.05 and p_perm < 0.05
        assert decided == (shown != "○"), (law, measure, base, p_t, p_perm)
    assert "m = 30; permutation floor 11 seeds" in page  # 3 laws x 5 measures x 2 bases


def test_every_law_of_the_files_has_a_row_and_a_line(page: str) -> None:
    """(a)-(f) from the confirmatory run's 24 registered seeds (the first run that holds them),
    (k), (k2), (l2), (m2), (m3), (n)-(r) from the arms run's 24 (registered too, complete on
    2026-11-30), (l) and (m) from the rival laws' file; (b) against (a) is the primary claims'
    ordering (as the README's confirmatory lines say it), and (a)'s row reads it from its other
    side. An arms cell's effect and interval recompute from its seed records."""
    table = rows(page)
    arms = ["k", "k2", "l2", "m2", "m3", "n", "o", "p", "q", "r"]
    assert list(table) == ["a", "b", "c", "d", "e", "f", "k", "k2", "l", "l2", "m", "m2", "m3",
                           "n", "o", "p", "q", "r"]  # fmt: skip
    for letter in "abcdef":
        assert table[letter][1] == ("seeds 13-36 (24)<br>docs/results/confirmatory-2026-11-29/"
                                    "cpu/<br>AMD EPYC")  # fmt: skip
        assert table[letter][5] != "-"
    for letter in "lm":
        assert table[letter][5] != "-" and "rival_laws_seeds3-12.json" in table[letter][1]
    for letter in arms:
        assert table[letter][1].startswith("seeds 13-36 (24)<br>docs/results/arms-2026-11-29/cpu/")
    mean, lo, hi = by_hand(ARMS, "k_scale_invariant", "a_softmax", "niah past 1x")
    assert table["k"][2].startswith(f"a: {mean:+.2f} [{lo:+.2f}, {hi:+.2f}] ▲<br>b: ")
    mean, lo, hi = by_hand(ARMS, "q_sink", "b_ssmax", "loss @5x")
    assert table["q"][4].endswith(f"<br>b: {mean:+.2f} [{lo:+.2f}, {hi:+.2f}] ▼")
    assert table["b"][2].startswith("a: +0.20 [+0.13, +0.28] ▲<br>b: *0.59 [")
    assert table["a"][2].endswith("<br>b: -0.20 [-0.28, -0.13] ▼")
    readme = (ROOT / "README.md").read_text()
    assert "a < b on niah by +0.2042 [+0.125, +0.283] (n=24), holds" in readme
    assert (
        "registered before its seeds ran (docs/registration/confirmatory-2026-11-29.md; "
        "whether it matches its registration: docs/confirmatory.md); preset tiny." in page
    )
    assert "- the registered run cpu of arms-2026-11-29: docs/results/arms-2026-11-29/cpu/" in page
    assert "- not in yet: the registered run gpu of arms-2026-11-29, tabled once" in page
    found = curves([r for r in (load_run(s) for s in sources()) if r])
    assert [c.variant.split("_")[0] for c in found] == list("abcdefkkllmmmnopqr")


def registered(tmp_path: Path, seeds: list[int]) -> Source:
    """The rival laws' file as a registered run of its own (a registration with a leaderboard
    family of (k), (l), (m), in tmp_path/registration/): each of the given seeds' values as a
    seed record, seeds 3-7 on one machine and 8-12 on another."""
    content = json.loads(RIVALS.read_text())
    reg = {"code_commit": content["run"]["commit"], "preset": "tiny", "pipeline": "rival_laws",
           "variants": list(content["results"]), "seeds": list(range(3, 13)),
           "runs": {"cpu": {"seeds": list(range(3, 13))}},
           "rule": {"families": {"leaderboard": {"laws": ["k", "l", "m"],
                                                 "measures": ["niah"]}}}}  # fmt: skip
    path = tmp_path / "registration" / "laws-2026-01-01.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(reg))
    records = tmp_path / "results" / "laws-2026-01-01" / "cpu"
    records.mkdir(parents=True)
    for seed in seeds:
        values = {v: {m: {str(seed): by[str(seed)]} for m, by in ms.items()}
                  for v, ms in content["results"].items()}  # fmt: skip
        run = {**content["run"], "seeds": [seed], "cpu": "AMD EPYC" if seed < 8 else "Intel Xeon"}
        nodes = {"pretrain/a_softmax": {"git_commit": reg["code_commit"]}}
        record = {"run": run, "results": values, "seed": seed, "nodes": nodes}
        (records / f"seed{seed}.json").write_text(json.dumps(record))
    (found,) = [s for s in sources([], tmp_path, path.parent) if s.registered[1] == "cpu"]
    return found


def test_a_registered_run_is_tabled_once_every_seed_is_in_as_its_file_would_be(
    tmp_path: Path,
) -> None:
    """A registered run with a seed still to record is said, not tabled (no look before its
    last seed); complete, its cells are those of the same values as one published file, decided
    in its registered leaderboard family; its runs line names its registration, machines by
    seed, and the page that says whether it matches its registration."""
    partial = registered(tmp_path / "partial", list(range(3, 12)))
    assert load_run(partial) is None
    assert board_block([partial]) == "Not in yet: no published run."
    assert leaderboard([partial]).missing == [partial]
    source = registered(tmp_path / "whole", list(range(3, 13)))
    block = board_block([source])
    as_file = rows(board_block([Source("the rival laws' run", (RIVALS,))]))
    assert {x: [c for i, c in enumerate(r) if i != 1] for x, r in rows(block).items()} == {
        x: [c for i, c in enumerate(r) if i != 1] for x, r in as_file.items()
    }  # the cells; the second column says where they come from
    assert list(rows(block)) == ["a", "b", "k", "l", "m"]
    assert rows(block)["m"][1] == ("seeds 3-12 (10)<br>" + str(source.files[0]) + "/<br>"
                                   "AMD EPYC (3-7), Intel Xeon (8-12)")  # fmt: skip
    assert "(k), (l), (m): leaderboard (Benjamini-Hochberg, m = 30" in block
    assert ", registered before its seeds ran (" in block
    assert "; whether it matches its registration: " in block  # its page: the judge's


def test_a_law_added_to_a_results_file_appears_without_a_change_of_code(tmp_path: Path) -> None:
    """A copy of the rival laws' file that gains a law (i), with no loss at 10x: its row and
    its figure line appear, its 10x cell is "-", its family grows, its figure numbers are the
    file's."""
    content = json.loads(RIVALS.read_text())
    law = {m: {s: v - 0.01 * int(s) for s, v in by.items()}
           for m, by in content["results"]["m_yarn_temp_inference"].items()
           if m != "loss @10x"}  # fmt: skip
    content["results"]["i_llama4_temp"] = law
    copy = tmp_path / "rival_laws_plus_one.json"
    copy.write_text(json.dumps(content))
    runs = [Source("a run with one law more", (copy,))]
    block = board_block(runs)
    table = rows(block)
    assert list(table) == ["a", "b", "i", "k", "l", "m"]
    assert table["i"][0] == "(i) Llama 4 temperature" and table["i"][5] == "-"
    assert table["i"][6] != "-" and table["m"][5] != "-"
    # 4 laws x 5 measures x 2 bases, less (i)'s two at 10x
    assert "(i), (k), (l), (m): leaderboard (Benjamini-Hochberg, m = 38" in block
    mean, lo, hi = by_hand(copy, "i_llama4_temp", "a_softmax", "loss @5x")
    assert table["i"][4].startswith(f"a: {mean:+.2f} [{lo:+.2f}, {hi:+.2f}] ")
    found = {c.variant: c for c in curves([load_run(s) for s in runs])}
    assert set(found) == {"a_softmax", "b_ssmax", "i_llama4_temp", *LAWS}
    at20 = found["i_llama4_temp"].intervals[found["i_llama4_temp"].multiples.index("20")]
    assert at20.mean == pytest.approx(np.mean(list(law["niah @20x"].values())))
    assert at20.n == 10


def test_the_png_is_drawn_from_its_numbers(tmp_path: Path) -> None:
    """The PNG's metadata holds its numbers' digest and nothing that changes between draws (no
    date, no version): drawn twice, the same bytes; other numbers, a stale figure."""
    numbers, found = figure_files(SOURCES[1:])
    png, table = tmp_path / "f.png", tmp_path / "f.csv"
    png.write_bytes(draw(found, numbers))
    table.write_text(numbers)
    assert draw(found, numbers) == png.read_bytes()
    assert not figure_stale(numbers, png, table)
    assert figure_stale(numbers + "x\n", png, table)
    table.write_text(numbers + "x\n")
    assert figure_stale(numbers + "x\n", png, table)  # the PNG's digest is the old numbers'


def test_every_label_of_the_legend_is_inside_the_figure() -> None:
    """Every law the runs give (18 on 2026-11-30, with the longest labels of the project): the
    legend's box, as drawn, lies inside the figure's (three columns of them ran past both edges
    of the committed PNG)."""
    _, found = figure_files()
    fig = figure(found)
    fig.draw_without_rendering()
    (legend,) = fig.legends
    box, page = legend.get_window_extent(), fig.bbox
    assert len(legend.get_texts()) == len(found) >= 12
    assert page.x0 <= box.x0 and box.x1 <= page.x1, (box, page)
    assert page.y0 <= box.y0 and box.y1 <= page.y1, (box, page)


def test_a_new_results_file_is_a_run_of_its_own(tmp_path: Path) -> None:
    """Beside the declared runs, every published file of docs/results/ is read as a run: not a
    file the declared runs name, not one of design seeds only, not another shape of file."""
    content = json.loads(RIVALS.read_text())
    (tmp_path / "new_laws_seeds3-12.json").write_text(json.dumps(content))
    design = {**content, "run": {**content["run"], "seeds": [0, 1, 2]}}
    (tmp_path / "new_laws_design.json").write_text(json.dumps(design))
    (tmp_path / "replication.json").write_text(json.dumps({"what": "x", "results": {}}))
    (tmp_path / "broken.json").write_text("{")
    found = sources([], tmp_path, registrations=None)
    assert [(s.name, s.files) for s in found] == [
        ("new_laws_seeds3-12", (tmp_path / "new_laws_seeds3-12.json",))
    ]
    declared = [Source("declared", (tmp_path / "new_laws_seeds3-12.json",))]
    assert sources(declared, tmp_path, registrations=None) == declared
    registered = [
        f"the registered run {run} of {name}"
        for name in ("confirmatory-2026-11-29", "arms-2026-11-29", "length-laws-2026-11-30")
        for run in ("cpu", "gpu")
    ]  # the paper's claims first
    assert [s.name for s in sources()] == [*registered, *(s.name for s in SOURCES)]  # today


def test_the_check_names_a_stale_figure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m ssmax.report.published --check` fails on a figure not drawn from its numbers,
    naming it; without --check it draws it (nothing written here: the writers are stubbed)."""
    import ssmax.report.published.__main__ as published

    def current(pub: object) -> dict[str, str]:  # the pages' blocks as they stand
        out = {}
        for name, page in published.PAGES.items():
            text = (ROOT / page).read_text()
            start = text.index("\n", text.index(f"<!-- published:{name} ")) + 1
            out[name] = text[start : text.index(f"<!-- /published:{name} -->")].rstrip("\n")
        return out

    writes: list = []
    monkeypatch.setattr(published, "blocks", current)
    monkeypatch.setattr(published, "figure_stale", lambda numbers: True)
    for writer in ("atomic_write_text", "atomic_write_bytes", "atomic_write_json"):
        monkeypatch.setattr(published, writer, lambda path, *a, **k: writes.append(path))
    assert published.main(["--check"]) == 1 and not writes
    assert "stale against" in capsys.readouterr().out.split("docs/figures/leaderboard_niah.png")[0]
    assert published.main([]) == 0
    assert capsys.readouterr().out == "rewrote: docs/figures/leaderboard_niah.png\n"
