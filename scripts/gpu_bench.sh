#!/usr/bin/env bash
# The GPU benchmarks on a machine that reaches no package index: installs the project into its
# python3 from the wheels in WHEELS (scripts/offline_wheels.py made them) unless it imports
# already, then runs what `make bench PRESET=paper` runs on a GPU and copies the output and
# bench/throughput.json to OUT. Usage: bash scripts/gpu_bench.sh [niah|evals|step|sysmetrics|
# seeds|bits|replicate|rivals|bundle|confirm ...] (default: niah evals; step compiles a model a
# variant, minutes).
# NIAH_WAYS: bench_niah's --ways.
# sysmetrics: a smoke pretraining on the GPU, tracked, and the system metrics its run logged.
# seeds: the tiny preset's pretraining nodes of SEEDS x VARIANTS side by side on the host's CPU
# cores (local executor, WORKERS, at most SEEDS_TIMEOUT_S), their wall time and weights digests
# (scripts/weights_digest.py) in $OUT/seeds_digests.txt, to compare with a run elsewhere, and
# the nodes' logs in $OUT/seeds_logs.tgz.
# bits: the pinned smoke pretraining on the CPU, with what could move its bits besides the CPU
# (Python's and the packages' versions, glibc, digests of the data files and the weights), in
# $OUT/bits.txt; run it here too and diff (docs/tiny-scale.md, "The same bits on another CPU").
# replicate: the paper pipeline of the tiny preset for SEEDS x VARIANTS (default 3-10, (a) and
# (b)) on the GPU (REPL_ACCELERATOR, default gpu; bf16-mixed, eager, trainer.cpu_isa off), local
# executor with WORKERS (default 16) sharing it, each node its own MLflow store, for at most
# REPL_TIMEOUT_S (default 360; what is left then runs in-process if the local run failed
# early); then the report of what finished (the report node's, else `python -m ssmax.report`
# over the folder), the per-node wall times, the weights digests and the logs in
# $OUT/replicate.tgz. REPL_PRESET (tiny), REPL_PIPELINE: the pipeline file (paper; e.g.
# rival_laws), REPL_ARGS: more overrides; REPL_DIR: the output folder (/tmp/replicate).
# rivals: the general path on CUDA (issue 43): tests/test_flex_cuda.py (the compiled model's
# FlexAttention kernel against the explicit one: forward, gradients, KV-cache decoding) and
# bench_step's [3] for (a), (k), (l) at micro-batch RIVALS_BATCH (default 16: (l)'s entmax holds
# whole score matrices), tokens/s and MFU, not recorded; two rounds, no bare loop (each round
# compiles each law: ~30 s a model on an H100), at most RIVALS_TIMEOUT_S (default 360).
# bundle: seeds bundled on one device (issue 59): bench/bench_bundle.py on CUDA at the tiny
# preset, solo against bundles of BUNDLE_SIZES (default 1,4,16,32), ms/step/seed and seeds per
# minute, in $OUT/bundle.txt, at most BUNDLE_TIMEOUT_S (default 240); then the evals
# (bench/bench_bundle_evals.py: BUNDLE_EVAL_SEEDS seeds of (b), default 8, their inputs
# trained briefly, each eval node solo in a local worker against bundled, at the
# BUNDLE_EVAL_WORKERS workers, default 1,4; BUNDLE_EVAL_ARGS: more flags, e.g. --compile) in
# $OUT/bundle_evals.txt, at most BUNDLE_EVALS_TIMEOUT_S (default 300).
# confirm: the registered GPU replication (runs.gpu of docs/registration/confirmatory-2026-11-29.json,
# issue 59): on a GPU first tests/test_bundle_cuda.py (the bundle's gradients, ~20 s; where it
# fails no run starts and its output comes back as $OUT/preflight.txt), then
# `python -m ssmax.registration.run gpu`, every planned seed (13-60) of the paper
# pipeline at the tiny preset on the GPU as one pipeline run, the pretraining of each variant's
# seeds bundled (executor.bundle=48), WORKERS (default 16) other nodes side by side, stopped
# by CONFIRM_TIMEOUT_S (default 540) or what BUDGET_S leaves; then the seeds' records
# (docs/results/confirmatory-2026-11-29/gpu/: every seed once the report over all finished,
# else those whose every node finished), the report node's (over all of them, or over those
# that finished), the per-node wall times and the logs in $OUT/confirm-<name>.tgz. CONFIRM_DIR: its cache
# (/tmp/confirm/<name>). CONFIRM_ARGS: more flags for the driver (the CPU dry run:
# --accelerator cpu with a smoke registration). Run it first on a loan, at a commit the judge
# accepts (python -m ssmax.registration.equivalence before the loan), with BENCH_COMMIT set to
# it. REGISTRATION: the registrations whose gpu runs to make, one after another in what is left
# of BUDGET_S (e.g. "docs/registration/confirmatory-2026-11-29.json
# docs/registration/arms-2026-11-29.json": the arms' is 48 seeds of 12 laws); each gives
# $OUT/records-<name>.tgz and $OUT/confirm-<name>.tgz (two registrations at most: OUT returns 8
# files).
# BENCH_COMMIT=<this checkout's commit>: what throughput.json records (the device tool's copy of
# the tree sits on a stale .git: its HEAD, "-dirty", is not what ran).
# BUDGET_S (default 570: a device call's 600 s less a margin): the whole script's seconds, the
# install included; the parts with a time limit (bundle, confirm, replicate, seeds, rivals)
# take at most what is left of it, less what they keep for copying their results to OUT, so
# that one call returns its results rather than being killed before it packs them.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
BUDGET_S=${BUDGET_S:-570}
left() {  # left KEEP OWN: OWN seconds, or what is left of BUDGET_S less KEEP if fewer (>= 1)
  local rest=$(( START + BUDGET_S - $(date +%s) - $1 ))
  (( rest < 1 )) && rest=1
  (( rest < $2 )) && echo "$rest" || echo "$2"
}
PARTS=$(echo "${@:-niah evals}")
for one in $PARTS; do
  case $one in niah|evals|step|sysmetrics|seeds|bits|replicate|rivals|bundle|confirm) ;; *) echo "gpu_bench.sh: unknown part '$one' (allowed: niah, evals, step, sysmetrics, seeds, bits, replicate, rivals, bundle, confirm)" >&2; exit 2 ;; esac
