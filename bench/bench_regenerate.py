#!/usr/bin/env python
"""Throughput of response regeneration with SmolLM2-135M-Instruct on the CPU.

In-process (`HFBackend`) at batch sizes 1, 8, 32 and 128 and through a real `transformers serve` on loopback
(`HTTPBackend`) at concurrency 1 and 8. Reports generated tokens/s and rows/s per setting and the ratio of batched
in-process generation to one row at a time; prints a table and writes bench/results/regenerate.json.

    python bench/bench_regenerate.py [--max-new-tokens 32] [--threads N] [--rows 32] [--skip-http]
    python bench/bench_regenerate.py --decoder generate --dtype bfloat16 --skip-http   # transformers' generate
    python bench/bench_regenerate.py --real runs/smollm2_quality --rows 256              # the quality run's setting

`--real RUN_DIR` measures exactly a run's regeneration: the first `--rows` rows of its `30_convert` output, with the
`regenerate:` settings of its config (mode, batch size, threads, chunk size, max_new_tokens, dtype), old against
new: the batches cut as before (filled to `batch_size` from the longest prompt; chunk size 256) and as now
(`length_buckets`' least-cost cut; the config's chunk size), interleaved `--repeats` times, in CPU-seconds and
wall-seconds, with the padded and real prefill positions; `--with-generate` adds `transformers.generate` on the old
batches. It writes bench/results/regenerate_real.json.

`--decoder auto` (the default) decodes greedy batches with the in-place loop (`greedy_decode`); `generate` uses
`transformers.generate` as the backend did before. `bench/bench_cpu_stages.py` compares the quality run's settings
end to end and `bench/roofline.py` puts them against the matmul roofline.
"""
import argparse, json, os, platform, shutil, signal, socket, subprocess, sys, time, urllib.request
from pathlib import Path

from dflash_nb.core import versions
from dflash_nb.backends import BackendOptions, GenConfig, GenRequest, HFBackend, HTTPBackend
from dflash_nb.regenerate import RegenOptions
from dflash_nb.models import resolve_target

ROOT = Path(__file__).resolve().parents[1]

def prompts(n):
    "n real instructions from the built-in alpaca demo sample (cycled when fewer)."
    rows = [json.loads(l) for l in open(ROOT / 'dflash_nb' / 'data' / 'demo_alpaca.jsonl')]
    out = []
    for r in rows:
        q = (r.get('instruction') or '') + (('\n\n' + r['input']) if r.get('input') else '')
        if q.strip(): out.append(q.strip())
    return [out[i % len(out)] for i in range(n)]

def measure(backend, reqs, gen):
    t = time.perf_counter()
    res = backend.generate(reqs, gen)
    dt = time.perf_counter() - t
    toks = sum(r.new_tokens for r in res)
    errs = [r.error for r in res if r.error]
    if errs: raise RuntimeError(f'{len(errs)} requests failed: {errs[0]}')
    return {'rows': len(reqs), 'new_tokens': toks, 'seconds': round(dt, 3), 'tokens_per_s': round(toks / dt, 2),
            'rows_per_s': round(len(reqs) / dt, 3)}

def free_port():
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]

