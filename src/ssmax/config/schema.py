"""The config schema: one dataclass per config group, each field with its default and a line
saying what it is. Registered with Hydra's ConfigStore (ssmax.config.compose.store_schemas) as
the first entry of conf/config.yaml's defaults list, so every YAML and override is merged into
it: a wrong type or an unknown key fails on compose, and `rule(...)` ranges and choices are
checked right after (ssmax.config.rules.check_rules, from ssmax.preflight.settings.validate).
The YAML files hold only what differs from these defaults: a preset's scale, a model's size, a
variant's law, a data source, a SLURM profile.

The model and variant groups use the model's own dataclasses (ssmax.model: ModelConfig,
VariantConfig) with the variant's `facts:` (VariantFacts) on top. The groups of the pipeline's
entry alone (pipeline, protocol, cost) are ssmax.config.schema_pipeline's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import II, MISSING

from ssmax.model import ModelConfig, VariantConfig

OBJECTIVES = ("pretrain", "sft")
SCHEDULES = ("constant", "cosine")
TOKENIZERS = ("bpe", "gpt2")
EXECUTOR_KINDS = ("inprocess", "local", "slurm")
ACCELERATORS = ("auto", "cpu", "gpu", "cuda")
HARDWARE = ("gpu", "cpu")  # where a preset is meant to run (preset.hardware)
SDPA_FIRST = ("torch", "flash", "efficient", "math", "cudnn")  # ssmax.evals.inference.sdpa_first
PRECISIONS = ("auto", "32-true", "32", "16-mixed", "bf16-mixed", "bf16-true", "16-true", "64-true")
MAX_SEED = 2**32 - 1  # numpy's and Lightning's seeds: 0 .. 2^32 - 1


def rule(default: Any = MISSING, **rules: Any) -> Any:
    """A field with checks run after compose (ssmax.config.rules.check_rules): gt/ge/lt/le (a
    bound), choices (allowed values), auto=True ("auto" or a value within the bounds); on a list
    each item, length / min_items its size, and unique=True no item twice."""
    if isinstance(default, list | dict):
        return field(default_factory=lambda: default.copy(), metadata=rules)
    return field(default=default, metadata=rules)


def items(*values: Any) -> Any:
    """A list default (a fresh copy per instance)."""
    return field(default_factory=lambda: list(values))


@dataclass
class DesignConfig:
    """A reduced preset's design criteria, fixed before any comparison of variants and checked
    by the report (ssmax.verdicts.design); never tuned towards a verdict."""

    seeds: list[int] = rule(  # seeds the preset was designed on
        [0, 1, 2], ge=0, min_items=1, unique=True
    )
    niah_at_1x: float = rule(0.9, ge=0.0, le=1.0)  # every variant's mean NIAH at 1x, theta x50
    falls_below: float = rule(0.5, ge=0.0, le=1.0)  # the best's NIAH at the largest context


@dataclass
class PresetConfig:
    name: str = MISSING  # the preset's name (conf/preset/<name>.yaml)
    model: str = MISSING  # the model option it expects (validate: model=... must match)
    # a reduced preset's cuts (printed in the report beside this run's values)
    cuts: dict[str, str] = field(default_factory=dict)  # key -> the paper's value and section
    design: DesignConfig | None = None  # null: no design criteria (the paper's own scale)
    hardware: str = rule("gpu", choices=HARDWARE)  # where it runs: plan's cost basis (cost.*)


@dataclass
class PathsConfig:
    output_dir: str = "outputs"  # relative paths are taken from the directory you run in
    cache_dir: str = "${paths.output_dir}/cache"  # tokenizers, generated data, corpora
    run_dir: str = "${paths.output_dir}/runs/${variant.name}-${objective}-seed${seed}"  # one run


@dataclass
class ModelSchema(ModelConfig):
    vocab_size: int = rule(II("data.vocab_size"), gt=0)  # the tokenizer's vocabulary


@dataclass
class VariantFacts:
    """Read by the pipeline, report and plots (ssmax.config.variants), never by the model."""

    letter: str = MISSING  # how the claims name it (Sec. 3: a-f)
    label: str = MISSING  # its name in figures and tables
    color: str = "k"  # its matplotlib colour
    start: dict[str, str] | None = None  # null: from scratch; {variant, checkpoint}: from that
    evals: bool = True  # SFT, then the evals of Sec. 3.2-3.4
    pretrain: str = rule("full", choices=("full", "short"))  # short: protocol.pn_fraction
    curve: bool = False  # Fig. 4 shows its pretraining curve
    inherit: list[str] = items()  # stages whose result is the start variant's own, untrained here


@dataclass
class VariantSchema(VariantConfig):
    facts: VariantFacts = field(default_factory=VariantFacts)  # the pipeline's facts about it


@dataclass
class FactTemplate:
    fact: str = MISSING  # the sentence planting the fact ({key}, {value})
    question: str = MISSING  # the question asking for it ({key})


@dataclass
class FactsConfig:
    """Planted facts (ssmax.data.facts; not in the paper): retrieval at the training length."""

    fraction: float = rule(0.0, ge=0.0, le=1.0)  # share of rows with facts (validation too)
    facts_per_row: int = rule(1, gt=0)  # facts in a row of the training length (distinct keys)
    questions_per_row: int = rule(1, ge=0)  # of them asked, each after its fact, answer included
    colon_share: float = rule(0.0, ge=0.0, le=1.0)  # facts whose value follows a colon ("is: 48")
    digits: list[int] = rule([4, 8], gt=0, length=2)  # value length in digits, uniform in [lo, hi]
    templates: list[FactTemplate] = items(  # never "special", "magic", "number" (checked)
        FactTemplate("The secret code of {key} is {value}.", "What is the secret code of {key}?"),
        FactTemplate("{key} kept {value} pounds in the old desk.",
                     "How many pounds did {key} keep in the old desk?"),
        FactTemplate("The letter from {key} was marked {value}.",
                     "How was the letter from {key} marked?"),
        FactTemplate("The account of {key} at the bank came to {value}.",
                     "What did the account of {key} at the bank come to?"),
        FactTemplate("{key} wrote the figure {value} in the ledger.",
                     "Which figure did {key} write in the ledger?"),
        FactTemplate("The trunk of {key} was sent with the label {value}.",
                     "With which label was the trunk of {key} sent?"),
    )  # fmt: skip
    titles: list[str] = items(  # keys are "{title} {name}"
        "Mr.", "Mrs.", "Miss", "Captain", "Colonel", "Lady", "Sir", "Dr."
    )  # fmt: skip
    names: list[str] = items(  # ... with these names
        "Ashby", "Bertram", "Carrow", "Dunmore", "Ellison", "Fane", "Gresley", "Holloway",
        "Ingram", "Jessop", "Kendal", "Lovell", "Marsham", "Norcott", "Oakley", "Pembury",
    )  # fmt: skip
    # Facts (each with its question and answer) added to the text the corpus BPE is trained on,
    # so that it learns the planted language's numbers as GPT-2's BPE has them, in multi-digit
    # tokens (" 8106422": " 8", "10", "64", "22"), not one token a digit; 0: the corpus alone.
    in_tokenizer: int = rule(0, ge=0)  # facts in the BPE's training text (0: the corpus alone)


@dataclass
class DataConfig:
    source: str = rule("embedded", choices=("embedded", "slimpajama"))  # the pretraining text
    tokenizer: str = rule("bpe", choices=TOKENIZERS)  # bpe: trained on the corpus; gpt2: tiktoken
    vocab_size: int = rule(4096, gt=0)  # bpe: a setting; gpt2: must be 50257
    seq_len: int = rule(128, gt=0)  # training sequence length N (paper: 1024, Sec. 3)
    val_fraction: float = rule(0.02, ge=0.0, lt=1.0)  # documents held out for validation (by hash)
    test_fraction: float = rule(0.02, ge=0.0, lt=1.0)  # held out: test split (loss, haystacks)
    sft_source: str = rule("generated", choices=("generated", "squad_v2"))  # the SFT set
    sft_val_fraction: float = rule(0.05, ge=0.0, lt=1.0)  # SFT examples held out (by id hash)
    sft_num_examples: int = rule(4000, gt=0)  # generated set: before the SQuAD filter
    sft_unanswerable_fraction: float = rule(0.1, ge=0.0, le=1.0)  # generated: no answer
    sft_context_words_min: int = rule(30, gt=0)  # generated passages: words, before the facts
    sft_context_words_max: int = rule(70, gt=0)  # ... at most
    sft_seed: int = rule(0, ge=0, le=MAX_SEED)  # the generated set's seed
    sft_fact_share: float = rule(0.0, ge=0.0, le=1.0)  # generated: items in data.facts' language
    sft_colon_share: float = rule(0.0, ge=0.0, le=1.0)  # generated: numbers after a colon
    sft_prompt: str = "{context}\n\nQuestion: {question}\nAnswer:"  # then " {answer}" + EOS
    max_eval_sequences: int | None = None  # cap on validation sequences (null: the whole split)
    num_workers: int = rule(0, ge=0)  # DataLoader workers
    shards_dir: str | None = None  # pre-tokenized shards (ssmax.data.prepare); null: on the fly
    prepare_num_proc: int = rule(4, gt=0)  # prepare: processes tokenizing input files
    prepare_files_per_shard: int = rule(16, gt=0)  # prepare: input files per shard file
    cache_dir: str = II("paths.cache_dir") + "/data"  # tokenizer, generated SFT set, corpora
    slimpajama_files: Any = None  # local jsonl(.zst) files in SlimPajama's format (not the hub)
    squad_files: Any = None  # local SQuAD 2.0 json / jsonl / parquet (not the hub)
    hf_slimpajama: str = "cerebras/SlimPajama-627B"  # the hub dataset of Sec. 3.1
    hf_squad: str = "rajpurkar/squad_v2"  # the hub dataset of Sec. 3.3
    facts: FactsConfig = field(default_factory=FactsConfig)  # planted facts (0: off)


@dataclass
class OptimConfig:
    lr: float = rule(6.0e-4, gt=0)  # peak learning rate
    betas: list[float] = rule([0.9, 0.95], ge=0, lt=1, length=2)  # AdamW betas
    eps: float = rule(1.0e-8, gt=0)  # paper silent: AdamW default
    weight_decay: float = rule(0.1, ge=0)  # only on parameters of rank >= 2
    grad_clip: float = rule(1.0, gt=0)  # gradient norm clip
    schedule: str = rule("constant", choices=SCHEDULES)  # after the warmup
    min_lr_ratio: float = rule(0.0, ge=0)  # cosine only: the floor, x lr
    batch_size: int = rule(8, gt=0)  # sequences per device and micro-step
    global_batch: int = rule(8, gt=0)  # per update (= batch_size x devices x nodes x accumulation)


@dataclass
class PretrainConfig(OptimConfig):
    """App. B, Table 2."""

    warmup_steps: int = rule(1000, ge=0)  # linear warmup, in optimizer steps
    max_steps: int = rule(200000, ge=0)  # optimizer steps


@dataclass
class SFTConfig(OptimConfig):
    """App. C, Table 3."""

    lr: float = rule(2.0e-5, gt=0)  # peak learning rate
    betas: list[float] = rule([0.9, 0.999], ge=0, lt=1, length=2)  # AdamW betas
    weight_decay: float = rule(0.0, ge=0)  # App. C: none
    schedule: str = rule("cosine", choices=SCHEDULES)  # after the warmup (paper silent: to 0)
    warmup_epochs: float = rule(1.0, ge=0)  # linear warmup, in epochs
    epochs: int = rule(10, ge=0)  # passes over the SFT set


@dataclass
class TrainerConfig:
    accelerator: str = rule("auto", choices=ACCELERATORS)  # auto: GPU when present, else CPU
    devices: int = rule(1, gt=0)  # devices per node (under SLURM: tasks per node)
    num_nodes: int = rule(1, gt=0)  # executor=slurm sets it from the profile's nodes
    precision: str = rule("auto", choices=PRECISIONS)  # auto: bf16-mixed on GPU, else 32-true
    # torch.compile of the training loss (model + LM head + cross-entropy) and of the loss
    # eval's forward passes (Fig. 5, stages/eval_loss.py); NIAH's decoding has its own setting,
    # eval.niah.compile (ssmax.host.compiling says why auto is CUDA only)
    compile: bool | str = rule("auto", choices=("auto", True, False))  # auto: on CUDA only
    # the training rate measured with it: docs/paper-scale.md, "Performance on a GPU"
    loss_chunk: int = rule(8192, gt=0)  # positions per LM-head + cross-entropy chunk
    log_every_n_steps: int = rule(10, gt=0)  # MLflow metrics every this many steps
    val_every_n_steps: int = rule(200, gt=0)  # validation every this many optimizer steps
    val_batches: int | float = rule(8, gt=0)  # validation batches per check (float: a share)
    checkpoint_every_n_steps: int = rule(200, gt=0)  # Lightning checkpoint (resume) interval
    progress_bar: bool = True  # Rich's bar on a terminal; in a log file, a line every:
    progress_every_s: float = rule(60.0, gt=0)  # seconds (ssmax.lit.progress)
    save_weights_at: list[int] = rule([], gt=0)  # steps after which weights are saved
    deterministic: bool = False  # deterministic kernels (CPU tests of resume equality)
    # On a CPU, one torch thread a node, kernels pinned to this set: the same bits whatever the
    # CPU would pick (ssmax.host.cpu_isa)
    cpu_isa: str | None = rule(None, choices=(None, "avx2"))  # host/cpu_isa.py; null: the CPU's
    callbacks: list[Any] = items()  # extra callbacks, {_target_: module.Class, ...}; observers
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)  # App. B
    sft: SFTConfig = field(default_factory=SFTConfig)  # App. C


@dataclass
class TrackingConfig:
    enabled: bool = True  # log to MLflow; false: no store, no run, nothing sent
    tracking_uri: str | None = None  # null: sqlite:///<abs output_dir>/mlflow.db; http://: a server
    # offline: no network; each pipeline node logs to a store in its own folder, merged into
    # the folder's (<output_dir>/mlflow.db); `make sync` copies that to a server later
    mode: str = rule("online", choices=("online", "offline"))  # where runs are logged
    system_metrics: bool = True  # CPU, memory, disk, network, GPUs of every node's run
    system_metrics_interval_s: float = rule(10.0, gt=0)  # one logged step per interval
    end_wait_s: float = rule(10.0, ge=0)  # a run ending with its server away waits this long
    experiment: str = "ssmax-repro"  # the MLflow experiment
    artifact_location: str | None = None  # null: <output_dir>/mlartifacts, a server's own
    parent_run_id: str | None = None  # set by the pipeline: node runs are its run's children
    tags: dict[str, Any] = rule({})  # extra run tags (the pipeline adds stage, node, fingerprint)


@dataclass
class LossEvalConfig:
    """Sec. 3.2, Fig. 5: per-position test loss, theta x protocol.rope_factor."""

    max_multiple: int | float = rule(20, gt=0)  # sequences of this x the training length
    report_multiples: list[Any] = rule([1, 5, 10, 20], gt=0, unique=True)  # table and claims
    sequences: int = rule(8, gt=0)  # test sequences (paper: 100,000)
    batch_size: int | str = rule("auto", gt=0, auto=True)  # sequences a pass; auto: GPU memory


@dataclass
class NiahEvalConfig:
    """Sec. 3.3, Fig. 6: needle in a haystack after SFT, theta x protocol.rope_factor."""

    context_multiples: list[Any] = rule(  # haystack x N
        [1, 2, 4, 6, 8, 10], gt=0, min_items=1, unique=True
    )
    depths: list[float] = rule(  # needle depths
        [0.1, 0.3, 0.5, 0.7, 0.9], ge=0, le=1, min_items=1, unique=True
    )
    samples: int = rule(4, gt=0)  # per (context, depth) cell (paper: 1000)
    max_new_tokens: int = rule(8, gt=0)  # greedy answer length
    # auto: a cell at once on a GPU (up to 64, within its free memory), one at a time on the CPU
    batch_size: int | str = rule("auto", gt=0, auto=True)  # prompts decoded together
    base_theta_multiples: list[Any] = rule([1], gt=0, unique=True)  # training theta ([]: off)
    # NIAH's own setting (trainer.compile does not reach it; the needle scores and the copy
    # probe run eager): symbolic shapes, one graph each for every length; on in the paper
    # preset and so gpu1 (faster on a GPU), off by default (on the CPU compiling takes longer
    # than a few short prompts); measured: docs/paper-scale.md, "Measurements behind the
    # code's choices"
    compile: bool = False  # torch.compile of the prefill and the decoding step


@dataclass
class NeedleScoresConfig:
    """Sec. 3.4, Figs. 7, 8: attention on the needle's number, theta x protocol.rope_factor."""

    context_multiple: int | float = rule(7.8125, gt=0)  # x the training length (8000 at 1024)
    depth: float = rule(0.5, ge=0, le=1)  # Fig. 7's needle: depth ...
    city: str = "Tokyo"  # ... city ...
    number: str = "8106422"  # ... and number
    trials: int = rule(20, gt=0)  # Fig. 8: random city, number, depth per trial (paper: 100)