done
WHEELS=${WHEELS:-.whl}
OUT=${OUT:-outputs/gpu-bench}
mkdir -p "$OUT"
if ! python3 -c "import hydra, mlflow, submitit, ssmax" 2>/dev/null; then
  if python3 -m pip install -q --no-index --find-links "$WHEELS" -r "$WHEELS/requirements.txt"; then
    python3 -m pip install -q --no-index --find-links "$WHEELS" --no-deps -e .
  else  # a version the machine holds refused a wheel's needs: the wheels as they are, on top
    echo "gpu_bench.sh: pip could not resolve the wheels against this Python's packages;" \
         "installing them unresolved into /tmp/site (PYTHONPATH)" >&2
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$WHEELS"/*.whl
    export PYTHONPATH="/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else \"no GPU\")" | tee "$OUT/device.txt"
for one in $PARTS; do
  case $one in
    niah) python3 bench/bench_niah.py --ways "${NIAH_WAYS:-eager:torch,compiled:torch,compiled:cudnn}" ;;
    bundle)
      timeout "$(left 330 "${BUNDLE_TIMEOUT_S:-240}")" python3 bench/bench_bundle.py --device cuda \
        --preset tiny --sizes "${BUNDLE_SIZES:-1,4,16,32}" | tee "$OUT/bundle.txt" || true
      timeout "$(left 30 "${BUNDLE_EVALS_TIMEOUT_S:-300}")" python3 bench/bench_bundle_evals.py --device cuda \
        --preset tiny --seeds "${BUNDLE_EVAL_SEEDS:-8}" --workers "${BUNDLE_EVAL_WORKERS:-1,4}" \
        --rounds 1 --input-workers 8 ${BUNDLE_EVAL_ARGS:-} | tee "$OUT/bundle_evals.txt" || true ;;
    confirm)
      # first, on a GPU, the bundle's gradients against a loop over its seeds
      # (tests/test_bundle_cuda.py, ~20 s): a fault there spoils every seed of a run
      # (2026-11-30: vmap's memory-efficient SDPA kernel); where it fails, no run starts
      rm -f /tmp/preflight.txt
      if python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())" && ! timeout \
          "$(left 60 120)" python3 -m pytest -q -p no:cacheprovider tests/test_bundle_cuda.py \
          > /tmp/preflight.txt 2>&1; then  # in OUT only then: OUT returns 8 files at most
        cp /tmp/preflight.txt "$OUT/preflight.txt"
        echo "confirm: the bundle's CUDA check failed, no run started:"; tail -25 "$OUT/preflight.txt"
        continue
      fi
      [ -f /tmp/preflight.txt ] && echo "confirm: the bundle's CUDA check: $(tail -1 /tmp/preflight.txt)"
      # each registration's gpu run in turn (REGISTRATION: one file or several, space-separated),
      # in what is left of BUDGET_S; one with under CONFIRM_MIN_S (120) left is not started
      for REG in ${REGISTRATION:-docs/registration/confirmatory-2026-11-29.json}; do
        NAME=$(basename "$REG" .json)
        C=${CONFIRM_DIR:-/tmp/confirm}/$NAME
        R=$C/outputs-gpu
        RECORDS=$(dirname "$(dirname "$REG")")/results/$NAME/gpu
        start=$(date +%s)
        limit=$(left 40 "${CONFIRM_TIMEOUT_S:-540}")
        if (( limit < ${CONFIRM_MIN_S:-120} )); then
          echo "confirm: $NAME not started: $limit s left of BUDGET_S=$BUDGET_S"; continue
        fi
        echo "confirm: $NAME: $limit s for the run (BUDGET_S=$BUDGET_S, $(( start - START )) s spent)"
        # the driver stops the pipeline before --timeout-s, records the seeds that finished
        # (ssmax.registration.gpu) and ends by it; timeout is a backstop past it
        rc=0; timeout -k 10 $(( limit + 15 )) python3 -m ssmax.registration.run gpu \
          --registration "$REG" --workdir "$C" --workers "${WORKERS:-16}" --timeout-s "$limit" \
          ${BENCH_COMMIT:+--commit "$BENCH_COMMIT"} ${CONFIRM_ARGS:-} || rc=$?
        echo "confirm: $NAME: exit $rc after $(( $(date +%s) - start )) s, $(nproc) cores"
        mkdir -p "$C/out"
        # the records first, a file of their own in OUT: what the run is for
        tar czf "$OUT/records-$NAME.tgz" -C "$(dirname "$RECORDS")" gpu 2>/dev/null || true
        cp -r "$RECORDS" "$C/out/records" 2>/dev/null || true
        # the report node's (over every seed, or over those that finished); the run tracks
        # nothing (ssmax.registration.gpu), so there is no MLflow store to build one from
        report=$(ls -d "$R"/pipeline/nodes/report/*/report 2>/dev/null | head -1 || true)
        cp -r "$report" "$C/out/report" 2>/dev/null || true
        python3 -c "import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob('pipeline/nodes/*/**/done.json')):
    d = json.loads(f.read_text()); print(d.get('node'), d.get('wall_s'), (d.get('bundle') or {}).get('size', 1), sep='\t')" "$R" \
          > "$C/out/node_wall_s.tsv" || true
        awk -F'\t' -v name="$NAME" '{split($1, p, "/"); n[p[1]]++; s[p[1]] += $2} END {for (k in n)
          printf "confirm: %s: %s: %d nodes done, %.1f s of node time\n", name, k, n[k], s[k]}' \
          "$C/out/node_wall_s.tsv" || true
        nvidia-smi > "$C/out/nvidia-smi.txt" 2>&1 || true
        tar czf "$OUT/confirm-$NAME.tgz" -C "$C" out -C "$R" pipeline/logs \
          || tar czf "$OUT/confirm-$NAME.tgz" -C "$C" out || true
      done ;;
    evals) python3 bench/bench_evals.py --preset paper ;;
    step) python3 bench/bench_step.py --preset paper --parts 3 ;;
    rivals)
      python3 -m pytest -q -p no:cacheprovider tests/test_flex_cuda.py || true
      timeout "$(left 20 "${RIVALS_TIMEOUT_S:-360}")" python3 bench/bench_step.py --preset paper --parts 3 \
        --rounds 4 --steps 10 --warmup 3 --no-record --no-bare --variants a,k,l \
        --batch-size "${RIVALS_BATCH:-16}" || true ;;
    sysmetrics)
      python3 -m ssmax.train preset=smoke trainer.compile=false \
        tracking.system_metrics_interval_s=1 paths.output_dir=/tmp/sysmetrics >/dev/null 2>&1 \
        || { echo "sysmetrics: the smoke pretraining failed" >&2; exit 1; }
      python3 -c "import sqlite3; db = sqlite3.connect('/tmp/sysmetrics/mlflow.db')
