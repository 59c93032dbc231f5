"""The MLflow UI in a real browser: the smoke pipeline's run and, once expanded, its children.

Needs Debian's chromium (`apt-get install -y chromium`) and PyPI `playwright`; no
`playwright install`: playwright drives /usr/bin/chromium through executable_path.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ssmax.pipeline.run import compose_pipeline
from ssmax.tracking.ui import start_ui, stop_ui
from tests.conftest import first_pipeline_run

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip


def _require_browser() -> None:
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        pytest.skip("no chromium at /usr/bin/chromium (apt-get install -y chromium)")
    pytest.importorskip("playwright.sync_api", reason="PyPI playwright is not installed")


@pytest.fixture(scope="module")
def ui(smoke_pipeline: list[str]):  # noqa: ANN201
    _require_browser()
    cfg = compose_pipeline(smoke_pipeline)
    server = start_ui(cfg.paths.output_dir)
    group = os.getpgid(server.process.pid)
    assert group == server.process.pid  # its own session: stopping it stops its workers too
    try:
        yield cfg, server
    finally:
        stop_ui(server)
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)


def test_pipeline_run_and_children_in_the_runs_list(ui) -> None:  # noqa: ANN001
    from playwright.sync_api import sync_playwright

    cfg, server = ui
    client, parent = first_pipeline_run(cfg)
    exp_id = parent.info.experiment_id
    children = client.search_runs(
        [exp_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'",
        max_results=500,
    )  # fmt: skip
    names = sorted(c.info.run_name for c in children)
    assert len(names) == 45 and "report" in names and "pretrain/b_ssmax/seed0" in names
    with sync_playwright() as pw:
        # a fresh profile comes with every launch (playwright makes its own temporary one)
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            # tall enough that the grid renders every row (it virtualises the rest)
            page = browser.new_page(viewport={"width": 1600, "height": 2400})
            # oldest first: the UI loads runs 100 at a time, newest first by default, and other
            # tests add pipeline runs to the shared smoke folder: the first run's children fell
            # off the first page (37 of 45 not shown, a full suite 2026-11-28)
            oldest_first = "orderByKey=attributes.start_time&orderByAsc=true"
            page.goto(f"{server.url}/#/experiments/{exp_id}/runs?{oldest_first}")
            run_link = page.get_by_role("link", name=parent.info.run_name, exact=True)
            run_link.wait_for(timeout=90_000)
            child = page.get_by_role("link", name="report", exact=True)
            assert child.count() == 0  # children are collapsed under their parent
            row = page.get_by_role("row").filter(has=run_link)
            row.locator("[col-id='attributes.`Run Name`'] button").first.click()
            child.wait_for(timeout=30_000)
            shown = {n: page.get_by_role("link", name=n, exact=True).count() for n in names}
            assert [n for n, count in shown.items() if count != 1] == []
        finally:
            browser.close()


def test_the_ui_opens_on_the_training_view(ui) -> None:  # noqa: ANN001
    """`make mlflow-ui`'s address opens the experiment's runs (model training), where the bare
    address opens MLflow 3's GenAI view (traces, observability) in a fresh browser."""
    from playwright.sync_api import sync_playwright

    from ssmax.tracking.ui import only_experiment, training_view

    cfg, server = ui
    client, parent = first_pipeline_run(cfg)
    exp_id = only_experiment(cfg.paths.output_dir)
    assert exp_id == parent.info.experiment_id
    tags = client.get_experiment(exp_id).tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1200})
            page.goto(training_view(server.url, exp_id))
            page.get_by_role("link", name=parent.info.run_name, exact=True).wait_for(timeout=90_000)
            assert "Observability" not in page.inner_text("body")
            bare = browser.new_page(viewport={"width": 1600, "height": 1200})
            bare.goto(f"{server.url}/#/experiments/{exp_id}")  # the control: MLflow's default
            bare.get_by_text("Observability").first.wait_for(timeout=90_000)
        finally:
            browser.close()
