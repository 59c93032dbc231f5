"""MLflow tracking: a sqlite store in the output folder (created under a lock), params from
the resolved config, the data each training run reads as its dataset inputs (datasets.py),
what each run ran on (its commit here; packages, machine, the work tree's diff: manifest.py)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from ssmax.files.atomic import atomic_path
from ssmax.files.flock import exclusive
from ssmax.tracking.liveness import (
    close_dead_runs,
    closed_line,
    folder_tag,
    hand_to_job,
    process_tags,
)
from ssmax.tracking.manifest import git_commit, log_manifest, node_tags

if TYPE_CHECKING:
    from ssmax.tracking.client import Client
# MLflow is imported inside the functions that use it, here and across ssmax.tracking: the
# package loads without it (mlflow_client says why)

# Volatile values: they change between a run and its resume, and MLflow refuses a changed
# param on an existing run. They go to tags or the YAML artifact instead.
VOLATILE_KEYS = ("paths", "init_from", "run_name", "tracking", "hydra")
MAX_PARAM_VALUE = 6000  # mlflow.utils.validation.MAX_PARAM_VAL_LENGTH (MLflow >= 2)
STORE_FILE = "mlflow.db"  # the default store's database, in the output folder


def default_store(output_dir: str | Path) -> str:
    """The default tracking store (tracking.tracking_uri: null), a sqlite database in the
    output folder: sqlite:///<abs output_dir>/mlflow.db. The pipeline, the report, the MLflow
    UI and the tracking server all take it from here."""
    return "sqlite:///" + str(Path(output_dir).resolve() / STORE_FILE)


def offline(cfg: DictConfig) -> bool:
    """tracking.mode=offline: nothing goes over the network; `make sync` copies it later."""
    return cfg.tracking.get("mode", "online") == "offline"


def tracking_uri(cfg: DictConfig) -> str:
    """Where this process logs: tracking.tracking_uri, else (and offline, for a server) the
    folder's own store. A pipeline node offline has its own (ssmax.pipeline.run sets it)."""
    uri = cfg.tracking.tracking_uri
    if uri and not (offline(cfg) and is_server(str(uri))):
        return str(uri)
    return default_store(cfg.paths.output_dir)


def use_node_store(cfg: DictConfig, directory: str | Path) -> None:
    """tracking.mode=offline: cfg logs to the store of the node in directory (its own one;
    no network, no sqlite file written by many nodes over network disk)."""
    cfg.tracking.tracking_uri = default_store(directory)
    cfg.tracking.artifact_location = str(Path(directory).resolve() / "mlartifacts")


def folder_store(cfg: DictConfig) -> str:
    """Where the folder's runs are read from (the report): offline, the folder's own store,
    into which the nodes' stores are merged (ssmax.tracking.sync.merge_nodes)."""
    return default_store(cfg.paths.output_dir) if offline(cfg) else tracking_uri(cfg)


def is_server(uri: str) -> bool:
    """A tracking server (http/https, in any case, as MLflow reads a scheme), as opposed to a
    store this process opens itself."""
    return uri.partition("://")[0].lower() in ("http", "https")


def artifact_location(cfg: DictConfig) -> str | None:
    """Where a new experiment keeps its artifacts: tracking.artifact_location when set; on a
    tracking server None, the server's own (mlflow-artifacts:/<id>, proxied to its artifacts
    destination, readable wherever the server is); else <output_dir>/mlartifacts."""
    root = cfg.tracking.artifact_location
    if root and "://" in str(root):
        return str(root)  # a URI (s3://, mlflow-artifacts:/, file://) as given
    if not root and is_server(tracking_uri(cfg)):
        return None
    return Path(root or Path(cfg.paths.output_dir) / "mlartifacts").resolve().as_uri()


def sqlite_file(uri: str) -> Path | None:
    """The database file of a sqlite:/// store, else None."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


@contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Held while a sqlite store may be created: the tables and their migrations are made by
    the first client to open it, and two at once fail ("duplicate column name: step"). The
    lock file lies beside the database (<db>.lock); other stores need none."""
    db = sqlite_file(uri)
    if db is None:
        yield
        return
    with exclusive(f"{db}.lock"):
        yield


