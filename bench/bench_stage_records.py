"""What a chain run records, and how fast a bad parameter is refused.

    python bench/bench_stage_records.py RUN_DIR [RUN_DIR_BEFORE]   # the run folder of a finished `dflash-nb run`
    python bench/bench_stage_records.py --bad-values               # papermill on each stage notebook with a bad value

Per stage of a run folder: the wall time the chain measured (`run.json`), the cells executed and the size of the
executed notebook (the run record). With a second run folder (e.g. made by an older checkout) the two are printed
side by side as before/after. `--bad-values` runs `papermill nbs/NN_x.ipynb OUT -p KEY VALUE` on every stage with a
value outside the first declared range or choice and times how long it takes to fail. Writes
bench/results/stage_records.json (or stage_bad_values.json).
"""
import argparse, json, os, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / 'bench' / 'results'

def records(run_dir: Path) -> dict:
    "{stage: {seconds, cells, executed, kb}} of a finished run folder."
    run = json.loads((run_dir / 'run.json').read_text())
    out = {}
    for s in run['stages']:
        nb_path = run_dir / s['stage'] / f'{s["stage"]}.ipynb'
        if not nb_path.exists(): continue
        cells = json.loads(nb_path.read_text())['cells']
        executed = sum(c['cell_type'] == 'code' and 'skip-execution' not in c.get('metadata', {}).get('tags', []) for c in cells)
        out[s['stage']] = {'seconds': s.get('seconds'), 'cells': len(cells), 'executed': executed,
                           'kb': round(nb_path.stat().st_size / 1024, 1), 'status': s['status']}
    return out

def bad_value(stage) -> tuple[str, str] | None:
    "A (key, value) outside the first declared range or choice of `stage`."
    for p in stage.params.values():
        if p.choices and p.type == 'str': return p.name, 'bogus'
        if p.type == 'int' and p.lo is not None: return p.name, str(p.lo - 1 if not p.lo_open else p.lo)
    return None

def time_bad_values() -> dict:
    from dflash_nb.params import discover_stages
    res = {}
    with tempfile.TemporaryDirectory() as d:
        for st in discover_stages():
            kv = bad_value(st)
            if kv is None: continue
            t = time.time()
            r = subprocess.run([sys.executable, '-m', 'papermill', str(st.path), f'{d}/out.ipynb', '-p', *kv, '--no-progress-bar'],
                               capture_output=True, text=True, cwd=st.path.parent, env={**os.environ, 'IN_TEST': '1'})
            last = [l for l in (r.stderr + r.stdout).splitlines() if 'ConfigError' in l][-1:] or ['(no ConfigError)']
            res[st.name] = {'param': kv[0], 'value': kv[1], 'seconds': round(time.time() - t, 1), 'exit': r.returncode,
                            'message': last[0].strip()[:160]}
            print(f'{st.name:<18} {kv[0]}={kv[1]:<10} exit {r.returncode} after {res[st.name]["seconds"]:>5.1f} s  {res[st.name]["message"]}')
    return res

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('run_dir', nargs='?'); ap.add_argument('before', nargs='?')
    ap.add_argument('--bad-values', action='store_true')
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    if a.bad_values:
        res = time_bad_values()
        (OUT / 'stage_bad_values.json').write_text(json.dumps({'load_average': load, 'stages': res}, indent=1))
        sys.exit(0)
    after = records(Path(a.run_dir)); before = records(Path(a.before)) if a.before else {}
    print(f'load average {load:.1f}' + (' (loaded machine: times are upper bounds)' if load > 1.5 else ''))
    print(f'{"stage":<18} {"before s":>9} {"after s":>8} {"before cells":>13} {"after cells":>12} {"before KB":>10} {"after KB":>9}')
    for k, v in after.items():
        b = before.get(k, {})
        print(f'{k:<18} {b.get("seconds", ""):>9} {v["seconds"]:>8} {b.get("executed", ""):>13} {v["executed"]:>12} '
              f'{b.get("kb", ""):>10} {v["kb"]:>9}')
    (OUT / 'stage_records.json').write_text(json.dumps({'load_average': load, 'before': before, 'after': after}, indent=1))
