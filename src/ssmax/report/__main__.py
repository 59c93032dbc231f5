"""`python -m ssmax.report --output-dir DIR [--dest DIR/report] [--run-id ID]`

Rebuild the report of a pipeline run without running anything: the run (default: the one last
started on DIR, which DIR/pipeline/mlflow_run.json names; a server holds other folders' runs
too) names its child runs; each child's node and fingerprint tags locate that node's folder
and done record on disk, whose outputs are the report's inputs. The runs' manifest tags
(ssmax.tracking.manifest) make the report's Manifest section.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ssmax.host.cli import Parser
from ssmax.pipeline.state import (
    module_of,
    node_dir,
    pipeline_run_path,
    read_done,
    read_pipeline_run,
)
from ssmax.report.build import build_report, settings_from_cfg
from ssmax.report.system_table import system_rows
from ssmax.stages.outputs import read_outputs
from ssmax.stages.report import declared, reported
from ssmax.stages.spec import stage_spec
from ssmax.tracking.reach import check_reachable
from ssmax.tracking.runs import close_dead
from ssmax.tracking.spool import deliver_pending
from ssmax.tracking.store import STORE_FILE, default_store, mlflow_client
from ssmax.tracking.sync import merge_nodes

MADE_BY = ("git_commit", "packages_sha", "host", "cpu", "gpus")  # what a node's run says made it


def pipeline_run(client: Any, output_dir: Path, uri: str, run_id: str | None = None) -> Any:
    """The pipeline run to report on: run_id, else the one last started on output_dir (its
    pipeline/mlflow_run.json), else (a folder from before that record) the latest pipeline run
    of the folder's own sqlite store. A server's latest may be another folder's: never taken."""
    from mlflow.exceptions import MlflowException  # lazy: MLflow (~2 s), not for --help

    recorded = None if run_id else read_pipeline_run(output_dir)
    wanted = run_id or (recorded or {}).get("run_id")
    if wanted:
        try:
            return client.get_run(wanted)
        except MlflowException as err:
            if err.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                raise
        where = (f"recorded in {pipeline_run_path(output_dir)}, tracked on "
                 f"{recorded['tracking_uri']}") if recorded else "--run-id"  # fmt: skip
        raise LookupError(f"pipeline run {wanted} ({where}) is not in {uri}") from None
    if uri != default_store(output_dir):
        raise LookupError(
            f"no pipeline run recorded in {pipeline_run_path(output_dir)} and {uri} may hold "
            "other folders' runs: name it with --run-id (the id of this folder's pipeline run)"
        )
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(
        experiments, "tags.kind = 'pipeline'", order_by=["attributes.start_time DESC"],
        max_results=1,
    )  # fmt: skip
    if not runs:
        raise LookupError("no pipeline run in this MLflow store")
    return runs[0]


def node_outputs(output_dir: Path, tags: dict[str, str]) -> tuple[Path, dict] | None:
    """(node folder, done record) of a child run, from its node and fingerprint tags."""
    node, fingerprint = tags.get("node"), tags.get("fingerprint")
    if not node or not fingerprint:
        return None
    folder = node_dir(output_dir, node, fingerprint)
    record = read_done(folder, fingerprint)
    return None if record is None else (folder, record)


def collect(
    output_dir: Path, uri: str, run_id: str | None = None
) -> tuple[dict, Path, Any, dict[str, dict[str, str]]]:
    """(report inputs {node: outputs}, the folder of a config to read settings from, run,
    {node: what made it (MADE_BY, from its run's tags, else its done record)})."""
    client = mlflow_client(uri)
    parent = pipeline_run(client, output_dir, uri, run_id)
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'",
        max_results=5000,
    )  # fmt: skip
    outputs, modules, config_dir, made = {}, {}, None, {}
    for child in children:
        found = node_outputs(output_dir, child.data.tags)
        if found is None:
            continue
        folder, record = found
        made[record["node"]] = {k: str(child.data.tags.get(k) or record.get(k) or "unknown")
                                for k in MADE_BY}  # fmt: skip
        node, module = record["node"], module_of(record)
        if module == "report" or config_dir is None:  # the report node's config
            config_dir = folder
        if module is not None and stage_spec(module).reported_as:  # typed: its stage's Outputs
            outputs[node], modules[node] = read_outputs(module, record), module
    inputs = reported(outputs, modules)  # what each stage declares the report reads
    if config_dir is None:
        raise LookupError(f"run {parent.info.run_id}: no child run with a finished node on disk")
    return inputs, config_dir, parent, made


def _counted(values: list[str]) -> str:
    """'x (3 nodes), y (1 node)': the most frequent first."""
    counts = Counter(values).most_common()
    return ", ".join(f"{v} ({n} node{'s' * (n != 1)})" for v, n in counts)


