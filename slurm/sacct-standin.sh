#!/usr/bin/env bash
# A minimal `sacct` for the local cluster, which runs without slurmdbd (see slurm/install.sh).
#
# submitit polls `sacct -o JobID,State,NodeList --parsable2 -j ID [-j ID ...]` and, without an
# answer, leaves job states UNKNOWN (so `job.result()` of a cancelled job waits forever). We answer
# from slurmctld's in-memory job records via `squeue -t all`; slurm.conf sets a large MinJobAge so
# finished jobs stay listed. cluster.sh copies this file to DIR/bin/sacct and DIR/env.sh puts that
# first on PATH.
#
# Understood: -o/--format FIELDS, -j/--jobs IDS, -P/--parsable2 (always on), -n/--noheader.
# Everything else is ignored. Fields: JobID JobIDRaw JobName State NodeList Partition User Elapsed
# (others print empty). Unlike sacct, no .batch/.extern step rows (submitit skips those anyway).
set -euo pipefail

fields="JobID,JobName,Partition,State,NodeList"
jobs=()
header=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        -o | --format) fields="$2"; shift 2 ;;
        --format=*) fields="${1#*=}"; shift ;;
        -j | --jobs) IFS=, read -r -a more <<<"$2"; jobs+=("${more[@]}"); shift 2 ;;
        --jobs=*) IFS=, read -r -a more <<<"${1#*=}"; jobs+=("${more[@]}"); shift ;;
        -n | --noheader) header=0; shift ;;
        *) shift ;;
    esac
done

# squeue format codes for the sacct field names (case-insensitive, as in sacct).
IFS=, read -r -a names <<<"$fields"
fmt=""
for name in "${names[@]}"; do
    case "${name,,}" in
        jobid) code=%i ;;      # 123, or 123_4 for an array task (as sacct prints it)
        jobidraw) code=%A ;;
        jobname) code=%j ;;
        state) code=%T ;;      # PENDING RUNNING COMPLETED FAILED CANCELLED TIMEOUT ...
        nodelist) code=%N ;;
        partition) code=%P ;;
        user) code=%u ;;
        elapsed) code=%M ;;
        *) code="" ;;
    esac
    fmt+="${fmt:+|}${code}"
done

if [[ $header -eq 1 ]]; then
    (IFS='|'; echo "${names[*]}")
fi
# -r: one line per array task. No -j: squeue fails on an id it no longer knows, sacct does not;
# we filter ourselves on a hidden first column (%i): 123 selects 123 and its array tasks 123_N.
squeue -h -r -t all -o "%i|$fmt" | awk -F'|' -v want="${jobs[*]:-}" '
    BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) { split(w[i], p, "_"); ok[w[i]]; ok[p[1]] } }
    {
        split($1, p, "_")
        if (n > 0 && !($1 in ok) && !(p[1] in ok)) next
        line = $2; for (i = 3; i <= NF; i++) line = line "|" $i
        print line
    }'
