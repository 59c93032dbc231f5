"""Rebuild data/embedded/austen.jsonl.xz from the Debian package r-cran-janeaustenr.

The six novels sit in the package's R lazy-load database (data/Rdata.rdx + Rdata.rdb): the
index is a gzip'd R serialization, each object a zlib'd one. A minimal reader of R's XDR
serialization format is enough for the character vectors they hold, so R is not needed.

    python scripts/build_corpus.py            # apt-get download + dpkg -x into a temp dir
    python scripts/build_corpus.py --deb-root /tmp/deb/x   # an already extracted package

Output: one JSON line per chapter, {"text", "book", "chapter"}, xz-compressed with fixed
settings so the file (and its sha256) is the same on every run.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import lzma
import re
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path
from typing import Any

PACKAGE = "r-cran-janeaustenr"
DATA_DIR = "usr/lib/R/site-library/janeaustenr/data"
OUT = Path(__file__).resolve().parents[1] / "data" / "embedded" / "austen.jsonl.xz"
# Object name in the package -> title; the order fixes the order of the output file.
BOOKS = {
    "sensesensibility": "Sense & Sensibility",
    "prideprejudice": "Pride & Prejudice",
    "mansfieldpark": "Mansfield Park",
    "emma": "Emma",
    "northangerabbey": "Northanger Abbey",
    "persuasion": "Persuasion",
}
CHAPTER = re.compile(r"^\s*chapter\s+([0-9ivxlc]+)\b", re.IGNORECASE)
VOLUME = re.compile(r"^\s*volume\s+[ivxlc0-9]+\s*$", re.IGNORECASE)


class RReader:
    """Just enough of R's XDR serialization (format 2/3) for vectors, lists and pairlists."""

    def __init__(self, data: bytes) -> None:
        self.buf = io.BytesIO(data)
        self.refs: list[Any] = []
        if self.buf.read(2) != b"X\n":
            raise ValueError("not an XDR R serialization")
        version = self.int()
        self.int(), self.int()  # writer and minimal reader R versions
        if version == 3:
            self.buf.read(self.int())  # native encoding name

    def int(self) -> int:
        return struct.unpack(">i", self.buf.read(4))[0]

    def item(self) -> Any:
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind in (254, 242, 241, 253, 250):  # NULL and the special environments
            return None
        if kind == 255:  # reference to an earlier symbol
            idx = flags >> 8 or self.int()
            return self.refs[idx - 1]
        if kind == 1:  # symbol: a CHARSXP, remembered for later references
            sym = self.item()
            self.refs.append(sym)
            return sym
        if kind == 2:  # pairlist: returned as a dict tag -> value
            out: dict[str, Any] = {}
            while kind == 2:
                if has_attr:
                    self.item()
                tag = self.item() if has_tag else str(len(out))
                out[tag] = self.item()
                flags = self.int()
                kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
            return out  # the list ended with a NULL (already read)
        if kind == 9:  # CHARSXP
            n = self.int()
            return None if n == -1 else self.buf.read(n).decode("utf-8")
        n = self.int()
        if kind in (16, 19):  # character vector, generic list
            value: Any = [self.item() for _ in range(n)]
        elif kind in (10, 13):  # logical, integer
            value = list(struct.unpack(f">{n}i", self.buf.read(4 * n)))
        elif kind == 14:  # double
            value = list(struct.unpack(f">{n}d", self.buf.read(8 * n)))
        else:
            raise ValueError(f"unsupported R SEXP type {kind}")
        if has_attr:
            attrs = self.item()
            if "names" in attrs:
                value = dict(zip(attrs["names"], value, strict=True))
        return value


def read_lazyload(data_dir: Path) -> dict[str, list[str]]:
    index = RReader(gzip.decompress((data_dir / "Rdata.rdx").read_bytes())).item()
    rdb = (data_dir / "Rdata.rdb").read_bytes()
    out = {}
    for name, (offset, length) in index["variables"].items():
        blob = rdb[offset : offset + length]
        # 4-byte big-endian uncompressed size, then a zlib stream
        out[name] = RReader(zlib.decompress(blob[4:])).item()
    return out


def chapters(lines: list[str]) -> list[tuple[int, str]]:
    """Split a novel into chapters; wrapped lines are joined into one-line paragraphs."""
    result: list[tuple[int, list[str]]] = []
    para: list[str] = []

    def flush() -> None:
        if para and result:
            result[-1][1].append(" ".join(para))
        para.clear()

    for line in lines:
        line = (line or "").strip()
        if CHAPTER.match(line):
            flush()
            result.append((len(result) + 1, []))
        elif not line or VOLUME.match(line):
            flush()
        else:
            para.append(line)
    flush()
    # Front matter (title page) before chapter 1 is dropped on purpose.
    return [(num, "\n\n".join(paras)) for num, paras in result if paras]


def fetch_package(workdir: Path) -> Path:
    subprocess.run(["apt-get", "download", PACKAGE], cwd=workdir, check=True)
    deb = next(workdir.glob(f"{PACKAGE}_*.deb"))
    root = workdir / "root"
    subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
    print(f"fetched {deb.name}")
    return root


def build(deb_root: Path, out: Path) -> str:
    novels = read_lazyload(deb_root / DATA_DIR)
    lines = []
    for key, title in BOOKS.items():
        for num, text in chapters(novels[key]):
            row = {"text": text, "book": title, "chapter": num}
            lines.append(json.dumps(row, ensure_ascii=False))
    payload = ("\n".join(lines) + "\n").encode("utf-8")
    # FORMAT_XZ with fixed preset and check: byte-identical output on every run.
    packed = lzma.compress(payload, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=9)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(packed)
    sha = hashlib.sha256(packed).hexdigest()
    words = sum(len(json.loads(x)["text"].split()) for x in lines)
    print(f"{out}: {len(lines)} chapters, {words} words, {len(payload)} B raw, {len(packed)} B xz")
    print(f"sha256 {sha}")
    return sha


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deb-root", type=Path, help="an extracted package (skip apt-get)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if args.deb_root:
        build(args.deb_root, args.out)
        return
    with tempfile.TemporaryDirectory() as tmp:
        build(fetch_package(Path(tmp)), args.out)


if __name__ == "__main__":
    main()
