"""report.md (figures beside it) and report.html (self-contained: figures inlined as base64)."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence

from ssmax.config.variants import facts
from ssmax.report.claims import Checked, Claim
from ssmax.report.design import DESIGN_COLUMNS, overlap_line
from ssmax.report.gather import Settings
from ssmax.report.multiplicity import CORRECTION_NAMES, CORRECTIONS
from ssmax.report.plotting import FigureFile
from ssmax.report.rivals import Row
from ssmax.report.system_table import COLUMNS as SYSTEM_COLUMNS

INTRO = (
    "Values are mean ± standard deviation over seeds. Losses past the training length and "
    "needle results use RoPE theta x50 without further training; NIAH and needle scores are "
    "after SFT. Copy gain (a diagnostic, not in the paper): loss on the first copy of random "
    "token spans minus the loss on their immediate repeat, in nats, after SFT."
)
RULE = (
    "How a claim is decided (issue 42's rule, with the states and intervals registered on "
    "2026-11-29; ssmax.report.claims): "
    "each ordering the paper states is tested on the per-seed differences between the two "
    "variants, paired by seed (same seed, same data order), by two two-sided tests: the paired "
    "t-test and the exact sign-flip permutation test (all 2^n flips). Their p-values are "
    "corrected within the claim's family: primary (the abstract's headline results) by Holm, "
    "secondary (every other claim) by Benjamini-Hochberg. Both corrected p below 0.05 with the "
    "mean on the paper's side: holds; on the other side: contradicted; else, with fewer seeds "
    "than the family's permutation floor (the fewest n with 2 / 2^n <= 0.05 / m): not "
    "decidable at n seeds; else inconclusive (either undecided one says 't and permutation "
    "disagree' where only one corrected p is below 0.05); n/a where a value is missing. A "
    "claim is contradicted when any ordering is (whatever else is missing), holds when all "
    "hold, else n/a when any is, else not decidable when any is, else inconclusive. The "
    "interval beside each ordering is the 95% t-interval of the mean difference. Information "
    "beside it, not part of the verdict: the uncorrected verdict (the 95% t-interval wholly on "
    "one side of 0, the rule until issue 42); leave-one-out ('flips without seed s': the "
    "decision, holds, contradicted or undecided, changes with that seed left out of every "
    "ordering); outlying "
    "seeds (robust z of the difference beyond 3.5); seeds to decide: how many paired seeds "
    "give the t-test power 0.8 at the family's 0.05 / m if the observed effects and spreads "
    "were the truth (none: an effect of 0), beside the permutation floor, the fewest seeds "
    "with which the permutation test can reach 0.05 / m at all; and the approximate chance "
    "that an independent experiment with as many seeds repeats the uncorrected verdict (a "
    "model, nothing measured; a claim: its least sure ordering's if it holds, its surest "
    "contradicted one's if contradicted)."
)
CLAIM_COLUMNS = ["claim (paper)", "family", "ours: mean ± sd per variant",
                 "orderings: high - low, mean [95% t-interval] (seeds); "
                 "p t and permutation, raw -> corrected", "verdict",
                 "uncorrected (95% t-interval)",
                 "seeds to decide (t: power 0.8 at 0.05 / m; permutation: its floor)",
                 "independent experiment repeats the uncorrected verdict (model)"]  # fmt: skip


def _md_table(columns: list[str], body: list[list[str]]) -> list[str]:
    def cell(s: str) -> str:
        return str(s).replace("|", "\\|")

    lines = ["| " + " | ".join(map(cell, columns)) + " |", "|---" * len(columns) + "|"]
    return lines + ["| " + " | ".join(map(cell, row)) + " |" for row in body]


def _settings_rows(settings: Settings) -> list[list[str]]:
    base = {"preset": settings.preset, "seeds": str(settings.seeds)}
    base["training length N"] = str(settings.train_len)
    return [[k, v] for k, v in (base | settings.details).items()]


WARNING = "Warning: "


def _manifest_md(lines: Sequence[str]) -> list[str]:
    """The Manifest section: a bullet a line, warnings in bold."""
    if not lines:
        return []
    bullets = [f"- **Warning:** {x.removeprefix(WARNING)}" if x.startswith(WARNING) else f"- {x}"
               for x in lines]  # fmt: skip
    return ["", "## Manifest", "", *bullets]


def _manifest_html(lines: Sequence[str]) -> str:
    if not lines:
        return ""
    items = "".join(
        f"<li><b>Warning:</b> {html.escape(x.removeprefix(WARNING))}</li>"
        if x.startswith(WARNING) else f"<li>{html.escape(x)}</li>"
        for x in lines
    )  # fmt: skip
    return f"<h2>Manifest</h2><ul>{items}</ul>"


def untested_line(untested: Sequence[Claim], variants: Sequence[str]) -> str:
    """One sentence on the claims this pipeline cannot test: which variants they need."""
    if not untested:
        return ""
    ran = {facts(v).letter for v in variants}
    needed = sorted({x for c in untested for x in c.letters} - ran)
    return (f"Not tested here: {len(untested)} claim(s) of the paper need variants this "
            f"pipeline does not run ({', '.join(f'({x})' for x in needed)}); "
            "`PIPELINE=paper` runs them all.")  # fmt: skip


def seeds_text(n: float) -> str:
    """A seed count for the table: '-' when unknown (< 2 seeds), 'none' for no effect."""
    if math.isnan(n):
        return "-"
    return "none" if math.isinf(n) else str(int(n))


def rerun_text(c: Claim) -> str:
    """The model's chance for the claim's uncorrected verdict, '0.83', or '-'."""
    return "-" if math.isnan(c.rerun_keeps) else f"{c.rerun_keeps:.2f}"


def _p(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2g}"


def ordering_text(k: Checked) -> str:
    """One ordering in the claims table: its numbers, tests, verdicts and what it hangs on."""
    parts = [f"{k.ordering}: {k.difference}"]
    if not math.isnan(k.p_t):
        parts.append(f"p t {_p(k.p_t)} -> {_p(k.adj_t)}, permutation {_p(k.p_perm)} -> "
                     f"{_p(k.adj_perm)}")  # fmt: skip
    parts.append(k.shown + (f" ({k.note})" if k.note else ""))
    parts.append(f"uncorrected {k.uncorrected}")
    parts.append(f"decided by {seeds_text(k.seeds_needed)}")
    if k.flips:
        parts.append(f"flips without seed {', '.join(map(str, k.flips))}")
    if k.outliers:
        parts.append(f"outlying seed {', '.join(map(str, k.outliers))}")
    if not math.isnan(k.rerun_keeps):
        parts.append(f"repeats (model) {k.rerun_keeps:.2f}")
    return "; ".join(parts)


def family_text(c: Claim) -> str:
    """'primary (Holm, m = 13; permutation floor 10 seeds)'."""
    if not c.family:
        return "-"
    how = CORRECTION_NAMES[CORRECTIONS[c.family]]
    return f"{c.family} ({how}, m = {c.m}; permutation floor {c.floor} seeds)"


def _claim_rows(claims: list[Claim]) -> list[list[str]]:
    return [[c.text, family_text(c), c.value,
             " · ".join(ordering_text(k) for k in c.checks) or "-", c.shown.upper(),
             c.uncorrected or "-", f"{seeds_text(c.seeds_needed)} (permutation: {c.floor})",
             rerun_text(c)]
            for c in claims]  # fmt: skip


RIVALS_NOTE = (
    "Rows of the family rivals are claims of the rival laws' papers, not of the SSMax paper "
    "(docs/rival-laws.md wrote them down before any verdict seed of those laws ran): their own "
    "family, corrected by Holm, judged by the same rule."
)
BOARD_NOTE = (
    "Every law this run holds besides (a) and (b), on each headline measure: its mean and 95% "
    "t-interval over seeds, and its paired difference to (a) and to (b) (mean [95% t-interval] "
    "(seeds)), oriented so that positive is the law's better side (lower loss, higher NIAH "
    "accuracy and needle score). Each difference is an ordering of the family leaderboard, "
    "corrected by Benjamini-Hochberg and decided by the claims' rule: better or worse where "
    "both corrected p are below 0.05, else not separated, with the seeds that would decide it "
    "(t: power 0.8 at 0.05 / m)."
)
BOARD_COLUMNS = ["law", "measure", "mean [95% t-interval] (seeds)",
                 "against (a): difference; corrected p t, permutation; verdict",
                 "against (b): difference; corrected p t, permutation; verdict"]  # fmt: skip
BOARD_VERDICTS = {"holds": "BETTER", "contradicted": "WORSE", "n/a": "n/a"}


def board_cell(k: Checked) -> str:
    """A law's difference to (a) or (b) in the leaderboard, decided or the seeds it takes."""
    parts = [k.difference]
    if not math.isnan(k.p_t):  # tested (2 or more seeds)
        parts.append(f"p {_p(k.adj_t)}, {_p(k.adj_perm)}")
    verdict = BOARD_VERDICTS.get(k.verdict)
    if verdict is None:
        n = seeds_text(k.seeds_needed)
        verdict = "not separated" + (f" ({k.shown})" if k.verdict != "inconclusive" else "")
        verdict += ", " + (
            "no count of seeds decides an effect this small"
            if n == "none"
            else f"decided by {n} seeds"
        )
        verdict += f" ({k.note})" if k.note else ""
    parts.append(verdict)
    if k.flips:
        parts.append(f"flips without seed {', '.join(map(str, k.flips))}")
    return "; ".join(parts)


