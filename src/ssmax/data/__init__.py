"""Data: corpora, tokenizers, packed LM sequences and SQuAD-2.0-format SFT examples.

Every batch is a dict with ``input_ids`` and ``labels`` (LongTensor [B, T]); ``labels[b, t]`` is
the target for position t (already shifted) and -100 where no loss is taken.

Modules (one concern each; import them directly, this package imports nothing heavy):
    corpus     load_documents(data_cfg, split): embedded corpus / SlimPajama, train|validation|test
    tokenizer  load_tokenizer(data_cfg): byte-level BPE trained on the corpus, or GPT-2 (tiktoken)
    packing    pack / PackedDataset / PackedStream / EpochShuffleSampler
    lm         packed rows, test_sequences, test_texts, test_token_stream (no Lightning)
    squad      load_squad(data_cfg, split): SQuAD 2.0 (hub or local files), the paper's filter
    squad_gen  generate_squad(data_cfg): SQuAD-format fact-retrieval set from the corpus
    sft        prompt_ids (shared with the needle test), encode_example, SFTDataset (no Lightning)
    module     LMDataModule: pretraining's Lightning datamodule over lm (imports no SFT code)
    sft_module SFTDataModule: SFT's, over sft
    hub        require_hub (fast fail), DataUnavailableError
"""
