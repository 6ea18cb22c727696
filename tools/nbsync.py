#!/usr/bin/env python
"""Edit notebooks as plain text: convert between `nbs/*.ipynb` (the source of truth, committed) and
jupytext percent scripts in `_nbsrc/*.py` (a scratch copy, git-ignored).

    python tools/nbsync.py --to-py [NAMES...]   # nbs/X.ipynb -> _nbsrc/X.py (start of an editing session)
    python tools/nbsync.py [NAMES...]           # _nbsrc/X.py -> nbs/X.ipynb, then run nbdev_export and nbdev_clean

Cell ids are derived from the cell's position and source, so an unchanged cell keeps its id; the kernelspec is
python3; jupytext's own metadata is dropped; `parameters` tags are kept.
"""
import argparse, hashlib, subprocess, sys
from pathlib import Path
import jupytext

ROOT = Path(__file__).resolve().parents[1]
NBS, SRC = ROOT / 'nbs', ROOT / '_nbsrc'
KERNEL = {'display_name': 'Python 3', 'language': 'python', 'name': 'python3'}

def to_ipynb(py: Path) -> Path:
    nb = jupytext.read(py, fmt='py:percent')
    nb.metadata = {'kernelspec': KERNEL}
    for i, c in enumerate(nb.cells):
        c.id = hashlib.sha1(f'{i}:{c.source}'.encode()).hexdigest()[:8]
        c.metadata = {k: v for k, v in c.metadata.items() if k == 'tags'}
    out = NBS / (py.stem + '.ipynb')
    jupytext.write(nb, out, fmt='ipynb')
    return out

def to_py(ipynb: Path) -> Path:
    SRC.mkdir(exist_ok=True)
    out = SRC / (ipynb.stem + '.py')
    jupytext.write(jupytext.read(ipynb), out, fmt='py:percent')
    return out

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('names', nargs='*'); ap.add_argument('--to-py', action='store_true')
    a = ap.parse_args()
    if a.to_py:
        for p in ([NBS / f'{n}.ipynb' for n in a.names] or sorted(NBS.glob('*.ipynb'))): print(to_py(p))
    else:
        for p in ([SRC / f'{n}.py' for n in a.names] or sorted(SRC.glob('*.py'))): print(to_ipynb(p))
        subprocess.run(['nbdev_export'], cwd=ROOT, check=True)
        subprocess.run(['nbdev_clean'], cwd=ROOT, check=True)
