"""A non-editable install runs where it is installed (issue 22).

The wheel is built from a clean copy of the working tree (what `pip install git+...` builds from a clone), installed
with `--no-deps` into a fresh virtual environment outside the checkout that reuses this environment's packages
(torch & co.) through a `.pth` file, the way `tests/interop_venvs.py` builds its venvs; the editable checkout is left
out of that path, so only the wheel's `dflash_nb` is importable there. From an empty folder it then runs the commands a
cluster user runs: `--help`, `plan` of the embedded demo, the demo chain shrunk to its smallest smoke (a tiny seeded
target, 8 rows, 2 training steps) up to training, a 2-process `torchrun ... dflash-nb train` (gloo on CPU), the rest
of the chain (which finds training fresh), `evaluate` on the drafter folder, and `docs`.

`python tests/test_wheel.py` runs the same steps outside pytest and prints each step's wall and CPU seconds.
"""
import json, os, resource, subprocess, sys, sysconfig, time
from pathlib import Path
import pytest
from conftest import clean_copy

ROOT = Path(__file__).resolve().parents[1]

# the demo config shrunk to minutes on two cores: a tiny seeded target (its own tokenizer; the mask token is its last
# embedding row, a spare one), 8 rows, answers of 4 tokens, 2 training steps, one held-out prompt of 4 tokens with
# the trained drafter only
SMOKE = ['run.target=tiny-qwen3', 'sources.total=8', 'regenerate.max_new_tokens=4', 'tokenization.num_proc=1',
         'hidden_states.max_samples=6', 'train.max_steps=2', 'train.max_minutes=null', 'train.ckpt_every=1',
         'evaluate.prompt_sets=[held_out]', 'evaluate.max_prompts=1', 'evaluate.max_new_tokens=4',
         'evaluate.variants=[trained]']

def smoke_sets() -> list[str]:
    "The `--set` arguments of the smoke, with the tiny target's last (spare) embedding row as the mask token."
    from dflash_nb.models import resolve_target       # the checkout's, here: it builds the same cached tiny model
    vocab = json.loads((Path(resolve_target('tiny-qwen3')) / 'config.json').read_text())['vocab_size']
    return [a for s in SMOKE + [f'train.mask_token={vocab - 1}'] for a in ('--set', s)]
SKIP_IN_BASE = ('__editable__', 'dflash_nb', 'dflash-nb', '_dflash_nb')   # the editable install stays out

def build_wheel(tmp: Path) -> Path:
    "Build the wheel from a clean copy of the working tree; returns its path."
    src = clean_copy(tmp / 'src')
    subprocess.run([sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps', '--no-build-isolation',
                    '--disable-pip-version-check', '-w', str(tmp / 'dist'), str(src)], check=True, capture_output=True)
    return next((tmp / 'dist').glob('dflash_nb-*.whl'))

def make_venv(root: Path, wheel: Path) -> Path:
    "A venv whose site-packages link to this environment's packages except dflash_nb, with the wheel installed."
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(root)], check=True, capture_output=True)
    py = root / 'bin' / 'python'
    sp = Path(subprocess.check_output([str(py), '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                                      text=True).strip())
    base, farm = Path(sysconfig.get_paths()['purelib']), root / 'base'
    farm.mkdir()
    for e in base.iterdir():
        if not e.name.startswith(SKIP_IN_BASE) and e.suffix != '.pth': (farm / e.name).symlink_to(e)
    (sp / '_dflash_nb_base.pth').write_text(f'{farm}\n')
    share = Path(sys.prefix) / 'share' / 'jupyter'   # the packages' data files (nbconvert's templates, kernel spec),
    if share.is_dir():                               # where installing them into this venv would have put them
        (root / 'share').mkdir(exist_ok=True); (root / 'share' / 'jupyter').symlink_to(share)
    subprocess.run([str(py), '-m', 'pip', 'install', '-q', '--no-deps', '--no-index', '--disable-pip-version-check',
                    str(wheel)], check=True, capture_output=True)
    return py

class Steps:
    "Run commands in the venv from an empty folder; record each step's wall and CPU seconds (children included)."
    def __init__(self, py: Path, cwd: Path):
        self.py, self.bin, self.cwd, self.times = py, py.parent, cwd, {}
        self.env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'DFLASH_NB_NBS', 'VIRTUAL_ENV')}
        self.env.update(OMP_NUM_THREADS='1', TOKENIZERS_PARALLELISM='false', HF_HUB_OFFLINE='1',
                        TRANSFORMERS_OFFLINE='1', HF_DATASETS_OFFLINE='1', PATH=f"{self.bin}:{os.environ['PATH']}")

    def __call__(self, name: str, *args, timeout: int = 900) -> str:
        r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
        r = subprocess.run([str(a) for a in args], cwd=self.cwd, env=self.env, capture_output=True, text=True,
                           timeout=timeout)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.times[name] = {'wall_s': round(time.time() - t0, 1),
                            'cpu_s': round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 1)}
        assert r.returncode == 0, f'{name}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-4000:]}'
        return r.stdout + r.stderr

    def dflash(self, name, *args, **kw): return self(name, self.bin / 'dflash-nb', *args, **kw)

