# Sourced by bench/gpu_check.sh and bench/gpu_quality.sh: ROOT (the checkout, the working folder), PY (the Python to
# run: $PYTHON, else /opt/torch/.venv/bin/python3 (the GPU image's), else the repo's .venv, else python3), the repo on
# PYTHONPATH, and no hub.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for c in /opt/torch/.venv/bin/python3 "$ROOT/.venv/bin/python" python3; do
    if [ -x "$c" ] || command -v "$c" >/dev/null 2>&1; then PY="$c"; break; fi
  done
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
