"""Every notebook runs as a test, one pytest test per notebook so a failure names it.

A notebook is executed once for the tests and the docs together: `docs.docs_notebook` runs it in a fresh interpreter
(as JupyterLab or papermill would; not inside the pytest process, whose earlier tests leave torch's OpenMP threads
behind, so a notebook that forks `datasets` workers would hang), executing the cells `nbdev_test` executes, and keeps
the executed copy in the docs cache (`docs.docs_cache`) with the failures it met. The docs build of tests/test_chain.py
and tests/test_docs.py takes the same copies, so neither run executes a notebook the other did. With `DFLASH_NB_SLOW=1`
the `slow` cells run too, through nbdev's own runner (the docs never run them).

A stage notebook run on its own rewrites its stage in the shared smoke run, and a few others read that run: those wait
for the demo chain and run on its xdist worker (conftest.py); the rest run on any worker, beside it. The demo chain
has already run every stage notebook's stage cells with the demo's values (papermill: its records in the smoke run),
so a stage notebook is built as the docs build it beside that run: its tutorial and library cells executed, its stage
cells left to the record (`docs.recorded_cells`), which must hold no error. One stage notebook, `ALONE_STAGE`, also runs
whole on its own (its parameters at None: the scratch run, the path a JupyterLab user takes), the stage's work done
again; doing that for every stage repeated the demo's work, ~9 minutes of a loaded CI run."""
import json, os, re, subprocess, sys
from pathlib import Path
import pytest

from dflash_nb.docs import docs_cache, docs_notebook, recorded_cells

NBS = Path(__file__).resolve().parents[1] / 'nbs'
NOTEBOOKS = sorted(p for p in NBS.glob('*.ipynb') if not p.name.startswith('_'))

def on_smoke_run(nb: Path) -> bool:
    "A stage notebook (its `parameters` cell), or one that reads the smoke run."
    cells = json.loads(nb.read_text())['cells']
    stage = any('parameters' in (c.get('metadata', {}).get('tags') or []) for c in cells)
    return stage or any(re.search(r'smoke_run_dir|prepare_upstream|smoke_stage|runs/_smoke', ''.join(c['source'])) for c in cells)

def is_stage(nb: Path) -> bool:
    "A stage notebook: it has a papermill `parameters` cell."
    return any('parameters' in (c.get('metadata', {}).get('tags') or []) for c in json.loads(nb.read_text())['cells'])

ALONE_STAGE = '30_convert'   # the stage notebook also run whole on its own (the cheapest stage: seconds)
SMOKE = [p for p in NOTEBOOKS if on_smoke_run(p)]
ALONE = [p for p in NOTEBOOKS if p not in SMOKE]
RUN = ('import sys, pathlib, nbdev.test as t; ok, _ = t.test_nb(pathlib.Path(sys.argv[1]), showerr=True); '
       'sys.exit(0 if ok else 1)')

@pytest.mark.parametrize('nb', SMOKE, ids=[p.stem for p in SMOKE])
def test_notebook(nb, demo_run):
    if not is_stage(nb) or nb.stem == ALONE_STAGE: return run_notebook(nb)
    rec = demo_run[0] / nb.stem / f'{nb.stem}.ipynb'          # the chain's record of its stage cells
    assert rec.is_file(), f'the demo chain left no record of {nb.stem}'
    cells = json.loads(rec.read_text())['cells']
    errors = [c['id'] for c in cells for o in c.get('outputs', []) if o.get('output_type') == 'error']
    assert errors == [], f'{rec}: cells {errors} failed in the chain'
    run_notebook(nb, skip_ids=recorded_cells(rec))

def test_only_the_stage_cells_are_left_to_the_record(tmp_path):
    "A cell left to a run's record is not executed (a failing one fails nothing); the rest are, with a key of their own."
    src = tmp_path / 't.ipynb'
    cell = lambda i, s: {'cell_type': 'code', 'id': i, 'metadata': {}, 'outputs': [], 'execution_count': None, 'source': s}
    src.write_text(json.dumps({'cells': [cell('a1', 'x = 1'), cell('b2', 'raise ValueError("the stage")')], 'nbformat': 4,
                               'nbformat_minor': 5, 'metadata': {'kernelspec': {'name': 'python3', 'display_name': 'python3', 'language': 'python'}}}))
    errs = lambda **kw: docs_notebook(src, tmp_path / 'c', echo=None, **kw).metadata['dflash_nb_docs']['errors']
    assert len(errs()) == 1 and errs(skip_ids={'b2'}) == []

@pytest.mark.parametrize('nb', ALONE, ids=[p.stem for p in ALONE])
def test_notebook_alone(nb):
    run_notebook(nb)

def test_every_notebook_is_tested():
    assert sorted(SMOKE + ALONE) == NOTEBOOKS
    assert {'01_targets', '80_train', '96_export'} <= {p.stem for p in SMOKE} and '00_core' in {p.stem for p in ALONE}

def run_notebook(nb: Path, skip_ids=()):
    "Execute `nb` as the docs build does (or, with DFLASH_NB_SLOW=1, with nbdev's runner and its `slow` cells)."
    if os.environ.get('DFLASH_NB_SLOW'):
        r = subprocess.run([sys.executable, '-c', RUN, str(nb)], capture_output=True, text=True, timeout=1800, cwd=NBS)
        assert r.returncode == 0, f'{nb.name} failed:\n{r.stdout[-6000:]}\n{r.stderr[-6000:]}'
        return
    errors = docs_notebook(nb, docs_cache(NBS), echo=None, skip_ids=skip_ids).metadata['dflash_nb_docs']['errors']
    assert errors == [], f'{nb.name}: {errors} (the traceback: nbdev_test --path {nb.relative_to(NBS.parent)})'