@pytest.fixture(scope='module')
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('wheel')
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
    wheel = build_wheel(tmp)
    py = make_venv(tmp / 'venv', wheel)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    times = {'build + install': {'wall_s': round(time.time() - t0, 1),
                                 'cpu_s': round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 1)}}
    (tmp / 'work').mkdir()
    return Steps(py, tmp / 'work'), wheel, times

def test_the_wheel_carries_the_notebooks_and_configs(installed):
    import zipfile
    _, wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    stages = {p.name for p in (ROOT / 'nbs').glob('[0-9][0-9]_*.ipynb')}
    assert {f'dflash_nb/nbs/{n}' for n in stages} <= names
    assert {f'dflash_nb/configs/{p.name}' for p in (ROOT / 'dflash_nb' / 'configs').iterdir()} <= names

def test_the_installed_package_runs_outside_the_checkout(installed):
    run, _, build_times = installed
    where = run('import', run.py, '-c', 'import dflash_nb, dflash_nb.core as c; print(dflash_nb.__file__); '
                'print(c.nbs_dir()); print(c.repo_root())').split()
    assert where[0].startswith(str(run.py.parents[1])) and str(ROOT) not in where[0], where   # the wheel's copy
    assert where[1].startswith(str(run.py.parents[1])) and where[2] == 'None', where
    assert 'plan' in run.dflash('help', '--help')
    out = run.dflash('plan (demo)', 'plan')
    assert 'plan OK' in out and '0 rows' not in out
    out = run.dflash('run --until train', 'run', '--quiet', *smoke_sets(), '--until', 'train')
    rd = run.cwd / 'runs' / 'demo'
    assert (rd / '60_hidden_states' / 'manifest.json').exists() and not (rd / '80_train').exists(), out
    run('torchrun 2 x train', run.py, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node', '2',
        '--no-python', run.bin / 'dflash-nb', 'train', rd, rd, timeout=600)
    m = json.loads((rd / '80_train' / 'manifest.json').read_text())
    assert m['counts']['world_size'] == 2 and m['counts']['steps'] == 2
    out = run.dflash('run (rest)', 'run', rd, '--quiet')
    info = json.loads((rd / 'run.json').read_text())
    status = {s['stage']: s['status'] for s in info['stages']}
    assert status['80_train'] == 'skipped' and status['90_evaluate'] == 'ran', (status, out)
    prompts = run.cwd / 'prompts.jsonl'
    prompts.write_text('{"prompt": "Write a haiku about the sea."}\n')
    out = run.dflash('evaluate', 'evaluate', rd / '80_train' / 'drafter', '--target', 'tiny-qwen3', '--prompts', prompts,
                     '--max-new-tokens', '4', '--variants', 'trained', '--device', 'cpu', '--out', run.cwd / 'eval')
    assert (run.cwd / 'eval' / 'eval.json').exists(), out
    out = run.dflash('docs', 'docs', '--only', '03_cli', '--out', run.cwd / '_docs')
    assert (run.cwd / '_docs' / '03_cli.html').exists() and (run.cwd / '_docs' / 'index.html').exists(), out
    times = {**build_times, **run.times}
    print('\n' + '\n'.join(f"{k:<20} {v['wall_s']:>7.1f} s wall  {v['cpu_s']:>7.1f} s CPU" for k, v in times.items()))

if __name__ == '__main__':
    sys.exit(pytest.main([__file__, '-q', '-s']))
