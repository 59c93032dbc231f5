"""How many sequences a split packs into, and the one line that refuses too few: what
pretraining needs before it starts (ssmax.data.lm_module, once the data is built) and before
any work (ssmax.preflight.data_sizes, from bounds on the data's size)."""

from __future__ import annotations

from ssmax.config.compose import ConfigError

SPLIT_NAMES = {"train": "training", "validation": "validation"}


def rows_line(split: str, tokens: int, seq_len: int, need: int, where: str, per: str = "",
              at_most: str = "") -> str | None:  # fmt: skip
    """The line refusing a split of ``tokens`` tokens (``at_most``: an upper bound, and why)
    that packs into fewer than ``need`` rows of seq_len + 1 (``per``: what needs them, e.g.
    "trainer.pretrain.batch_size=4 on 1 device"); None when it packs into enough."""
    rows = tokens // (seq_len + 1)
    if rows >= need:
        return None
    name = SPLIT_NAMES[split]
    has = f"{where}'s {name} split has {'at most ' if at_most else ''}{tokens:,} tokens{at_most}"
    one = f"seq_len+1 = {seq_len + 1:,}"
    fix = "lower data.seq_len" + (" or raise data.val_fraction" if split == "validation" else "")
    if rows == 0:
        return (f"data.seq_len={seq_len} leaves no {name} sequence: {has}, fewer than the "
                f"{one} one sequence takes (inputs and next-token labels); {fix}")  # fmt: skip
    return (f"data.seq_len={seq_len} leaves no {name} batch: {has}, {rows} "
            f"sequence(s) of {one} tokens, fewer than {per} (whole batches only); {fix} or the "
            "batch size")  # fmt: skip


def check_rows(split: str, tokens: int, seq_len: int, need: int, where: str, per: str = "",
               at_most: str = "") -> None:  # fmt: skip
    """Raise rows_line's ConfigError when the split packs into fewer than ``need`` rows."""
    line = rows_line(split, tokens, seq_len, need, where, per, at_most)
    if line is not None:
        raise ConfigError(line)
