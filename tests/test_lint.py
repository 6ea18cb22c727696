"""The linter on the package (what `nbdev_export` wrote from the notebooks): ruff for unused imports, redefined names and
unused variables (pyproject.toml `[tool.ruff]`), and imports inside functions only for the modules that keep
`dflash-nb --help` fast, never a name the module already imports at its top."""
import ast, subprocess, sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / 'dflash_nb'

# Imported inside functions on purpose: each costs `dflash-nb --help` (which imports every stage module) time or
# memory it does not need, or is optional. Any other import goes at the top of its module.
LAZY = {
    'torch': 'about 1.5 s and 400 MB at import', 'transformers': 'about 2 s at import (and torch)',
    'datasets': 'about 1 s at import (pyarrow, pandas)', 'pyarrow': 'the Arrow runtime, only to write datasets',
    'safetensors': 'imports torch', 'tokenizers': 'the Rust tokenizers runtime', 'numpy': 'only where arrays are made',
    'matplotlib': 'about 0.5 s and a backend, only to plot', 'IPython': 'only in a notebook', 'ipywidgets': 'only in a notebook',
    'nbformat': 'the docs and the chain only', 'papermill': 'the chain only', 'jupyter_client': 'the chain only',
    'nbdev': 'the docs only', 'jupyter_core': 'the chain only (its event loop runner, as nbclient uses it)', 'jinja2': 'only to render a template file', 'tqdm': 'only with a progress bar',
    'wandb': 'optional, only when a run logs to it', 'tensorboard': 'optional', 'gguf': 'only to convert a GGUF target',
    'multiprocessing': 'a worker pool, only when one is asked for', 'dflash_nb': 'a stage module loaded by the command that runs it',
}

def test_ruff_finds_no_unused_or_redefined_names():
    "The package and the notebooks its readers read: no unused or redefined name, one statement a line."
    r = subprocess.run([sys.executable, '-m', 'ruff', 'check', str(PKG), str(PKG.parent / 'nbs'), '--no-cache',
                        '--config', str(PKG.parent / 'pyproject.toml')], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]

def _inner_imports(tree):
    "(function, module, name) of each import inside a function of `tree`."
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)): continue
        for n in ast.walk(fn):
            if isinstance(n, ast.Import): yield from ((fn.name, a.name, a.asname or a.name) for a in n.names)
            if isinstance(n, ast.ImportFrom):
                mod = 'dflash_nb' if n.level else (n.module or '')
                yield from ((fn.name, mod, a.asname or a.name) for a in n.names)

def test_imports_inside_functions_have_a_reason():
    bad = []
    for f in sorted(PKG.glob('*.py')):
        if f.name == '_modidx.py': continue
        tree = ast.parse(f.read_text(encoding='utf-8'))
        top = {a.asname or a.name.split('.')[0] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        for fn, mod, name in _inner_imports(tree):
            if mod.split('.')[0] not in LAZY: bad.append(f'{f.name}:{fn}: imports {mod} inside a function (no reason in LAZY)')
            elif name in top: bad.append(f'{f.name}:{fn}: imports {name} again (the module imports it at its top)')
    assert not bad, '\n'.join(bad)
