"Every notebook runs as a test (nbdev's runner), one pytest test per notebook so a failure names it."
import os
from pathlib import Path
import pytest
import nbdev.test as nbt   # not `from nbdev.test import test_nb`: pytest would collect it

NBS = Path(__file__).resolve().parents[1] / 'nbs'
NOTEBOOKS = sorted(p for p in NBS.glob('*.ipynb') if not p.name.startswith('_'))

@pytest.mark.parametrize('nb', NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook(nb, demo_run):
    flags = [] if os.environ.get('DFLASH_NB_SLOW') else ['slow']
    ok, secs = nbt.test_nb(nb, skip_flags=flags, showerr=True)
    assert ok, f'{nb.name} failed (see the traceback above)'
