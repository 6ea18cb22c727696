"""Every notebook runs as a test, one pytest test per notebook so a failure names it.

A notebook is executed once for the tests and the docs together: `docs.docs_notebook` runs it in a fresh interpreter
(as JupyterLab or papermill would; not inside the pytest process, whose earlier tests leave torch's OpenMP threads
behind, so a notebook that forks `datasets` workers would hang), executing the cells `nbdev_test` executes, and keeps
the executed copy in the docs cache (`docs.docs_cache`) with the failures it met. The docs build of tests/test_chain.py
and tests/test_docs.py takes the same copies, so neither run executes a notebook the other did. With `DFLASH_NB_SLOW=1`
the `slow` cells run too, through nbdev's own runner (the docs never run them).

A stage notebook run on its own rewrites its stage in the shared smoke run, and a few others read that run: those wait
for the demo chain and run on its xdist worker (conftest.py); the rest run on any worker, beside it."""
import json, os, re, subprocess, sys
from pathlib import Path
import pytest

from dflash_nb.docs import docs_cache, docs_notebook

NBS = Path(__file__).resolve().parents[1] / 'nbs'
NOTEBOOKS = sorted(p for p in NBS.glob('*.ipynb') if not p.name.startswith('_'))

def on_smoke_run(nb: Path) -> bool:
    "A stage notebook (its `parameters` cell), or one that reads the smoke run."
    cells = json.loads(nb.read_text())['cells']
    stage = any('parameters' in (c.get('metadata', {}).get('tags') or []) for c in cells)
    return stage or any(re.search(r'smoke_run_dir|prepare_upstream|smoke_stage|runs/_smoke', ''.join(c['source'])) for c in cells)

SMOKE = [p for p in NOTEBOOKS if on_smoke_run(p)]
ALONE = [p for p in NOTEBOOKS if p not in SMOKE]
RUN = ('import sys, pathlib, nbdev.test as t; ok, _ = t.test_nb(pathlib.Path(sys.argv[1]), showerr=True); '
       'sys.exit(0 if ok else 1)')

@pytest.mark.parametrize('nb', SMOKE, ids=[p.stem for p in SMOKE])
def test_notebook(nb, demo_run):
    run_notebook(nb)

@pytest.mark.parametrize('nb', ALONE, ids=[p.stem for p in ALONE])
def test_notebook_alone(nb):
    run_notebook(nb)

def test_every_notebook_is_tested():
    assert sorted(SMOKE + ALONE) == NOTEBOOKS
    assert {'01_targets', '80_train', '96_export'} <= {p.stem for p in SMOKE} and '00_core' in {p.stem for p in ALONE}

def run_notebook(nb: Path):
    "Execute `nb` as the docs build does (or, with DFLASH_NB_SLOW=1, with nbdev's runner and its `slow` cells)."
    if os.environ.get('DFLASH_NB_SLOW'):
        r = subprocess.run([sys.executable, '-c', RUN, str(nb)], capture_output=True, text=True, timeout=1800, cwd=NBS)
        assert r.returncode == 0, f'{nb.name} failed:\n{r.stdout[-6000:]}\n{r.stderr[-6000:]}'
        return
    errors = docs_notebook(nb, docs_cache(NBS), echo=None).metadata['dflash_nb_docs']['errors']
    assert errors == [], f'{nb.name}: {errors} (the traceback: nbdev_test --path {nb.relative_to(NBS.parent)})'
