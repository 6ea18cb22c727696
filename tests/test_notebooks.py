"""Every notebook runs as a test, one pytest test per notebook so a failure names it.

A notebook is executed once for the tests and the docs together: `docs.docs_notebook` runs it in a fresh interpreter
(as JupyterLab or papermill would; not inside the pytest process, whose earlier tests leave torch's OpenMP threads
behind, so a notebook that forks `datasets` workers would hang), executing the cells `nbdev_test` executes, and keeps
the executed copy in the docs cache (`docs.docs_cache`) with the failures it met. The docs build of tests/test_chain.py
and tests/test_docs.py takes the same copies, so neither run executes a notebook the other did. With `DFLASH_NB_SLOW=1`
the `slow` cells run too, through nbdev's own runner (the docs never run them)."""
import os, subprocess, sys
from pathlib import Path
import pytest

from dflash_nb.docs import docs_cache, docs_notebook

NBS = Path(__file__).resolve().parents[1] / 'nbs'
NOTEBOOKS = sorted(p for p in NBS.glob('*.ipynb') if not p.name.startswith('_'))
RUN = ('import sys, pathlib, nbdev.test as t; ok, _ = t.test_nb(pathlib.Path(sys.argv[1]), showerr=True); '
       'sys.exit(0 if ok else 1)')

@pytest.mark.parametrize('nb', NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook(nb, demo_run):
    if os.environ.get('DFLASH_NB_SLOW'):
        r = subprocess.run([sys.executable, '-c', RUN, str(nb)], capture_output=True, text=True, timeout=1800, cwd=NBS)
        assert r.returncode == 0, f'{nb.name} failed:\n{r.stdout[-6000:]}\n{r.stderr[-6000:]}'
        return
    errors = docs_notebook(nb, docs_cache(NBS), echo=None).metadata['dflash_nb_docs']['errors']
    assert errors == [], f'{nb.name}: {errors} (the traceback: nbdev_test --path {nb.relative_to(NBS.parent)})'