def create_sqlite_store(uri: str, artifact_root: str | None, cache: Path | None = None) -> None:
    """A new sqlite store appears whole: made in a file beside it, renamed into place after.
    Made in place, a run killed in those seconds (a SLURM time-out signal during start-up) left
    a store at an old schema that every later run refused ("out-of-date database schema").
    With a cache folder, the file starts as a copy of empty_store(cache) (MLflow's tables and
    migrations, ~1 s of CPU, made once), to which MLflow adds its Default experiment as on any
    new store. Other stores, or one that exists: nothing."""
    db = sqlite_file(uri)
    if db is None or db.exists():
        return
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    with atomic_path(db) as tmp:  # the Default experiment (id 0) keeps its artifacts there
        if cache is not None:
            shutil.copyfile(empty_store(cache), tmp)
        SqlAlchemyStore(f"sqlite:///{tmp}", artifact_root or db.parent.as_uri()).engine.dispose()


def empty_store(cache: Path) -> Path:
    """<cache>/mlflow/empty-<MLflow version>.db: MLflow's tables at its schema head, no rows,
    made (atomically) by the first process that needs it. MLflow makes them so in a new store
    (mlflow.store.db.utils._initialize_tables, which SqlAlchemyStore calls on an empty database;
    tests/test_lock.py holds a store copied from it equal to one made in place)."""
    import mlflow
    from mlflow.store.db.utils import _initialize_tables
    from sqlalchemy import create_engine

    path = Path(cache) / "mlflow" / f"empty-{mlflow.__version__}.db"
    if not path.exists():
        with atomic_path(path) as tmp:
            engine = create_engine(f"sqlite:///{tmp}")
            _initialize_tables(engine)
            engine.dispose()
    return path


# MLflow 3's UI shows an experiment of this kind as model training (runs, metrics, charts), not
# as GenAI development (traces, evaluations, an assistant panel), which it guesses otherwise.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def ensure_experiment(cfg: DictConfig) -> str:
    """Id of the configured experiment, created with artifact_location(cfg); the store and the
    experiment are created under store_lock (every path to a new store comes here). On a
    server, clients on other nodes may create it at the same time: the loser reads it back."""
    Path(cfg.paths.output_dir).mkdir(parents=True, exist_ok=True)
    uri = tracking_uri(cfg)
    with store_lock(uri):
        create_sqlite_store(uri, artifact_location(cfg), Path(cfg.paths.cache_dir))
        client = mlflow_client(uri)
        experiment = client.get_experiment_by_name(cfg.tracking.experiment)
        if experiment is None:  # made here, or by a node that was quicker (Client reads it back)
            name, where = cfg.tracking.experiment, artifact_location(cfg)
            return client.create_experiment(name, where, tags=EXPERIMENT_KIND)
        for key, value in EXPERIMENT_KIND.items():  # an experiment made before the tag
            if experiment.tags.get(key) != value:
                client.set_experiment_tag(experiment.experiment_id, key, value)
        return experiment.experiment_id


def flat_params(cfg: DictConfig) -> dict[str, str]:
    """The resolved config flattened to dotted keys, volatile keys left out, values cut."""
    tree = OmegaConf.to_container(cfg, resolve=True)
    flat: dict[str, str] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            flat[prefix[:-1]] = str(node)[:MAX_PARAM_VALUE]

    walk({k: v for k, v in tree.items() if k not in VOLATILE_KEYS}, "")
    return flat


def source_tags() -> dict[str, str]:
    """The code a run ran: the commit, also as MLflow's own tag (the UI's "Source" version)."""
    commit = git_commit()
    return {"git_commit": commit, "mlflow.source.git.commit": commit, "mlflow.source.type": "LOCAL"}


def run_tags(cfg: DictConfig, here: bool = True) -> dict[str, str]:
    """A run's tags: its variant, preset, objective, seed and commit; and, for a run that runs
    in this process (here), the machine and packages it runs on (manifest.node_tags)."""
    tags = {
        "variant": str(cfg.variant.name),
        "preset": str(cfg.preset.name),
        "objective": str(cfg.objective),
        "seed": str(cfg.seed),
        **source_tags(),
        **process_tags(),  # the process that ends the run: a later start closes it if gone
        **folder_tag(cfg.paths.output_dir),
    }
    if here:
        tags |= node_tags()
    return tags