def board_rows(rows: Sequence[Row]) -> list[list[str]]:
    return [[f"({r.law})", r.measure, r.own, board_cell(r.against["a"]),
             board_cell(r.against["b"])] for r in rows]  # fmt: skip


def board_line(board: Claim | None) -> str:
    return f"Family: {family_text(board)}." if board else ""


DESIGN_NOTE = (
    "What this reduced preset needs for its needle claims to be informative, stated in the "
    "preset before any comparison of variants (preset.design): every variant retrieves at the "
    "training length under RoPE theta x50, and the contexts reach where retrieval fails. "
    "Where one is not met, the needle claims below have little to compare."
)
SYSTEM_NOTE = (
    "From each node's MLflow system metrics (tracking.system_metrics): peaks over "
    "its samples, the GPU's utilisation averaged over them and its GPUs."
)
AGAINST_NOTE = (
    "Each seed of this run placed against the published verdict run's seeds "
    "(docs/results/verdict_seeds3-10.json, the values docs/results.md publishes), metric by "
    "metric: inside their range, or how many of their standard deviations from their mean. "
    "Within seed noise: inside the 99% prediction interval of one more published seed, mean ± "
    "t(0.995, n - 1) sd sqrt(1 + 1/n); each value on its own, so about one in a hundred falls "
    "outside by chance. against_published.json holds the same, with the file's sha256."
)
AGAINST_COLUMNS = ["variant", "metric", "published seeds: mean ± sd [min, max]",
                   "this run, per seed: value (where)"]  # fmt: skip
