"""report.md (figures beside it) and report.html (self-contained: figures inlined as base64)."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence

from ssmax.report.plotting import FigureFile
from ssmax.report.system_table import COLUMNS as SYSTEM_COLUMNS
from ssmax.verdicts.claims import Claim
from ssmax.verdicts.design import DESIGN_COLUMNS, overlap_line
from ssmax.verdicts.results import Settings
from ssmax.verdicts.rivals import Row
from ssmax.verdicts.text import (
    BOARD_COLUMNS,
    BOARD_NOTE,
    CLAIM_COLUMNS,
    RIVALS_NOTE,
    RULE,
    board_line,
    board_rows,
    claim_rows,
    md_table,
    primary_parts,
    untested_line,
)

INTRO = (
    "Values are mean ± standard deviation over seeds. Losses past the training length and "
    "needle results use RoPE theta x50 without further training; NIAH and needle scores are "
    "after SFT. Copy gain (a diagnostic, not in the paper): loss on the first copy of random "
    "token spans minus the loss on their immediate repeat, in nats, after SFT."
)


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
    lines = [f"# ssmax-repro report ({settings.preset} preset)", "", INTRO, ""]
    said, listed, note = primary_parts(claims)
    if said:  # what the pipeline printed at its end
        lines += ["## At a glance", "", said, "", *(f"- {c}" for c in listed), "",
                  *([note, ""] if note else [])]  # fmt: skip
    lines += ["## Settings", ""]
    lines += md_table(["setting", "value"], _settings_rows(settings))
    lines += _manifest_md(settings.manifest)
    lines += ["", "## Results per variant", "", *md_table(*table)]
    if design:
        lines += ["", "## Design criteria", "", DESIGN_NOTE, "", *md_table(DESIGN_COLUMNS, design)]
    lines += ["", "## Claims of the paper", "", RULE, ""]
    overlap = overlap_line(settings.design, settings.seeds) if settings.design else ""
    lines += [overlap, ""] if overlap else []
    lines += md_table(CLAIM_COLUMNS, claim_rows(claims))
    lines += ["", untested_line(untested, settings.variants)] if untested else []
    lines += ["", RIVALS_NOTE] if any(c.family == "rivals" for c in claims) else []
    if board[0]:
        lines += ["", "## Leaderboard", "", BOARD_NOTE, "", board_line(board[1]), ""]
        lines += md_table(BOARD_COLUMNS, board_rows(board[0]))
    if against[0]:
        lines += ["", "## Against the published run", "", AGAINST_NOTE, "", against[0]]
        lines += ["", *md_table(AGAINST_COLUMNS, against[1])] if against[1] else []
    if models:
        lines += ["", "## Models", "", MODELS_NOTE, "", *md_table(MODEL_COLUMNS, list(models))]
    if settings.system:
        lines += ["", "## System (per node)", "", SYSTEM_NOTE, "",
                  *md_table(SYSTEM_COLUMNS, settings.system)]  # fmt: skip
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
    said, listed, note = primary_parts(claims)
    items = "".join(f"<li>{html.escape(c)}</li>" for c in listed)
    parts = [
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{title}</title>",
        f"<style>{STYLE}</style></head><body><h1>{title}</h1><p>{html.escape(INTRO)}</p>",
        *([f"<h2>At a glance</h2><p>{html.escape(said)}</p><ul>{items}</ul>",
           f"<p>{html.escape(note)}</p>" if note else ""] if said else []),
        "<h2>Settings</h2>", _html_table(["setting", "value"], _settings_rows(settings)),
        _manifest_html(settings.manifest),
        "<h2>Results per variant</h2>", _html_table(*table),
        *(["<h2>Design criteria</h2>", f"<p>{html.escape(DESIGN_NOTE)}</p>",
           _html_table(DESIGN_COLUMNS, list(design))] if design else []),
        "<h2>Claims of the paper</h2>", f"<p>{html.escape(RULE)}</p>",
        f"<p>{html.escape(overlap)}</p>" if overlap else "",
        _html_table(CLAIM_COLUMNS, claim_rows(claims)),
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
