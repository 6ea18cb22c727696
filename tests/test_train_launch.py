"Multi-process training through the CLI: `torchrun ... dflash-nb train RUN_DIR` (gloo on CPU), as on a GPU node."
import json, os, shutil, subprocess, sys
from pathlib import Path
from conftest import ROOT
from dflash_nb.drafter import load_drafter

def test_torchrun_two_processes(demo_run, tmp_path):
    run_dir, _ = demo_run
    run = tmp_path / 'run'
    for s in ('50_tokenization', '60_hidden_states'): shutil.copytree(run_dir / s, run / s)
    bindir = Path(sys.executable).parent
    cmd = [str(bindir / 'torchrun'), '--standalone', '--nproc_per_node', '2', '--no-python', str(bindir / 'dflash-nb'), 'train', str(run),
           '--set', 'train.max_steps=3', '--set', 'train.max_minutes=null', '--set', 'train.ckpt_every=2']   # no time cap: a slow CPU takes longer, never fewer steps
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900,
                       env={**os.environ, 'OMP_NUM_THREADS': '1'})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = json.loads((run / '80_train' / 'manifest.json').read_text())
    assert m['counts']['world_size'] == 2 and m['counts']['steps'] == 3
    assert m['params']['max_steps'] == 3
    drafter = load_drafter(run / '80_train' / 'drafter')
    assert sum(p.numel() for p in drafter.parameters()) > 0
