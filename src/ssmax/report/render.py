"""report.md (figures beside it) and report.html (self-contained: figures inlined as base64)."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence

from ssmax.report.claims import Claim
from ssmax.report.design import DESIGN_COLUMNS, overlap_line
from ssmax.report.gather import Settings
from ssmax.report.plotting import FigureFile
from ssmax.report.system import COLUMNS as SYSTEM_COLUMNS
from ssmax.variants import facts

INTRO = (
    "Values are mean ± standard deviation over seeds. Losses past the training length and "
    "needle results use RoPE theta x50 without further training; NIAH and needle scores are "
    "after SFT. Copy gain (a diagnostic, not in the paper): loss on the first copy of random "
    "token spans minus the loss on their immediate repeat, in nats, after SFT."
)
RULE = (
    "How a claim is decided (fixed before any run): each ordering the paper states is tested on "
    "the per-seed differences between the two variants, paired by seed (same seed, same data "
    "order). Its 95% Student-t interval entirely on the paper's side of 0: holds; entirely on "
    "the other side: contradicted; containing 0, or fewer than 2 seeds: inconclusive. A claim "
    "holds when all its orderings hold and is contradicted when any one is. Seeds to decide: "
    "how many paired seeds would decide every ordering with power 0.8 if the observed effects "
    "and spreads were the truth (none: an effect of 0). Same on a rerun: the chance that the "
    "same seeds trained again with fresh training noise give the verdict again (another machine "
    "or other software moves a CPU run's low bits, and one flipped bit moves a whole run; the "
    "true effect drawn around the observed one): a bound for the claim (holds: at most its "
    "least sure ordering's; contradicted: at least its surest), below 0.95 a verdict within "
    "that noise. Both are information, not part of the verdict."
)
CLAIM_COLUMNS = ["claim (paper)", "ours: mean ± sd per variant", "paired differences: "
                 "high - low, mean [95% interval] (seeds)", "verdict",
                 "seeds to decide (power 0.8)", "same on a rerun"]  # fmt: skip


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
    """The claim's bound on its verdict's chance on a rerun: '≤ 0.62', '≥ 0.97' or '-'."""
    if math.isnan(c.rerun_keeps):
        return "-"
    return f"{'≤' if c.verdict == 'holds' else '≥'} {c.rerun_keeps:.2f}"


def _claim_rows(claims: list[Claim]) -> list[list[str]]:
    def checks(c: Claim) -> str:
        return "; ".join(
            f"{k.ordering}: {k.difference} {k.verdict} (decided by {seeds_text(k.seeds_needed)}"
            f"; same on a rerun {'-' if math.isnan(k.rerun_keeps) else f'{k.rerun_keeps:.2f}'})"
            for k in c.checks
        ) or "-"  # fmt: skip

    return [[c.text, c.value, checks(c), c.verdict.upper(), seeds_text(c.seeds_needed),
             rerun_text(c)] for c in claims]  # fmt: skip


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
MODEL_COLUMNS = ["variant", "seed", "model of", "transformers folder", "MLflow registered version"]
MODELS_NOTE = ("Load a folder with transformers.AutoModelForCausalLM.from_pretrained(folder, "
               "trust_remote_code=True); a version with mlflow.pyfunc.load_model(uri). In the "
               "MLflow UI: Models, or #/models/<name>/versions/<version>.")  # fmt: skip


def markdown(
    settings: Settings, table: tuple[list[str], list[list[str]]], claims: list[Claim],
    figures: list[FigureFile], untested: Sequence[Claim] = (), models: Sequence[list[str]] = (),
    design: Sequence[list[str]] = (),
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
    design: Sequence[list[str]] = (),
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