for key, n, top in db.execute(\"select key, count(*), max(value) from metrics where key like 'system/%' group by key order by key\"): print(f'{key}: {n} samples, max {top:g}')" ;;
    seeds)
      start=$(date +%s)
      timeout "$(left 30 "${SEEDS_TIMEOUT_S:-480}")" python3 -m ssmax.pipeline run preset=tiny pipeline.file=paper \
        "pipeline.seeds=[${SEEDS:-3,4,5,6,7,8,9,10}]" "pipeline.variants=[${VARIANTS:-a_softmax,b_ssmax}]" \
        "pipeline.targets=[pretrain]" executor=local "executor.workers=${WORKERS:-$(nproc)}" \
        trainer.accelerator=cpu paths.output_dir=/tmp/seeds || echo "seeds: pipeline exit $?"
      echo "seeds: $(( $(date +%s) - start )) s wall on $(nproc) cores"
      grep -h '"wall_s"\|"node"' /tmp/seeds/pipeline/nodes/pretrain/*/*/*/done.json | paste - - || true
      python3 scripts/weights_digest.py /tmp/seeds/pipeline/nodes/pretrain | tee "$OUT/seeds_digests.txt" || true
      tar czf "$OUT/seeds_logs.tgz" -C /tmp/seeds/pipeline logs || true ;;
    bits)
      rm -rf /tmp/bits
      OMP_NUM_THREADS=2 python3 -m ssmax.pipeline run preset=smoke "pipeline.variants=[a_softmax]" \
        "pipeline.targets=[pretrain]" executor=inprocess trainer.accelerator=cpu \
        trainer.cpu_isa=avx2 tracking.enabled=false paths.output_dir=/tmp/bits >/dev/null 2>&1 \
        || { echo "bits: the smoke pretraining failed" >&2; exit 1; }
      { python3 -c "import platform, importlib.metadata as m; print('python', platform.python_version())
for d in ('torch', 'numpy', 'tokenizers', 'datasets', 'pyarrow', 'lightning', 'hydra-core'): print(d, m.version(d))"
        ldd --version | sed -n 1p  # head would close the pipe: SIGPIPE, 141 under pipefail
        (cd /tmp/bits/cache && find . -type f ! -name '*.lock' -print0 | sort -z | xargs -0 sha256sum | cut -c1-16,65-)
        python3 scripts/weights_digest.py /tmp/bits/pipeline/nodes/pretrain; } | tee "$OUT/bits.txt" ;;
    replicate)
      R=${REPL_DIR:-/tmp/replicate}
      start=$(date +%s)
      deadline=$(( start + $(left 40 "${REPL_TIMEOUT_S:-360}") ))
      # CUDA's availability read through NVML: the forkserver that the workers fork from
      # must not initialise CUDA (a forked child could not use it then)
      export PYTORCH_NVML_BASED_CUDA_CHECK=1
      # tracking.mode=offline: a store a node, merged by the report; many nodes starting at
      # once on one store race on its create-if-missing rows (issue 45)
      repl=(python3 -m ssmax.pipeline run "preset=${REPL_PRESET:-tiny}" "pipeline.file=${REPL_PIPELINE:-paper}"
        "pipeline.seeds=[${SEEDS:-3,4,5,6,7,8,9,10}]" "pipeline.variants=[${VARIANTS:-a_softmax,b_ssmax}]"
        "trainer.accelerator=${REPL_ACCELERATOR:-gpu}" trainer.compile=false trainer.cpu_isa=null
        preset.hardware=gpu tracking.mode=offline "paths.output_dir=$R" ${REPL_ARGS:-})
      rc=0; timeout -k 15 $(( deadline - $(date +%s) )) "${repl[@]}" executor=local \
        "executor.workers=${WORKERS:-16}" || rc=$?
      echo "replicate: local run exit $rc after $(( $(date +%s) - start )) s"
      if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ $(( deadline - $(date +%s) )) -gt 60 ]; then
        rc=0; timeout -k 15 $(( deadline - $(date +%s) )) "${repl[@]}" executor=inprocess || rc=$?
        echo "replicate: in-process run (what was left) exit $rc"
      fi
      echo "replicate: $(( $(date +%s) - start )) s wall, $(nproc) cores, ${WORKERS:-16} workers"
      report=$(ls -d "$R"/pipeline/nodes/report/*/report 2>/dev/null | head -1 || true)
      if [ -z "$report" ]; then  # not every node finished: the report of those that did
        python3 -m ssmax.report --output-dir "$R" --dest "$R/report_partial" || true
        report=$R/report_partial
      fi
      mkdir -p "$R/out"
      cp -r "$report" "$R/out/report" 2>/dev/null || true
      python3 -c "import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob('pipeline/nodes/*/**/done.json')):
    d = json.loads(f.read_text()); print(d.get('node'), d.get('wall_s'), sep='\t')" "$R" \
        > "$R/out/node_wall_s.tsv" || true
      awk -F'\t' '{split($1, p, "/"); n[p[1]]++; s[p[1]] += $2} END {for (k in n)
        printf "replicate: %s: %d nodes done, %.1f s of node time\n", k, n[k], s[k]}' \
        "$R/out/node_wall_s.tsv" || true
      python3 scripts/weights_digest.py "$R/pipeline/nodes" > "$R/out/weights_digests.txt" || true
      nvidia-smi > "$R/out/nvidia-smi.txt" 2>&1 || true
      tar czf "$OUT/replicate.tgz" -C "$R" out pipeline/logs \
        || tar czf "$OUT/replicate.tgz" -C "$R" out || true ;;
  esac 2>&1 | tee "$OUT/bench_$one.txt"
done
cp bench/throughput.json "$OUT/"