def log_config(client: Any, run_id: str, cfg: DictConfig, params: bool = True) -> None:
    """Params (100 per batch, MLflow's limit; params=False: none) and the full resolved YAML
    as an artifact."""
    from mlflow.entities import Param

    flat = [Param(k, v) for k, v in flat_params(cfg).items()] if params else []
    for i in range(0, len(flat), 100):
        client.log_batch(run_id, params=flat[i : i + 100])
    client.log_text(run_id, OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")


def mlflow_client(uri: str) -> Client:
    """The project's MLflow client (ssmax.tracking.client.Client) on the store or server uri."""
    # lazy: MLflow takes ~2 s to import on 2 cores; the commands that import this package and
    # never open a store (pipeline plan, report --help, make mlflow-ui) go without it
    from ssmax.tracking.client import Client

    return Client(uri)


def _client(cfg: DictConfig) -> Client:
    return mlflow_client(tracking_uri(cfg))


def start_pipeline_run(cfg: DictConfig, name: str, tags: dict[str, str]) -> tuple[str, str]:
    """The parent run of one pipeline invocation and its experiment's id; its config is logged
    as for any run, and the manifest of what runs it (ssmax.tracking.manifest)."""
    experiment = ensure_experiment(cfg)
    client = _client(cfg)
    tags = source_tags() | process_tags() | folder_tag(cfg.paths.output_dir) | tags
    run = client.create_run(experiment, run_name=name, tags=tags)
    log_config(client, run.info.run_id, cfg)
    log_manifest(client, run.info.run_id)
    return run.info.run_id, experiment


def child_run(
    cfg: DictConfig,
    name: str,
    parent_run_id: str | None,
    tags: dict[str, str],
    log_params: bool = True,
    here: bool = True,
) -> str:
    """A run under the pipeline's run for a node that does not train (training nodes get
    theirs from the Lightning logger, with the same parent). Its resolved config is an
    artifact (config.yaml) whether or not its params are logged; here=False: a node that ran
    elsewhere (cached), whose machine and packages come in tags, not from this process."""
    experiment = ensure_experiment(cfg)
    client = _client(cfg)
    tags = run_tags(cfg, here) | dict(tags)  # the node's own tags win
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    run = client.create_run(experiment, run_name=name, tags=tags)
    log_config(client, run.info.run_id, cfg, params=log_params)
    return run.info.run_id


def set_tags(cfg: DictConfig, run_id: str, tags: dict[str, str]) -> None:
    """Tags set on an existing run (of any status)."""
    client = _client(cfg)
    for key, value in tags.items():
        client.set_tag(run_id, key, value)


def finish_run(
    cfg: DictConfig, run_id: str, status: str, tags: dict[str, str] | None = None
) -> None:
    client = _client(cfg)
    for key, value in (tags or {}).items():
        client.set_tag(run_id, key, value)
    if client.get_run(run_id).info.status != status:
        client.set_terminated(run_id, status)


def log_artifacts(cfg: DictConfig, run_id: str, directory: Path) -> None:
    if directory.is_dir():
        _client(cfg).log_artifacts(run_id, str(directory))


def log_metrics(cfg: DictConfig, run_id: str, metrics: dict[str, float], step: int = 0) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    items = [Metric(k, float(v), now, step) for k, v in metrics.items()]
    _client(cfg).log_batch(run_id, metrics=items)


def close_dead(uri: str, output_dir: str | Path) -> str | None:
    """Close the folder's runs in uri left RUNNING by processes that are gone
    (ssmax.tracking.liveness); the line that names them, or None. A store not made yet: None."""
    db = sqlite_file(uri)
    if db is not None and not db.exists():
        return None
    return closed_line(close_dead_runs(mlflow_client(uri), output_dir))


def hand_run_to_job(cfg: DictConfig, run_id: str, job: str) -> None:
    """cfg's run run_id is ended by SLURM job `job` now (ssmax.tracking.liveness.hand_to_job)."""
    hand_to_job(_client(cfg), run_id, job)
