"""Session fixture `slurm_cluster`: a real single-node SLURM cluster (slurm/cluster.sh) for tests.

Load it with `pytest_plugins = ["tests.slurm_fixtures"]` in tests/conftest.py. It skips where
the cluster cannot run (not root, slurm/munge not installed: run `bash slurm/install.sh`) and
fails loudly, with the daemons' log tails, where it should run but does not come up.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CLUSTER_SH = REPO / "slurm" / "cluster.sh"
NEEDED = ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "munged")


@dataclass
class SlurmCluster:
    """A running cluster: its directory and the environment its clients need."""

    dir: Path
    env: dict[str, str] = field(default_factory=dict)

    def run(self, *args: str, check: bool = True) -> str:
        """Run a client command (squeue, scontrol, ...) against this cluster; return stdout."""
        out = subprocess.run(
            args, env={**os.environ, **self.env}, capture_output=True, text=True, timeout=30
        )
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} -> {out.returncode}: {out.stderr.strip()}")
        return out.stdout

    def kill_slurmd(self) -> None:
        """SIGKILL the node's slurmd alone (its jobs' processes live on): a crashed daemon."""
        _check(_cluster_sh("kill-slurmd", self.dir, timeout=30))

    def start_slurmd(self) -> None:
        """Start slurmd again and wait until the node is back in service."""
        _check(_cluster_sh("start-slurmd", self.dir, timeout=90))

    def state(self, job_id: str) -> str:
        """The job's state as slurmctld has it (squeue -t all), '' if unknown."""
        return self.run("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T", check=False).strip()


def skip_reason() -> str | None:
    """Why a cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "the local SLURM cluster runs its daemons as root (SlurmUser=root)"
    missing = [exe for exe in NEEDED if shutil.which(exe) is None]
    if missing:
        return f"SLURM not installed ({', '.join(missing)} missing): run `bash slurm/install.sh`"
    return None


def _cluster_sh(action: str, path: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(CLUSTER_SH), action, str(path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _check(done: subprocess.CompletedProcess[str]) -> None:
    if done.returncode != 0:
        raise RuntimeError(f"slurm/cluster.sh failed: {done.stdout}{done.stderr}")


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    # Short, world-executable path: the munge socket lives under it (sun_path is 108 bytes, and
    # every parent must be o+x); pytest's tmp_path is long and 0700.
    path = Path(tempfile.mkdtemp(prefix="ssmax-slurm-", dir="/tmp"))
    path.chmod(0o755)
    up = _cluster_sh("up", path, timeout=90)
    if up.returncode != 0:
        _cluster_sh("down", path, timeout=60)
        shutil.rmtree(path, ignore_errors=True)
        pytest.fail(f"slurm/cluster.sh up failed:\n{up.stdout}\n{up.stderr}", pytrace=False)
    bin_dir = path / "bin"  # holds the sacct stand-in that submitit polls
    env = {
        "SLURM_CONF": str(path / "etc" / "slurm.conf"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    try:
        with pytest.MonkeyPatch.context() as mp:
            for key, value in env.items():
                mp.setenv(key, value)
            yield SlurmCluster(dir=path, env=env)
    finally:
        down = _cluster_sh("down", path, timeout=90)
        if down.returncode == 0:
            shutil.rmtree(path, ignore_errors=True)
        else:  # keep the logs for a look
            print(f"slurm/cluster.sh down failed (logs kept in {path}):\n{down.stderr}")
