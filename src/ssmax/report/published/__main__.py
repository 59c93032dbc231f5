"""The published pages' command (`make results-page`): the generated blocks of docs/results.md
and the README, and the leaderboard's figure, rewritten from the files of docs/results/
(ssmax.report.published.pages).

    python -m ssmax.report.published            # rewrite the generated blocks (make results-page)
    python -m ssmax.report.published --check    # exit 1 where a page and the file disagree
    python -m ssmax.report.published --replicate OTHER.json  # another run of some chains,
                                                # ordering by ordering (verdicts.replicate)
    python -m ssmax.report.published --extend RUN/results.json  # its seeds that the file
                                                # lacks, as the extension file (EXTENSION)
    python -m ssmax.report.published --rivals RUN/results.json  # the rival laws' verdict run
    python -m ssmax.report.published --rivals-design RUN/results.json  # ... their design seeds
"""

from __future__ import annotations

import sys
from pathlib import Path

from ssmax.files.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text
from ssmax.host.cli import Parser
from ssmax.report.published.board_figure import FIGURE, FIGURE_CSV, draw, figure_files, figure_stale
from ssmax.report.published.pages import PAGES, blocks, extension_from, replace_block, replication
from ssmax.report.published.rivals import RIVALS, RIVALS_DESIGN, rivals_file
from ssmax.verdicts.published_file import EXTENSION, PUBLISHED, ROOT, load


def main(argv: list[str] | None = None) -> int:
    """The command; a bad input file: one line on stderr naming it, exit status 2, nothing
    written (every file is read and checked before any is written)."""
    try:
        return _main(argv)
    except SystemExit as e:
        if not isinstance(e.code, str):  # argparse's own exits (--help, a bad option)
            raise
        print(f"error: {e.code}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None) -> int:
    parser = Parser("ssmax.report.published", description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", type=Path, default=PUBLISHED)
    parser.add_argument("--check", action="store_true", help="change nothing; 1 if stale")
    parser.add_argument("--replicate", type=Path, metavar="OTHER.json",
                        help="print which orderings' verdicts another run of some chains "
                        "gives again (its results.json), and change nothing")  # fmt: skip
    parser.add_argument("--extend", type=Path, metavar="RESULTS.json",
                        help=f"write {EXTENSION.relative_to(ROOT)} from a run's results.json "
                        "(its seeds that the file lacks), then rewrite the pages")  # fmt: skip
    parser.add_argument("--rivals", type=Path, metavar="RESULTS.json",
                        help=f"write {RIVALS.relative_to(ROOT)} from the rival laws' "
                        "verdict run's results.json (its seeds outside preset.design), then "
                        "rewrite the pages")  # fmt: skip
    parser.add_argument(
        "--rivals-design",
        type=Path,
        metavar="RESULTS.json",
        help=f"write {RIVALS_DESIGN.relative_to(ROOT)} from the rival laws' "
        "design run's results.json (its design seeds), then rewrite the pages",
    )
    args = parser.parse_args(argv)
    pub = load(args.file)
    writes = []  # (path, content): made, every input checked, before any is written
    if args.extend:
        writes.append((EXTENSION, extension_from(args.extend, pub)))
    for results, path, design in ((args.rivals, RIVALS, False),
                                  (args.rivals_design, RIVALS_DESIGN, True)):  # fmt: skip
        if results:
            writes.append((path, rivals_file(results, design)))
    if args.replicate:
        print(replication(pub, args.replicate))
        return 0
    for path, content in writes:
        atomic_write_json(path, content, indent=2)
        print(f"wrote {path.relative_to(ROOT)}: seeds {content['run']['seeds']}")
    made, stale = blocks(pub), []
    numbers, found = figure_files()  # the leaderboard figure's numbers, read before any write
    for page in dict.fromkeys(PAGES.values()):
        path = ROOT / page
        text = new = path.read_text()
        for name in (n for n, p in PAGES.items() if p == page):
            new = replace_block(new, name, made[name])
        if new != text:
            stale.append(page)
            if not args.check:
                atomic_write_text(path, new)
    figure = str(FIGURE.relative_to(ROOT))
    if figure_stale(numbers):  # its numbers, or the PNG not drawn from them
        stale.append(figure)
    if not args.check:
        if not FIGURE_CSV.is_file() or FIGURE_CSV.read_text() != numbers:
            atomic_write_text(FIGURE_CSV, numbers)
        png = draw(found, numbers)
        if not FIGURE.is_file() or FIGURE.read_bytes() != png:
            FIGURE.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(FIGURE, png)
            stale += [] if figure in stale else [figure]
    if args.check and stale:
        print(f"stale against {args.file}: {', '.join(stale)} (make results-page)")
        return 1
    print(("rewrote: " + ", ".join(stale)) if stale and not args.check else "up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
