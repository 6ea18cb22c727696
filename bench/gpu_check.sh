#!/usr/bin/env bash
# One-GPU check (bench/gpu_check.py): production-shape drafter training step, SmolLM2 regeneration and feature
# extraction throughput, lossless speculative decoding in bf16. At most ~8 minutes; writes bench/results/gpu_check.json.
#   bash bench/gpu_check.sh                        # on the GPU machine (its python3 holds torch; nothing is installed)
#   bash bench/gpu_check.sh --device cpu --tiny    # CPU smoke test
#   bash bench/gpu_check.sh --out "$OUT/gpu_check.json"   # on a lent device machine: results come back from $OUT
# Python: $PYTHON, else /opt/torch/.venv/bin/python3 (the GPU image's), else the repo's .venv, else python3.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/bench_env.sh"   # ROOT, PY, PYTHONPATH, offline
# the script boxes each section and writes the JSON after each one; this outer limit only catches a hang
if command -v timeout >/dev/null 2>&1; then
  exec timeout --signal=TERM --kill-after=15 "${GPU_CHECK_TIMEOUT:-480}" "$PY" "$ROOT/bench/gpu_check.py" "$@"
fi
exec "$PY" "$ROOT/bench/gpu_check.py" "$@"
