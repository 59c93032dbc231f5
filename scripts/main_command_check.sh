#!/usr/bin/env bash
# The README's main command, many times: the smoke pipeline with the local executor and more
# workers than cores (nodes starting side by side on the folder's one sqlite store), RUNS times
# into fresh folders. Prints each run's last line and "K of RUNS green"; exits 1 unless all are.
# Usage: bash scripts/main_command_check.sh [RUNS] [WORKERS]   (defaults 3, 2 x cores)
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
WORKERS=${2:-$(( 2 * $(nproc) ))}
PY=${PY:-.venv/bin/python}
case "$RUNS$WORKERS" in *[!0-9]*|'') echo "main_command_check.sh: RUNS and WORKERS must be positive integers (got '$RUNS', '$WORKERS')" >&2; exit 2 ;; esac
green=0
for i in $(seq 1 "$RUNS"); do
  dir=$(mktemp -d /tmp/main-command-XXXXXX)
  start=$(date +%s)
  if "$PY" -m ssmax.pipeline run preset=smoke executor=local "executor.workers=$WORKERS" \
      "paths.output_dir=$dir" >"$dir.log" 2>&1; then
    green=$((green + 1)); verdict=green
  else
    verdict="FAILED (log: $dir.log)"
  fi
  echo "run $i: $verdict, $(( $(date +%s) - start )) s, $(grep -E '^[0-9]+ nodes' "$dir.log" | tail -1)"
done
echo "$green of $RUNS green ($WORKERS workers on $(nproc) cores)"
[ "$green" -eq "$RUNS" ]
