"""Every notebook runs as a test (nbdev's runner), one pytest test per notebook so a failure names it.

Each notebook runs in a fresh interpreter, as it does in JupyterLab or under papermill: not inside the pytest process,
whose earlier tests leave torch's OpenMP threads behind. A notebook that forks workers (50_tokenization's
`num_proc`, through `datasets`) would otherwise fork a process whose OpenMP runtime is not fork-safe, and hang."""
import os, subprocess, sys
from pathlib import Path
import pytest

NBS = Path(__file__).resolve().parents[1] / 'nbs'
NOTEBOOKS = sorted(p for p in NBS.glob('*.ipynb') if not p.name.startswith('_'))
RUN = ('import sys, pathlib, nbdev.test as t; ok, _ = t.test_nb(pathlib.Path(sys.argv[1]), skip_flags=sys.argv[2:], showerr=True); '
       'sys.exit(0 if ok else 1)')

@pytest.mark.parametrize('nb', NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook(nb, demo_run):
    flags = [] if os.environ.get('DFLASH_NB_SLOW') else ['slow']
    r = subprocess.run([sys.executable, '-c', RUN, str(nb), *flags], capture_output=True, text=True, timeout=1800,
                       cwd=NBS)
    assert r.returncode == 0, f'{nb.name} failed:\n{r.stdout[-6000:]}\n{r.stderr[-6000:]}'
