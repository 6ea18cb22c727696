"""How long `dflash-nb run my_run.yaml --rehearsal` takes on a stranger's own chat file (issue 46: under 10 minutes for 30 rows).

    python bench/bench_rehearsal.py [--rows 30] [--work /tmp/rehearsal_bench] [--label NAME] [--set KEY=VALUE ...]

Writes a fully answered chat file like the issue's (Chinese and English, 8-13 messages a row: `tests/test_own_data.py`'s
`_chats`), runs `dflash-nb new` on it for the embedded SmolLM2, then the rehearsal from an empty runs folder, and prints
each stage's seconds with what it did (answers written, rows cut, steps). Time it on an idle machine: the CPU's flags,
the load average before and after and the threads are printed beside the figures and kept in
bench/results/rehearsal[_LABEL].json.
"""
import argparse, json, os, platform, shutil, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'tests'))
from test_own_data import _chats   # the file shape, one declaration

def cpu_flags() -> str:
    "The CPU's model name and its flags that decide precision (avx2, avx512_bf16, amx_bf16)."
    info = Path('/proc/cpuinfo').read_text() if Path('/proc/cpuinfo').exists() else ''
    model = next((l.split(':', 1)[1].strip() for l in info.splitlines() if l.startswith('model name')), platform.processor())
    flags = set(next((l.split(':', 1)[1].split() for l in info.splitlines() if l.startswith('flags')), []))
    return f"{model} [{' '.join(sorted(flags & {'avx2', 'avx512f', 'avx512_bf16', 'amx_bf16', 'fma', 'f16c'}))}]"

def stage_facts(run: Path) -> dict:
    "{stage: what it did}: each stage's counts from its manifest (and regeneration's prompt tokens prefilled and reused)."
    out = {}
    for m in sorted(run.glob('*/manifest.json')):
        d = json.loads(m.read_text())
        out[m.parent.name] = json.dumps({**d.get('counts', {}), **({'prompt_tokens': d['prompt_tokens']} if d.get('prompt_tokens') else {})})
    return out

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--rows', type=int, default=30)
    ap.add_argument('--work', default='/tmp/rehearsal_bench')
    ap.add_argument('--label', default='')
    ap.add_argument('--set', dest='overrides', action='append', default=[])
    a = ap.parse_args()
    work = Path(a.work); shutil.rmtree(work, ignore_errors=True); work.mkdir(parents=True)
    _chats(work / 'my_chats.jsonl', n=a.rows)
    exe = shutil.which('dflash-nb') or str(Path(sys.executable).parent / 'dflash-nb')
    cfg, runs = work / 'my_run.yaml', work / 'runs'
    subprocess.run([exe, 'new', str(work / 'my_chats.jsonl'), '--target', 'smollm2', '--out', str(cfg)], check=True, capture_output=True)
    sets = [x for s in a.overrides for x in ('--set', s)]
    load0, t = os.getloadavg()[0], time.time()
    r = subprocess.run([exe, 'run', str(cfg), '--rehearsal', '--runs-dir', str(runs), *sets], capture_output=True, text=True)
    wall, load1 = time.time() - t, os.getloadavg()[0]
    print(r.stdout[-3000:], r.stderr[-2000:] if r.returncode else '')
    run = next(runs.glob('*_rehearsal'))
    info = json.loads((run / 'run.json').read_text())
    stages = {s['stage']: round(s.get('seconds') or 0, 1) for s in info['stages']}
    res = {'rows': a.rows, 'wall_s': round(wall, 1), 'rc': r.returncode, 'stages_s': stages, 'summaries': stage_facts(run),
           'cpu': cpu_flags(), 'cores': len(os.sched_getaffinity(0)), 'load_before': load0, 'load_after': load1,
           'overrides': a.overrides, 'threads': {s['stage']: s.get('threads') for s in info['stages']}}
    print(f"\n{'stage':<18}{'s':>8}  summary")
    for k, v in stages.items(): print(f'{k:<18}{v:>8}  {res["summaries"].get(k, "")[:110]}')
    print(f"{'wall':<18}{wall:>8.1f}  on {res['cpu']}, {res['cores']} cores, load {load0:.2f} -> {load1:.2f}")
    out = ROOT / 'bench' / 'results' / f"rehearsal{'_' + a.label if a.label else ''}.json"
    out.write_text(json.dumps(res, indent=1, ensure_ascii=False) + '\n')
    print(f'wrote {out}')
    sys.exit(r.returncode)

if __name__ == '__main__':
    main()
