#!/usr/bin/env python
"""Conversion throughput and peak memory on a generated canonical corpus (10k vs 100k rows).

    python bench/bench_convert.py [--sizes 10000 100000] [--workdir /tmp/bench_convert] [--out bench_convert.json]

Each size runs `dflash_nb.convert.convert_file` in a fresh subprocess; peak memory is the child's max RSS
(`resource.getrusage`), reported with its RSS before converting, so the growth attributable to the conversion is
visible. Memory must not grow with the corpus: the only per-row state kept is a 16-byte id hash. Times are CPU
seconds of the child (`time.process_time`), so other jobs on a shared machine do not inflate them. The repairs are
the defaults (format-only); the corpus has 1 % rows with an unknown role, quarantined with `map_unknown_roles` as the
repair that would keep them (`needs_opt_in`).
Writes bench/results/bench_convert.json.
"""
import argparse, json, os, random, resource, subprocess, sys, time
from pathlib import Path

WORDS = ('alpha beta gamma delta tensor drafter token block target verify accept reject sample prompt answer '
         'weather city flight price stock python function error file line commit').split()

def text(rng, lo, hi): return ' '.join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))

def gen_row(i, rng):
    msgs = []
    if rng.random() < 0.3: msgs.append({'role': 'system', 'content': text(rng, 5, 20)})
    msgs.append({'role': 'user', 'content': text(rng, 10, 80)})
    row = {'id': f'gen/{i}', 'source': rng.choice(['gen-a', 'gen-b', 'gen-c'])}
    for _ in range(rng.randint(0, 3)):
        if rng.random() < 0.3:
            args = {'q': text(rng, 1, 4), 'n': rng.randint(0, 99)}
            msgs.append({'role': 'assistant', 'content': '', 'tool_calls': [{'id': 'c0', 'type': 'function',
                         'function': {'name': 'search', 'arguments': json.dumps(args) if rng.random() < 0.5 else args}}]})
            msgs.append({'role': 'tool', 'tool_call_id': 'c0', 'content': text(rng, 5, 40)})
            row['tools'] = [{'type': 'function', 'function': {'name': 'search', 'parameters': {'type': 'object', 'properties': {'q': {'type': 'string'}}}}}]
        msgs.append({'role': 'assistant', 'content': text(rng, 20, 200)})
        if rng.random() < 0.5: msgs.append({'role': 'user', 'content': text(rng, 5, 40)})
    if rng.random() < 0.01: msgs.append({'role': 'narrator', 'content': 'bad'})     # 1 % malformed
    row['messages'] = msgs
    return row

def make_corpus(path, n, seed=0):
    rng = random.Random(seed)
    with open(path, 'w') as f:
        for i in range(n): f.write(json.dumps(gen_row(i, rng)) + '\n')

CHILD = r'''
import json, resource, sys, time
from dflash_nb.convert import ConvertOptions, convert_file
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.process_time()
c = convert_file(sys.argv[1], sys.argv[2], ConvertOptions(max_chars=None))
dt = time.process_time() - t
print(json.dumps({'seconds': dt, 'rss_before_kb': rss0, 'rss_peak_kb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  'rows_in': c['rows_in'], 'rows_out': c['rows_out'], 'quarantined': c['quarantined'], 'repairs': c['repairs'],
                  'needs_opt_in': c.get('needs_opt_in')}))
'''

def main():
    ap = argparse.ArgumentParser(); ap.add_argument('--sizes', type=int, nargs='+', default=[10_000, 100_000])
    ap.add_argument('--workdir', default='/tmp/bench_convert'); ap.add_argument('--out', default='bench_convert.json'); a = ap.parse_args()
    wd = Path(a.workdir); wd.mkdir(parents=True, exist_ok=True)
    res = []
    for n in a.sizes:
        corpus = wd / f'corpus_{n}.jsonl'
        if not corpus.exists(): make_corpus(corpus, n)
        out = subprocess.run([sys.executable, '-c', CHILD, str(corpus), str(wd / f'out_{n}')], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        r.update(rows=n, corpus_mb=round(corpus.stat().st_size / 2**20, 1), rows_per_s=round(n / r['seconds']),
                 mb_per_s=round(corpus.stat().st_size / 2**20 / r['seconds'], 2),
                 growth_mb=round((r['rss_peak_kb'] - r['rss_before_kb']) / 1024, 1), peak_mb=round(r['rss_peak_kb'] / 1024, 1))
        assert r['rows_in'] == r['rows_out'] + r['quarantined'] == n
        res.append(r)
    print(f'{"rows":>8} {"corpus MB":>10} {"CPU s":>8} {"rows/s":>8} {"MB/s":>6} {"peak RSS MB":>12} {"growth MB":>10} {"quarantined":>11}')
    for r in res:
        print(f'{r["rows"]:>8} {r["corpus_mb"]:>10} {r["seconds"]:>8.2f} {r["rows_per_s"]:>8} {r["mb_per_s"]:>6} {r["peak_mb"]:>12} {r["growth_mb"]:>10} {r["quarantined"]:>11}')
    if len(res) > 1:
        print(f'peak RSS ratio {res[-1]["rows"] // res[0]["rows"]}x rows: {res[-1]["peak_mb"] / res[0]["peak_mb"]:.2f}x')
    out = Path(__file__).resolve().parent / 'results' / a.out
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({'date': time.strftime('%Y-%m-%d %H:%M'), 'cpu_count': os.cpu_count(), 'clock': 'process_time', 'results': res}, indent=1) + '\n')
    print('wrote', out)

if __name__ == '__main__': main()
