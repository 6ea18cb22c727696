import os, shutil, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]

def dflash(*args, cwd=None, env=None, check=True):
    "Run the `dflash-nb` console script; returns the CompletedProcess (stdout+stderr captured)."
    exe = shutil.which('dflash-nb') or str(Path(sys.executable).parent / 'dflash-nb')
    r = subprocess.run([exe, *map(str, args)], cwd=cwd or ROOT, capture_output=True, text=True,
                       env={**os.environ, **(env or {})})
    if check and r.returncode != 0:
        raise AssertionError(f'dflash-nb {" ".join(map(str, args))} exited {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}')
    return r

def clean_copy(dst: Path) -> Path:
    "The working tree's tracked and untracked-but-not-ignored files (no build/, no .venv/), symlinks kept."
    files = subprocess.run(['git', 'ls-files', '-z', '-co', '--exclude-standard'], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split('\0')
    for f in filter(None, files):
        src, out = ROOT / f, dst / f
        if not src.exists() and not src.is_symlink(): continue          # deleted in the working tree
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink(): out.symlink_to(os.readlink(src))
        else: shutil.copy2(src, out)
    return dst

@pytest.fixture(scope='session')
def demo_run():
    """The embedded demo chain, run once per session into the shared smoke run (runs/_smoke), so that the notebook
    smoke tests that follow find their upstream stages fresh."""
    from dflash_nb.pipeline import smoke_run_dir
    run_dir = smoke_run_dir()
    r = dflash('run', '--quiet', '--runs-dir', run_dir.parent, '--set', f'run.name={run_dir.name}')
    return run_dir, r
