#!/usr/bin/env python
"""Edit notebooks as plain text: convert between `nbs/*.ipynb` (the source of truth, committed) and
jupytext percent scripts in `_nbsrc/*.py` (a scratch copy, git-ignored).

    python tools/nbsync.py --to-py [NAMES...]   # nbs/X.ipynb -> _nbsrc/X.py (start of an editing session)
    python tools/nbsync.py [NAMES...]           # _nbsrc/X.py -> nbs/X.ipynb, then run nbdev_export and nbdev_clean

Cell ids are derived from the cell's position and source, so an unchanged cell keeps its id; the kernelspec is
python3; jupytext's own metadata is dropped; `parameters` tags are kept.

In a stage notebook (a `parameters` cell followed by the `open_stage(...)` cell) every cell a chain run does not need gets papermill's
`skip-execution` tag (`stage_tags`): all cells before the parameters cell except the title, the module's first
`#| export` (imports) cell and the markdown right before the parameters cell, plus the closing `nbdev_export()` cell.
`python tools/nbsync.py --tags` re-applies the tags to every notebook in place (tests/test_layout.py checks them).
"""
import argparse, hashlib, subprocess, sys
from pathlib import Path
import jupytext

ROOT = Path(__file__).resolve().parents[1]
NBS, SRC = ROOT / 'nbs', ROOT / '_nbsrc'
KERNEL = {'display_name': 'Python 3', 'language': 'python', 'name': 'python3'}

SKIP = 'skip-execution'

def _src(c) -> str: return ''.join(c.source) if isinstance(c.source, list) else c.source

def stage_tags(nb) -> list[bool]:
    "Per cell: whether a chain run skips it (see the module docstring); all False for a notebook without parameters."
    cells = nb.cells
    par = next((i for i, c in enumerate(cells) if 'parameters' in c.metadata.get('tags', [])), None)
    opened = par is not None and par + 1 < len(cells) and 'open_stage(' in _src(cells[par + 1])
    if not opened: return [False] * len(cells)   # the stage section is not self-contained yet: run the whole notebook
    imports = next((i for i, c in enumerate(cells) if c.cell_type == 'code' and _src(c).lstrip().startswith('#| export')), None)
    keep = {0, imports, par} | ({par - 1} if par and cells[par - 1].cell_type == 'markdown' else set())
    return [(i < par and i not in keep) or (c.cell_type == 'code' and 'nbdev_export()' in _src(c))
            for i, c in enumerate(cells)]

def apply_tags(nb):
    "Set or clear the `skip-execution` tag of every cell by `stage_tags`; returns the notebook."
    for c, skip in zip(nb.cells, stage_tags(nb)):
        tags = [t for t in c.metadata.get('tags', []) if t != SKIP] + ([SKIP] if skip else [])
        if tags: c.metadata['tags'] = tags
        else: c.metadata.pop('tags', None)
    return nb

def to_ipynb(py: Path) -> Path:
    nb = jupytext.read(py, fmt='py:percent')
    nb.metadata = {'kernelspec': KERNEL}
    for i, c in enumerate(nb.cells):
        c.id = hashlib.sha1(f'{i}:{c.source}'.encode()).hexdigest()[:8]
        c.metadata = {k: v for k, v in c.metadata.items() if k == 'tags'}
    apply_tags(nb)
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
    ap.add_argument('--tags', action='store_true', help='re-apply the skip-execution tags to the notebooks in place')
    a = ap.parse_args()
    if a.tags:
        for p in ([NBS / f'{n}.ipynb' for n in a.names] or sorted(NBS.glob('*.ipynb'))):
            nb = jupytext.read(p); before = [c.metadata.get('tags') for c in nb.cells]
            if [c.metadata.get('tags') for c in apply_tags(nb).cells] != before: jupytext.write(nb, p, fmt='ipynb'); print(p)
    elif a.to_py:
        for p in ([NBS / f'{n}.ipynb' for n in a.names] or sorted(NBS.glob('*.ipynb'))): print(to_py(p))
    else:
        for p in ([SRC / f'{n}.py' for n in a.names] or sorted(SRC.glob('*.py'))): print(to_ipynb(p))
        subprocess.run(['nbdev_export'], cwd=ROOT, check=True)
        subprocess.run(['nbdev_clean'], cwd=ROOT, check=True)