MODEL_COLUMNS = ["variant", "seed", "model of", "transformers folder", "MLflow registered version"]
MODELS_NOTE = ("Load a folder with transformers.AutoModelForCausalLM.from_pretrained(folder, "
               "trust_remote_code=True); a version with mlflow.pyfunc.load_model(uri). In the "
               "MLflow UI: Models, or #/models/<name>/versions/<version>.")  # fmt: skip


def markdown(
    settings: Settings, table: tuple[list[str], list[list[str]]], claims: list[Claim],
    figures: list[FigureFile], untested: Sequence[Claim] = (), models: Sequence[list[str]] = (),
    design: Sequence[list[str]] = (), against: tuple[str, list[list[str]]] = ("", []),
    board: tuple[Sequence[Row], Claim | None] = ((), None),
) -> str:  # fmt: skip
    lines = [f"# ssmax-repro report ({settings.preset} preset)", "", INTRO, "", "## Settings", ""]
    lines += _md_table(["setting", "value"], _settings_rows(settings))
    lines += _manifest_md(settings.manifest)
    lines += ["", "## Results per variant", "", *_md_table(*table)]
    if design:
        lines += ["", "## Design criteria", "", DESIGN_NOTE, "", *_md_table(DESIGN_COLUMNS, design)]
    lines += ["", "## Claims of the paper", "", RULE, ""]
    overlap = overlap_line(settings.design, settings.seeds) if settings.design else ""
    lines += [overlap, ""] if overlap else []
    lines += _md_table(CLAIM_COLUMNS, _claim_rows(claims))
    lines += ["", untested_line(untested, settings.variants)] if untested else []
    lines += ["", RIVALS_NOTE] if any(c.family == "rivals" for c in claims) else []
    if board[0]:
        lines += ["", "## Leaderboard", "", BOARD_NOTE, "", board_line(board[1]), ""]
        lines += _md_table(BOARD_COLUMNS, board_rows(board[0]))
    if against[0]:
        lines += ["", "## Against the published run", "", AGAINST_NOTE, "", against[0]]
        lines += ["", *_md_table(AGAINST_COLUMNS, against[1])] if against[1] else []
    if models:
        lines += ["", "## Models", "", MODELS_NOTE, "", *_md_table(MODEL_COLUMNS, list(models))]
    if settings.system:
        lines += ["", "## System (per node)", "", SYSTEM_NOTE, "",
                  *_md_table(SYSTEM_COLUMNS, settings.system)]  # fmt: skip
    lines += ["", "## Figures", ""]
    for f in figures:
        lines += [f"### {f.title}", ""]
        if f.png is None:
            lines += [f"n/a: {f.missing}", ""]
            continue
        lines += [f"![{f.key}]({f.png.name})", "", f"{f.caption} Numbers: `{f.csv.name}`.", ""]
        lines += [f"- **Paper:** {f.paper}", f"- **This run:** {f.measured or '-'}", ""]
    return "\n".join(lines) + "\n"