def start_server(model_dir, threads):
    exe = shutil.which('transformers') or str(Path(sys.executable).parent / 'transformers')
    port = free_port()
    env = dict(os.environ, **({'OMP_NUM_THREADS': str(threads)} if threads else {}))
    proc = subprocess.Popen([exe, 'serve', model_dir, '--host', '127.0.0.1', '--port', str(port), '--device', 'cpu'],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    t = time.time()
    while time.time() - t < 300:
        try:
            with urllib.request.urlopen(f'http://127.0.0.1:{port}/health', timeout=2): return proc, f'http://127.0.0.1:{port}/v1'
        except OSError: time.sleep(0.5)
        if proc.poll() is not None: break
    proc.kill(); raise RuntimeError('transformers serve did not start')

def old_buckets(lengths, batch_size, max_batch_tokens=None, max_new_tokens=0, cost=None):
    "`length_buckets` before the least-cost cut: batches filled to `batch_size` from the longest prompt down."
    order, batches, cur = sorted(range(len(lengths)), key=lambda i: -lengths[i]), [], []
    too_many = lambda: max_batch_tokens and (lengths[cur[0]] + max_new_tokens) * (len(cur) + 1) > max_batch_tokens
    for i in order:
        if cur and (len(cur) >= batch_size or too_many()): batches.append(cur); cur = []
        cur.append(i)
    return batches + [cur] if cur else batches

def real(a):
    "The quality run's regeneration on its own rows: old batching against new (see the module docstring)."
    import tempfile, yaml, torch
    from dflash_nb import backends as B, decoding as D, regenerate as R
    run = Path(a.real)
    cfg = yaml.safe_load(Path(a.config or run / 'config.yaml').read_text())
    rg, tgt = cfg.get('regenerate') or {}, (cfg.get('run') or {}).get('target', 'smollm2')
    src = run / '30_convert' / 'conversations.jsonl'
    if a.first_row:     # rows first_row .. first_row + rows of the run's input
        lines = [l for l in open(src)][a.first_row:a.first_row + a.rows]
        src = Path(tempfile.mkdtemp()) / f'rows-{a.first_row}.jsonl'; src.write_text(''.join(lines))
    threads = a.threads or rg.get('threads')
    gen = GenConfig(max_new_tokens=rg.get('max_new_tokens', 128), enable_thinking=rg.get('enable_thinking'))
    be = HFBackend(tgt, opts=BackendOptions(device='cpu', dtype=rg.get('dtype'), batch_size=rg.get('batch_size', 16), threads=threads,
                                            max_batch_tokens=rg.get('max_batch_tokens')))
    ref = HFBackend(be.model, be.tok, BackendOptions(batch_size=be.batch_size, max_batch_tokens=be.max_batch_tokens), decoder='generate')
    how = dict(mode=rg.get('mode', 'all'), select=rg.get('select', 'all'), tool_turns=rg.get('tool_turns', 'keep'))
    new_bucket, loop, prefill = B.length_buckets, D.greedy_decode, {'padded': 0, 'real': 0}
    def counted(model, prompts, *args):
        prefill['padded'] += len(prompts) * max(map(len, prompts)); prefill['real'] += sum(map(len, prompts))
        return loop(model, prompts, *args)
    D.greedy_decode = counted
    settings = {'old': (be, old_buckets, 256), 'new': (be, new_bucket, rg.get('chunk_size', 256))}
    if a.with_generate: settings['generate (old batches)'] = (ref, old_buckets, 256)
    if a.only: settings = {a.only: settings[a.only]}   # one setting: run two such processes side by side
    if a.reverse: settings = dict(reversed(list(settings.items())))   # the other order: drift in the load shows
    results, texts = [], {}
    with tempfile.TemporaryDirectory() as d:
        for rep in range(a.repeats):
            for name, (backend, buckets, chunk) in settings.items():
                B.length_buckets, prefill['padded'], prefill['real'] = buckets, 0, 0
                t, c = time.perf_counter(), time.process_time()
                s = R.regenerate_file(src, Path(d) / f'{rep}-{name}.jsonl', backend, gen,
                                      RegenOptions(chunk_size=chunk, limit=a.rows, **how), progress=False)
                wall, cpu = time.perf_counter() - t, time.process_time() - c
                texts[name] = [json.loads(l)['messages'] for l in open(Path(d) / f'{rep}-{name}.jsonl')]
                r = {'setting': name, 'repeat': rep, 'rows': a.rows, 'chunk_size': chunk, 'new_tokens': s['new_tokens'],
                     'generated_turns': s['generated_turns'], 'cpu_seconds': round(cpu, 1), 'seconds': round(wall, 1),
                     'tokens_per_cpu_s': round(s['new_tokens'] / cpu, 1), 'tokens_per_s': round(s['new_tokens'] / wall, 1),
                     'prefill_positions_padded': prefill['padded'] if backend is be else None,
                     'prefill_positions_real': prefill['real'] if backend is be else None,
                     'load_avg': os.getloadavg()}
                results.append(r); print(r, flush=True)
    B.length_buckets, D.greedy_decode = new_bucket, loop
    per = lambda n: sum(r['tokens_per_cpu_s'] for r in results if r['setting'] == n) / a.repeats
    ratio = {n: round(per(n) / per('old'), 3) for n in settings} if 'old' in settings else {}
    same = {n: round(sum(x == y for x, y in zip(texts[n], texts['old'])) / max(len(texts['old']), 1), 3)
            for n in settings} if 'old' in settings else {}
    print('\n| setting | chunk | new tokens | CPU-s | wall s | tokens/CPU-s | x old | prefill padded/real |')
    print('|---|---|---|---|---|---|---|---|')
    for r in results:
        pr = f"{r['prefill_positions_padded']}/{r['prefill_positions_real']}" if r['prefill_positions_padded'] else '—'
        print(f"| {r['setting']} | {r['chunk_size']} | {r['new_tokens']} | {r['cpu_seconds']} | {r['seconds']} | "
              f"{r['tokens_per_cpu_s']} | {ratio.get(r['setting'], '—')} | {pr} |")
    info = {'what': "the quality run's regeneration on its own rows, old batching against new", 'run': str(run),
            'command': 'python bench/bench_regenerate.py ' + ' '.join(sys.argv[1:]),
            'input': str(src), 'regenerate_config': rg, 'torch_threads': torch.get_num_threads(), 'cpu_count': os.cpu_count(),
            'clock': 'process CPU time (all threads) and wall time; the machine was shared with other jobs (load_avg)',
            'ratio_tokens_per_cpu_s_vs_old': ratio, 'same_rows_as_old': same, 'versions': versions(),
            'machine': platform.machine(), 'results': results}
    out = Path(a.out if a.out != str(ROOT / 'bench' / 'results' / 'regenerate.json') else
               ROOT / 'bench' / 'results' / 'regenerate_real.json')
    out.parent.mkdir(parents=True, exist_ok=True); out.write_text(json.dumps(info, indent=2) + '\n')
    print(f'wrote {out}')

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--decoder', default='auto', choices=('auto', 'generate'), help='in-process decoding (see above)')
    ap.add_argument('--dtype', default=None, help='in-process: float32 (default) or bfloat16')
    ap.add_argument('--max-new-tokens', type=int, default=32)
    ap.add_argument('--rows', type=int, default=32, help='rows per batched setting (one-at-a-time settings use rows/4)')
    ap.add_argument('--threads', type=int, default=None, help='torch CPU threads (default: torch default)')
    ap.add_argument('--skip-http', action='store_true')
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'regenerate.json'))
    ap.add_argument('--real', default=None, metavar='RUN_DIR', help="a run folder: its own rows and regenerate settings")
    ap.add_argument('--config', default=None, help="--real: the run config to read (default: RUN_DIR/config.yaml)")
    ap.add_argument('--repeats', type=int, default=1, help='--real: old and new interleaved this many times')
    ap.add_argument('--first-row', type=int, default=0, help='--real: start at this row of the run input')
    ap.add_argument('--only', choices=('old', 'new'), default=None, help='--real: one setting only')
    ap.add_argument('--reverse', action='store_true', help='--real: run the settings in the reverse order')
    ap.add_argument('--with-generate', action='store_true', help='--real: also transformers.generate (slow)')
    a = ap.parse_args()
    if a.real: return real(a)
    gen = GenConfig(max_new_tokens=a.max_new_tokens)
    be = HFBackend('smollm2', opts=BackendOptions(device='cpu', batch_size=1, threads=a.threads, dtype=a.dtype), decoder=a.decoder)
    import torch
    ps = prompts(max(128, a.rows))
    reqs = lambda n: [GenRequest([{'role': 'user', 'content': p}]) for p in ps[:n]]
    be.batch_size = 1; be.generate(reqs(1), GenConfig(max_new_tokens=4))   # warm-up
    results = []
    for bs in (1, 8, 32, 128):
        be.batch_size = bs
        n = max(bs, a.rows // 4) if bs == 1 else max(bs, a.rows)
        r = measure(be, reqs(n), gen); r.update(setting=f'in-process batch {bs}', backend='hf', batch_size=bs)
        results.append(r); print(r, flush=True)
    if not a.skip_http:
        proc, url = start_server(resolve_target('smollm2'), a.threads)
        try:
            for c in (1, 8):
                hb = HTTPBackend(url, concurrency=c, timeout_s=600, max_retries=0)
                hb.generate(reqs(1), GenConfig(max_new_tokens=4))   # warm-up
                n = max(c, a.rows // 4) if c == 1 else max(c, a.rows // 2)
                r = measure(hb, reqs(n), gen); r.update(setting=f'http concurrency {c}', backend='http', concurrency=c)
                results.append(r); print(r, flush=True)
        finally:
            proc.send_signal(signal.SIGTERM)
            try: proc.wait(20)
            except subprocess.TimeoutExpired: proc.kill()
    one = next(r for r in results if r['setting'] == 'in-process batch 1')['tokens_per_s']
    for r in results: r['vs_one_at_a_time'] = round(r['tokens_per_s'] / one, 2) if one else None
    print(f'\n| setting | rows | new tokens | seconds | tokens/s | rows/s | x one-at-a-time |')
    print('|---|---|---|---|---|---|---|')
    for r in results:
        print(f"| {r['setting']} | {r['rows']} | {r['new_tokens']} | {r['seconds']} | {r['tokens_per_s']} | {r['rows_per_s']} | {r['vs_one_at_a_time']} |")
    info = {'model': f'smollm2 (SmolLM2-135M-Instruct, {a.dtype or "float32"})', 'decoder': a.decoder,
            'device': 'cpu', 'max_new_tokens': a.max_new_tokens,
            'torch_threads': torch.get_num_threads(), 'cpu_count': os.cpu_count(),
            'load_avg_at_end': os.getloadavg() if hasattr(os, 'getloadavg') else None,
            'versions': versions(), 'machine': platform.machine(), 'results': results}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(info, indent=2) + '\n')
    print(f'wrote {a.out}')

if __name__ == '__main__':
    main()