@dataclass
class CopyProbeConfig:
    """Not in the paper: can the model copy at all (ssmax.evals.copying)."""

    span: int = rule(32, gt=0)  # random spans of this many tokens, each shown twice
    count: int = rule(16, gt=0)  # spans; the loss gain on the repeat is the score


@dataclass
class EvalConfig:
    """Read by the pipeline's eval stages only (presets may set them for either entry)."""

    loss: LossEvalConfig = field(default_factory=LossEvalConfig)  # Fig. 5
    niah: NiahEvalConfig = field(default_factory=NiahEvalConfig)  # Fig. 6
    needle_scores: NeedleScoresConfig | None = field(default_factory=NeedleScoresConfig)  # or null
    copy_probe: CopyProbeConfig | None = field(default_factory=CopyProbeConfig)  # or null
    # torch: torch's order (flash first); cudnn, flash, efficient, math: that one first
    sdpa_first: str = rule("torch", choices=SDPA_FIRST)  # the evals' attention backend


@dataclass
class ExecutorConfig:
    """Where pipeline nodes run (conf/executor/<kind>.yaml) and, for slurm and the multirun
    launcher, the cluster profile (conf/executor/slurm/profile/<name>.yaml)."""

    kind: str = rule("inprocess", choices=EXECUTOR_KINDS)  # in this process, subprocesses, SLURM
    workers: int = rule(2, gt=0)  # local: parallel nodes; torch threads = cores / workers
    timeout_min: int = rule(120, gt=0)  # local: per node; slurm: the job's time limit
    wait: bool = False  # slurm: wait for every job, exit non-zero when one failed
    poll_s: float = rule(5.0, gt=0)  # slurm: seconds between state queries while waiting
    max_requeues: int = rule(5, ge=0)  # slurm: requeues on time-out/preemption, then it fails
    snapshot: bool = False  # local, slurm: the nodes import a copy of src/ and conf/ made at start
    # K > 1: up to K seeds of a variant's pretraining from scratch as one job
    # (ssmax.pipeline.bundle.group). Pays on a GPU, where a solo step is kernel launches, not on a
    # CPU (measured slower there: docs/training.md, "Seeds bundled"). Its evals too, one
    # after another in one process (ssmax.pipeline.bundle.evals)
    bundle: int = rule(0, ge=0)  # inprocess, local: seeds a job (0 or 1: each node alone)
    # path: the longest remaining chain first (the shortest run); seed: the lowest seed first
    # (then path), so that a run stopped midway has whole seeds done
    order: str = rule("path", choices=("path", "seed"))  # local: which ready node starts first
    partition: str | None = None  # profile: the SLURM partition (null: no profile given)
    account: str | None = None  # profile: --account
    qos: str | None = None  # profile: --qos
    nodes: int = rule(1, gt=0)  # profile: nodes per job
    gpus_per_node: int = rule(0, ge=0)  # profile: GPUs per node (0: none asked for)
    tasks_per_node: int = rule(1, gt=0)  # profile: tasks per node (DDP: one per GPU)
    cpus_per_task: int = rule(1, gt=0)  # profile: CPUs per task (= torch threads)
    mem_gb: int | float = rule(1, gt=0)  # profile: memory per node
    constraint: str | None = None  # profile: --constraint
    additional_parameters: dict[str, Any] = rule({})  # profile: extra #SBATCH --key=value lines
    signal_delay_s: int = rule(30, ge=0)  # profile: USR2 this long before the time limit
    setup: list[str] = items()  # profile: shell lines run before the job
    stages: dict[str, Any] = rule({})  # profile: stage -> any of the keys above, for its jobs


@dataclass
class TrainConfig:
    """`python -m ssmax.train` (conf/config.yaml)."""

    seed: int = rule(0, ge=0, le=MAX_SEED)  # the run's seed (data order, init)
    objective: str = rule("pretrain", choices=OBJECTIVES)  # sft: summed answer-span loss
    init_from: str | None = None  # weights to start from (.pt or .ckpt); (e)/(f) need (a)'s
    run_name: str | None = None  # MLflow run name; null: <variant>-<objective>-seed<seed>
    preset: PresetConfig = field(default_factory=PresetConfig)  # set by conf/preset/<name>
    paths: PathsConfig = field(default_factory=PathsConfig)  # where outputs go
    model: ModelSchema = field(default_factory=ModelSchema)  # conf/model/<name>
    variant: VariantSchema = field(default_factory=VariantSchema)  # conf/variant/<name>
    data: DataConfig = field(default_factory=DataConfig)  # conf/data/<name>
    trainer: TrainerConfig = field(default_factory=TrainerConfig)  # optimisation, Lightning
    tracking: TrackingConfig = field(default_factory=TrackingConfig)  # MLflow
    eval: EvalConfig = field(default_factory=EvalConfig)  # the pipeline's evals
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)  # a profile: SLURM multirun
