#!/usr/bin/env bash
# Install the Debian 12 packages for the local single-node SLURM cluster (slurm/cluster.sh).
#
# Idempotent and quiet: exits at once when the daemons are already installed. Run as root (CI runs
# it on a fresh machine, which lacks the packages).
#
# Accounting: we install NO slurmdbd/mariadb. submitit only asks `sacct -o JobID,State,NodeList
# --parsable2 -j ...`; cluster.sh answers that with a small stand-in (slurm/sacct-standin.sh, put
# first on PATH by DIR/env.sh) that reads `squeue -t all`, with MinJobAge large so finished jobs
# stay visible. That saves ~25 s of install, 110 MB of RSS and 3-5 s per cluster start, and
# removes two daemons (and two ports) that could fail.
set -euo pipefail

PKGS=(slurmctld slurmd slurm-client munge)

have_all() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
        command -v sbatch >/dev/null && command -v munged >/dev/null
}

if have_all; then
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "slurm/install.sh: must run as root to apt-get install ${PKGS[*]}" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt_install() {
    apt-get install -y -qq --no-install-recommends -o Dpkg::Use-Pty=0 "${PKGS[@]}" >/dev/null
}
# A fresh image may have empty or stale package lists: update only when the plain install fails,
# so a machine with good lists skips the (slow) update.
if ! apt_install 2>/dev/null; then
    apt-get update -qq >/dev/null
    apt_install
fi
have_all || { echo "slurm/install.sh: packages installed but daemons not on PATH" >&2; exit 1; }
echo "slurm/install.sh: installed ${PKGS[*]} ($(slurmctld -V))"