def manifest_lines(parent: dict[str, str], made: dict[str, dict[str, str]]) -> list[str]:
    """The report's Manifest section from the pipeline run's tags and its nodes' (collect):
    the commit and whether the work tree was dirty, the environment, the hosts, CPUs and GPUs
    the nodes ran on, and a warning where they ran on different code or package sets."""
    commit, dirty = parent.get("git_commit", "unknown"), parent.get("dirty", "unknown")
    tree = {"true": "dirty (its uncommitted changes: the pipeline run's manifest/git.diff)",
            "false": "clean"}.get(dirty, "unknown")  # fmt: skip
    lines = [f"commit: {commit}; work tree: {tree}"]
    if dirty == "true":
        lines.append(
            "Warning: the pipeline ran from a work tree with uncommitted changes: the commit "
            "alone does not make this run again (apply its manifest/git.diff)"
        )
    keys = ("python", "torch", "cuda", "cudnn", "nccl")
    stack = ", ".join(f"{k} {parent[k]}" for k in keys if k in parent)
    if stack:
        sha = parent.get("packages_sha", "unknown")
        lines.append(f"pipeline's environment: {stack}; packages_sha {sha} (its list: the "
                     "pipeline run's manifest/packages.txt)")  # fmt: skip
    nodes = list(made.values())
    commits = [n["git_commit"] for n in nodes]
    if set(commits) - {commit, "unknown"}:
        lines.append(f"nodes' commits: {_counted(commits)}")
    for key, label in (("host", "hosts"), ("cpu", "CPUs"), ("gpus", "GPUs")):
        lines.append(f"{label}: {_counted([n[key] for n in nodes])}")
    shas = [n["packages_sha"] for n in nodes]
    lines.append(f"packages_sha of the nodes: {_counted(shas)}")
    known = set(shas) - {"unknown"}  # nodes from before the manifest: not another set
    if len(known) > 1:
        lines.append(f"Warning: the nodes ran with {len(known)} different package sets: "
                     f"{_counted(shas)}")  # fmt: skip
    return lines


def seeds_of(inputs: dict[str, Any]) -> list[int]:
    """The seeds of the nodes found ("<stage>/<variant>/seed<k>"), for a run without a report
    node whose settings come from a node config that does not list them."""
    return sorted({int(n.rsplit("/seed", 1)[1]) for n in inputs if "/seed" in n})


def variants_of(inputs: dict[str, Any]) -> list[str]:
    return sorted({n.split("/")[1] for n in inputs if n.count("/") == 2})


def main(argv: list[str] | None = None) -> int:
    parser = Parser("ssmax.report", description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", required=True, help="the pipeline's paths.output_dir")
    parser.add_argument("--dest", help="where to write the report (default: OUTPUT_DIR/report)")
    parser.add_argument("--run-id", help="a pipeline run (default: OUTPUT_DIR's last)")
    parser.add_argument(
        "--tracking-uri", help="the run's tracking.tracking_uri, e.g. http://HOST:PORT "
        f"(default: sqlite:///OUTPUT_DIR/{STORE_FILE})",
    )  # fmt: skip
    args = parser.parse_args(argv)
    output_dir = Path(args.output_dir).resolve()
    uri = args.tracking_uri or default_store(output_dir)
    if not args.tracking_uri and not (output_dir / STORE_FILE).exists():
        print(
            f"error: no MLflow store at {output_dir / STORE_FILE}; runs tracked on a server: "
            "--tracking-uri http://HOST:PORT (make report TRACKING_URI=...)", file=sys.stderr,
        )  # fmt: skip
        return 2

    problem = check_reachable(  # a server that is down: one line in seconds, not minutes
        uri, setting="--tracking-uri",
        otherwise=f"leave --tracking-uri out to read {output_dir / STORE_FILE}",
    )  # fmt: skip
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2

    deliver_pending(output_dir)  # what training runs left for a server that was away
    if not args.tracking_uri:  # tracking.mode=offline: the nodes' own stores into the folder's
        merge_nodes(output_dir)

    closed = close_dead(uri, output_dir)  # a crash's runs read as KILLED, not as running
    if closed:
        print(closed)
    try:
        inputs, config_dir, parent, made = collect(output_dir, uri, args.run_id)
    except LookupError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

    cfg = OmegaConf.load(config_dir / "config.yaml")
    for key, found in (("seeds", seeds_of(inputs)), ("variants", variants_of(inputs))):
        if OmegaConf.select(cfg, f"pipeline.{key}") is None:  # a training node's own config
            OmegaConf.update(cfg, f"pipeline.{key}", found, force_add=True)
    settings = settings_from_cfg(cfg)
    settings.tracking_uri = uri  # the store we read, wherever the run first wrote it
    settings.details["pipeline run"] = f"{parent.info.run_name} ({parent.info.run_id})"
    settings.manifest = manifest_lines(parent.data.tags, made)
    settings.system = system_rows(mlflow_client(uri), parent)
    dest = Path(args.dest) if args.dest else output_dir / "report"
    out = build_report(inputs, settings, dest, declared())
    print(f"report: {out['report_md']}\n        {out['report_html']}")
    print("\n".join(f"  {line}" for line in out["primary_claims"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
