"""The project's one MLflow client: every process that writes to a store makes it here.

Nodes run side by side (local workers, SLURM jobs) and write to one store: the folder's sqlite
file or a tracking server. MLflow's stores create many rows if missing by reading first and
inserting after (a dataset input, a tag, a registered model, a model version's number), so
two writers at the same moment both find the row missing and the second insert fails on the
table's unique key ("UNIQUE constraint failed"; a server answers it as a 400 or 500, which
MLflow's own HTTP retries do not repeat). The store rolls the losing transaction back whole,
so the loser may simply try again: it then finds what the winner wrote. `Client` does that
for every write that can lose such a race (RETRIED) and, for the two creates that name a
unique thing, returns the winner's (an experiment's id, a registered model).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

# How each store reports a unique key taken by another writer: sqlite, PostgreSQL, MySQL, and
# MLflow's registry when its own retries of a version number ran out.
LOST_RACE = ("UNIQUE constraint failed", "duplicate key value violates unique constraint",
             "Duplicate entry", "Model Version creation error")  # fmt: skip
ATTEMPTS = 32  # each lost race means another writer committed a missing row: finitely many
ALREADY_EXISTS = "RESOURCE_ALREADY_EXISTS"
# Writes that insert a row unless one is there (a race on the row can lose). Writes of rows
# no other process makes (a new run, a new logged model's id, artifacts) need nothing.
RETRIED = ("log_inputs", "log_batch", "log_param", "log_metric", "set_tag", "set_experiment_tag",
           "set_registered_model_tag", "set_model_version_tag", "set_registered_model_alias",
           "set_logged_model_tags", "create_model_version")  # fmt: skip

T = TypeVar("T")


def lost_race(err: BaseException) -> bool:
    """Whether err (or what caused it) is a unique key another writer took first."""
    seen: BaseException | None = err
    while seen is not None:
        if type(seen).__name__ == "IntegrityError" or any(s in str(seen) for s in LOST_RACE):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def retry_lost_race(write: Callable[..., T]) -> Callable[..., T]:
    """write, tried again while it loses a race (the store rolled the attempt back whole, so
    nothing is doubled); any other failure, or a race lost ATTEMPTS times, is raised."""

    @functools.wraps(write)
    def again(*args: Any, **kwargs: Any) -> T:
        for attempt in range(ATTEMPTS):
            try:
                return write(*args, **kwargs)
            except MlflowException as err:
                if attempt == ATTEMPTS - 1 or not lost_race(err):
                    raise
        raise AssertionError("unreachable")

    return again


class Client(MlflowClient):
    """An MlflowClient whose creates-if-missing succeed however many processes reach them at
    once: the loser of a race finds the winner's row (see the module's docstring)."""

    def create_experiment(
        self, name: str, artifact_location: str | None = None, tags: dict | None = None
    ) -> str:
        """The experiment's id: a new one, or the one another process made first."""
        try:
            return super().create_experiment(name, artifact_location, tags)
        except MlflowException as err:
            if err.error_code != ALREADY_EXISTS and not lost_race(err):
                raise
        found = self.get_experiment_by_name(name)
        if found is None:  # the name is taken by a deleted experiment: MLflow's own message
            raise MlflowException(f"Experiment '{name}' exists but is deleted", ALREADY_EXISTS)
        return found.experiment_id

    def create_registered_model(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The registered model: a new one, or the one another process made first."""
        try:
            return super().create_registered_model(name, *args, **kwargs)
        except MlflowException as err:
            if err.error_code != ALREADY_EXISTS and not lost_race(err):
                raise
        return self.get_registered_model(name)


for _name in RETRIED:
    setattr(Client, _name, retry_lost_race(getattr(MlflowClient, _name)))
