#!/usr/bin/env bash
# The quality chain on one GPU (bench/gpu_quality.py): every stage of configs/smollm2_quality.yaml through
# `dflash_nb.pipeline.run_chain`, sized by --set-style overrides to finish in under 8 minutes; writes
# bench/results/gpu_quality.json (each stage's seconds, regeneration tokens/s, training steps/s, evaluation tau and
# tokens/s against plain decoding).
#   bash bench/gpu_quality.sh                          # on the GPU machine (its python3 holds torch)
#   bash bench/gpu_quality.sh --device cpu --tiny      # CPU smoke test of the same code path (1-3 minutes)
#   bash bench/gpu_quality.sh --out "$OUT/gpu_quality.json"   # on a lent device machine: results come back from $OUT
# Python: $PYTHON, else /opt/torch/.venv/bin/python3 (the GPU image's), else the repo's .venv, else python3.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/bench_env.sh"   # ROOT, PY, PYTHONPATH, offline
# the stage kernels papermill starts are python3 kernels: put the chosen python first on PATH so they run on it too
case "$PY" in */*) PATH="$(dirname "$PY"):$PATH"; export PATH;; esac
# the script writes the JSON after every stage and fits training to the time left; this outer limit only catches a
# hang (timeout signals its whole process group: the stage kernels too)
if command -v timeout >/dev/null 2>&1; then
  exec timeout --signal=TERM --kill-after=15 "${GPU_QUALITY_TIMEOUT:-480}" "$PY" "$ROOT/bench/gpu_quality.py" "$@"
fi
exec "$PY" "$ROOT/bench/gpu_quality.py" "$@"
