"""Where a run's records go: the tracking store (a sqlite database in the output folder,
created whole under a lock, or a tracking server; offline, each node's own), the project's
MLflow client on it, and the experiment in it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from ssmax.files.atomic import atomic_path
from ssmax.files.flock import exclusive

if TYPE_CHECKING:
    from ssmax.tracking.client import Client
# MLflow is imported inside the functions that use it, here and across ssmax.tracking: the
# package loads without it (mlflow_client says why)

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
    tests/test_concurrent_runs.py holds a store copied from it equal to one made in place)."""
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


def mlflow_client(uri: str) -> Client:
    """The project's MLflow client (ssmax.tracking.client.Client) on the store or server uri."""
    # lazy: MLflow takes ~2 s to import on 2 cores; the commands that import this package and
    # never open a store (pipeline plan, report --help, make mlflow-ui) go without it
    from ssmax.tracking.client import Client

    return Client(uri)
