#!/usr/bin/env bash
# One-step set-up and run for dflash_nb on a fresh machine with Python >= 3.10.
#   ./run.sh demo   set up (idempotent), then run the embedded demo chain:  dflash-nb run
#   ./run.sh test   set up (idempotent), then run every test:              pytest
#   ./run.sh setup  set up only
# Set-up: a virtual environment in .venv, PyTorch (the CPU build 2.13.0 unless DFLASH_NB_TORCH names another
# requirement, e.g. DFLASH_NB_TORCH='torch' for the default CUDA build), then this project with its dev extras.
# A second call skips what is already installed (a stamp records the hash of the packaging files).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
VENV=${DFLASH_NB_VENV:-.venv}
TORCH_REQ=${DFLASH_NB_TORCH:-torch==2.13.0}
what=${1:-demo}; shift || true

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtual environment $VENV"
  "$PY" -m venv "$VENV"
fi
. "$VENV/bin/activate"
export PIP_DISABLE_PIP_VERSION_CHECK=1
if ! python -c "import torch" 2>/dev/null; then
  echo "[setup] installing $TORCH_REQ (before the project, so that pip does not pull another build)"
  python -m pip install -q $TORCH_REQ   # unquoted: may carry pip options (--index-url ...)
else
  echo "[setup] torch $(python -c 'import torch; print(torch.__version__)') already installed"
fi
stamp="$VENV/.dflash_nb_installed"
want=$(cat settings.ini setup.py pyproject.toml | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ] || ! python -c "import dflash_nb" 2>/dev/null; then
  echo "[setup] installing dflash_nb with its dev extras (pip install -e '.[dev]')"
  python -m pip install -q -e ".[dev]"
  echo "$want" > "$stamp"
else
  echo "[setup] dflash_nb already installed"
fi

case "$what" in
  setup) ;;
  demo) exec dflash-nb run "$@" ;;
  test) export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
        exec python -m pytest "$@" ;;
  *) echo "usage: ./run.sh [demo|test|setup] [args...]" >&2; exit 2 ;;
esac
