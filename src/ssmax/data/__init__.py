"""Data: corpora, tokenizers, packed LM sequences and SQuAD-2.0-format SFT examples.

Every batch is a dict with ``input_ids`` and ``labels`` (LongTensor [B, T]); ``labels[b, t]`` is
the target for position t (already shifted) and -100 where no loss is taken.

Modules (one concern each; import them directly, this package imports nothing heavy):
    corpus        load_documents(data_cfg, split): embedded corpus or SlimPajama, by split
    tokenizer     load_tokenizer(data_cfg): a BPE trained on the corpus, or GPT-2's
    packing       pack / PackedDataset / EpochShuffleSampler
    stream        PackedStream: documents packed on the fly, one shard per (rank, worker)
    shards        TokenShards: pre-tokenized uint16 shards (written by prepare)
    prepare       `python -m ssmax.data.prepare`: tokenize the corpus once into shards
    lm            packed rows, test_sequences, test_texts, test_token_stream (no Lightning)
    lm_module     LMDataModule: pretraining's Lightning datamodule over lm (imports no SFT code)
    sizes         how many sequences a split packs into; the line that refuses too few
    fact_spec     FactSpec: what planted facts are, their checks, facts drawn as text
    facts         FactPlanter: planted facts written into the pretraining rows (data.facts)
    needle        the NIAH needle and its cities (the planted facts avoid them)
    squad         load_squad(data_cfg, split): SQuAD 2.0 (hub or local files), the paper's filter
    squad_gen     generate_squad(data_cfg): SQuAD-format fact-retrieval set from the corpus
    squad_schema  the SQuAD 2.0 columns both share
    sft_batches   prompt_ids (the needle test's too), encode_example, SFTDataset
    sft_module    SFTDataModule: SFT's, over sft_batches
    identity      what identifies the data a run reads (fingerprints, MLflow dataset inputs)
    hub           require_hub (fast fail), DataUnavailableError
"""
