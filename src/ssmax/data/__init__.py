"""Data: corpora, tokenizers, packed LM sequences and SQuAD-2.0-format SFT examples.

Every batch is a dict with ``input_ids`` and ``labels`` (LongTensor [B, T]); ``labels[b, t]`` is
the target for position t (already shifted) and -100 where no loss is taken.
"""