def _html_table(columns: list[str], body: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in body
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


STYLE = """body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;
text-align:left;font-size:14px}th{background:#f0f0f0}img{max-width:100%}
figure{margin:2em 0}figcaption{color:#333;font-size:14px}"""


def to_html(
    settings: Settings, table: tuple[list[str], list[list[str]]], claims: list[Claim],
    figures: list[FigureFile], untested: Sequence[Claim] = (), models: Sequence[list[str]] = (),
    design: Sequence[list[str]] = (), against: tuple[str, list[list[str]]] = ("", []),
    board: tuple[Sequence[Row], Claim | None] = ((), None),
) -> str:  # fmt: skip
    """One file, nothing external: CSS inline, PNGs as data: URIs."""
    title = html.escape(f"ssmax-repro report ({settings.preset} preset)")
    overlap = overlap_line(settings.design, settings.seeds) if settings.design else ""
    parts = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{title}</title>",
        f"<style>{STYLE}</style></head><body><h1>{title}</h1><p>{html.escape(INTRO)}</p>",
        "<h2>Settings</h2>", _html_table(["setting", "value"], _settings_rows(settings)),
        _manifest_html(settings.manifest),
        "<h2>Results per variant</h2>", _html_table(*table),
        *(["<h2>Design criteria</h2>", f"<p>{html.escape(DESIGN_NOTE)}</p>",
           _html_table(DESIGN_COLUMNS, list(design))] if design else []),
        "<h2>Claims of the paper</h2>", f"<p>{html.escape(RULE)}</p>",
        f"<p>{html.escape(overlap)}</p>" if overlap else "",
        _html_table(CLAIM_COLUMNS, _claim_rows(claims)),
        f"<p>{html.escape(untested_line(untested, settings.variants))}</p>" if untested else "",
        f"<p>{html.escape(RIVALS_NOTE)}</p>" if any(c.family == "rivals" for c in claims) else "",
        *(["<h2>Leaderboard</h2>", f"<p>{html.escape(BOARD_NOTE)}</p>",
           f"<p>{html.escape(board_line(board[1]))}</p>",
           _html_table(BOARD_COLUMNS, board_rows(board[0]))] if board[0] else []),
        *(["<h2>Against the published run</h2>", f"<p>{html.escape(AGAINST_NOTE)}</p>",
           f"<p>{html.escape(against[0])}</p>",
           _html_table(AGAINST_COLUMNS, against[1]) if against[1] else ""]
          if against[0] else []),
        *(["<h2>Models</h2>", f"<p>{html.escape(MODELS_NOTE)}</p>",
           _html_table(MODEL_COLUMNS, list(models))] if models else []),
        *(["<h2>System (per node)</h2>", f"<p>{html.escape(SYSTEM_NOTE)}</p>",
           _html_table(SYSTEM_COLUMNS, settings.system)] if settings.system else []),
        "<h2>Figures</h2>",
    ]  # fmt: skip
    for f in figures:
        parts.append(f"<figure><h3>{html.escape(f.title)}</h3>")
        if f.png is None:
            parts.append(f"<p>n/a: {html.escape(str(f.missing))}</p></figure>")
            continue
        data = base64.b64encode(f.png.read_bytes()).decode("ascii")
        parts.append(
            f"<img alt='{f.key}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{html.escape(f.caption)} Numbers: <code>{f.csv.name}</code>."
            f"<ul><li><b>Paper:</b> {html.escape(f.paper)}</li><li><b>This run:</b> "
            f"{html.escape(f.measured or '-')}</li></ul></figcaption></figure>"
        )
    return "".join(parts) + "</body></html>\n"
