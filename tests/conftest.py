import os, shutil, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]

def _threads_per_worker():
    """Under xdist, each worker's share of the cores as its OpenMP/torch threads (inherited by the processes it starts):
    two workers each running 2 threads on 2 cores oversubscribe them, which costs torch far more than half."""
    n = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
    if n > 1 and 'OMP_NUM_THREADS' not in os.environ:
        os.environ['OMP_NUM_THREADS'] = str(max(1, len(os.sched_getaffinity(0)) // n))

_threads_per_worker()

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

SMOKE_GROUP = 'smoke'   # the xdist group of every test that reads or rewrites the shared smoke run

@pytest.hookimpl(tryfirst=True)   # before xdist's own hook, which reads the group marks into the test ids
def pytest_collection_modifyitems(config, items):
    """Tests on the shared smoke run (runs/_smoke) run on one xdist worker, in file order: stage notebooks executed
    as tests rewrite its stages, which a test expecting "everything skipped" on another worker must not see. Every
    other test is spread over the workers (`--dist loadgroup`, pytest.ini)."""
    for item in items:
        if 'demo_run' in getattr(item, 'fixturenames', ()): item.add_marker(pytest.mark.xdist_group(SMOKE_GROUP))
    items.sort(key=_start_order)   # the long ones first: a long test started last is a tail with one core idle

class _GroupIds:
    """xdist 3.8 puts a test in its group by appending `@GROUP` to `item._nodeid`, which pytest 9 no longer reads (the
    id lives in `item._id`): without this, `--dist loadgroup` spreads a group over the workers."""
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        if not getattr(config.option, 'loadgroup', False) or not hasattr(items[0] if items else None, '_id'): return
        from _pytest.nodeid import coerce_node_id
        for item in items:
            g = item.get_closest_marker('xdist_group')
            if g and '@' not in item.nodeid: item._id = coerce_node_id(f'{item.nodeid}@{g.args[0]}')

def pytest_configure(config):
    config.pluginmanager.register(_GroupIds(), 'dflash_nb_group_ids')

SLOW = ('test_wheel.py', 'test_rehearsal.py', 'test_gpu_quality.py', 'test_build_paths_never_shown',
        'test_synthesized_prompts_are_answered_rows', 'test_regenerate_servers.py', 'test_vs_speculators.py',
        'test_docs_in_browser', 'test_report_in_browser', 'test_own_data.py', 'test_rehearsal_profile.py')   # 40-180 s each (CPU-s, AVX2, 2 cores)

def _start_order(item) -> int:
    """The smoke run's group first (the demo chain, then what reads it); then the notebooks that need no run, so that
    the other workers execute them (into the docs cache) while the demo runs; then the slow tests; then the rest."""
    if item.get_closest_marker('xdist_group'): return 0
    if 'test_notebook_alone' in item.nodeid: return 1
    return 2 if any(s in item.nodeid for s in SLOW) else 3

@pytest.fixture(scope='session')
def demo_run():
    """The embedded demo chain, run once per session into the shared smoke run (runs/_smoke), so that the notebook
    smoke tests that follow find their upstream stages fresh. (A lock keeps a second pytest from running it at once.)"""
    from dflash_nb.core import build_lock
    from dflash_nb.pipeline import smoke_run_dir
    run_dir = smoke_run_dir()
    with build_lock(run_dir):
        r = dflash('run', '--quiet', '--runs-dir', run_dir.parent, '--set', f'run.name={run_dir.name}')
    return run_dir, r
