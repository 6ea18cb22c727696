"""Small virtual environments holding other tools' readers (speculators 0.7.0.1 and 0.9.0, SpecForge 0.2.0,
transformers 4.57.1 and z-lab's dflash 0.1.0), for the interop tests in test_export.py and test_export_kinds.py.

Each venv is built once per cache (`$DFLASH_NB_CACHE/venvs/<key>`, key = a hash of its pins) and reused by every
later test session, so CI builds each one once. Torch and the rest come from the running interpreter's env: a `.pth`
file appends its site-packages, and only the packages below are installed into the venv (with `--no-deps`; the tools'
full dependency sets pull a torchvision that breaks with the CPU torch), so they take precedence.

    python tests/interop_venvs.py            # build (or find) all of them, print their pythons
"""
import hashlib, os, shutil, subprocess, sys, sysconfig, tempfile
from pathlib import Path

VENVS = {
    # speculators 0.7.0.1's data reader, with the transformers / hub / datasets versions it supports (also the 4.57 check)
    'spec07': ['speculators==0.7.0.1', 'loguru==0.7.3', 'pydantic-settings==2.16.3', 'transformers==4.57.1',
               'tokenizers==0.22.2', 'huggingface_hub==0.36.2', 'datasets==4.4.2'],
    # speculators 0.9.0 (its file transfer lives in hs-connectors) and SpecForge 0.2.0, on the main env's transformers
    'spec09': ['speculators==0.9.0', 'hs-connectors==0.9.0', 'loguru==0.7.3', 'pydantic-settings==2.16.3',
               'specforge==0.2.0'],
    # z-lab's own DFlash / DFlash2 reader (`dflash.model.DFlash2DraftModel`), on the main env's transformers
    'zlab': ['dflash==0.1.0'],
}

def _cache() -> Path:
    return Path(os.environ.get('DFLASH_NB_CACHE') or Path.home() / '.cache' / 'dflash_nb') / 'venvs'

def venv_python(name: str, log=print) -> Path:
    "The python of venv `name` (built now if missing); raises RuntimeError with pip's output when it cannot be built."
    pins = VENVS[name]
    base = sysconfig.get_paths()['purelib']
    key = hashlib.sha256(('\n'.join(pins) + '\n' + base + '\n' + sys.version).encode()).hexdigest()[:12]
    root = _cache() / f'{name}-{key}'
    py = root / 'bin' / 'python'
    if (root / '.complete').exists() and py.exists(): return py
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f'.{name}.', dir=root.parent))
    try:
        subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(tmp)], check=True, capture_output=True)
        sp = Path(subprocess.check_output([str(tmp / 'bin' / 'python'), '-c',
                                           'import sysconfig; print(sysconfig.get_paths()["purelib"])'], text=True).strip())
        (sp / '_dflash_nb_base.pth').write_text(base + '\n')
        log(f'[venvs] building {name} in {root}: {" ".join(pins)}')
        r = subprocess.run([str(tmp / 'bin' / 'python'), '-m', 'pip', 'install', '-q', '--no-deps',
                            '--disable-pip-version-check', *pins], capture_output=True, text=True)
        if r.returncode != 0: raise RuntimeError(f'pip could not build the {name} venv:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}')
        (tmp / '.complete').write_text('\n'.join(pins) + '\n')
        if root.exists(): shutil.rmtree(root)
        os.replace(tmp, root)        # the interpreter link and the .pth are position-independent
        return py
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

def run_in(name: str, script: str, *args, timeout: int = 600) -> str:
    "Run python `script` (text) with venv `name`'s python; returns stdout, raises AssertionError with the output on failure."
    py = venv_python(name)
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env.update(HF_HUB_OFFLINE='1', TRANSFORMERS_OFFLINE='1', HF_DATASETS_OFFLINE='1', OMP_NUM_THREADS='1',
               TOKENIZERS_PARALLELISM='false')
    r = subprocess.run([str(py), '-c', script, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)
    if r.returncode != 0: raise AssertionError(f'[{name}] exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}')
    return r.stdout

if __name__ == '__main__':
    for n in VENVS: print(n, venv_python(n))
