#!/usr/bin/env python
"""The quality run's CPU settings for regeneration and feature extraction, before/after, on SmolLM2-135M-Instruct.

  * regeneration (`regenerate_file`, bfloat16 weights, batch 32, greedy): one process with 2 torch threads, two
    worker processes with 1 thread each, one process with 1 thread (the three ways to use 2 cores);
  * feature extraction (`extract_to_disk`, layers [1, 8, 14, 20, 27], 2 threads): bfloat16 against float32 compute.

    python bench/bench_cpu_stages.py [--rows 128] [--max-new-tokens 64] [--run runs/smollm2_quality] [--extract-rows 120]

Run it on an idle machine (the numbers are rates). Prints a table, writes bench/results/cpu_stages.json.
"""
import argparse, json, os, sys, tempfile, time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / 'bench'))


def regen(rows_n, max_new_tokens):
    from bench_regenerate import prompts
    from dflash_nb.core import write_jsonl
    from dflash_nb.regenerate import GenConfig, HFBackend, regenerate_file
    rows = [{'id': f'r{i}', 'source': 'bench', 'messages': [{'role': 'user', 'content': p}]} for i, p in enumerate(prompts(rows_n))]
    out = []
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / 'in.jsonl'; write_jsonl(src, rows)
        for workers, threads in ((1, 2), (2, 1), (1, 1)):
            be = HFBackend('smollm2', device='cpu', dtype='bfloat16', threads=threads, batch_size=32)
            s = regenerate_file(src, Path(d) / f'o{workers}{threads}.jsonl', be, GenConfig(max_new_tokens=max_new_tokens),
                                chunk_size=32, progress=False, workers=workers)
            r = {'stage': 'regenerate', 'setting': f'bfloat16, {workers} process(es) x {threads} thread(s), batch 32',
                 'rows': s['rows_in'], 'tokens': s['new_tokens'], 'seconds': round(s['seconds'], 1),
                 'tokens_per_s': round(s['new_tokens'] / s['seconds'], 1)}
            out.append(r); print(r, flush=True)
            torch.set_num_threads(os.cpu_count() or 1)
    return out


def extract(run, n):
    from datasets import load_from_disk
    from dflash_nb.hidden_states import extract_to_disk
    ds = load_from_disk(str(Path(run) / '50_tokenization' / 'dataset'))
    ds = ds.select(range(min(n, len(ds))))
    tokens = sum(len(x) for x in ds['input_ids'])
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    out = []
    for dt in ('float32', 'bfloat16'):
        with tempfile.TemporaryDirectory() as d:
            t = time.time()
            extract_to_disk(ds, 'smollm2', Path(d) / 'f', layer_ids=[1, 8, 14, 20, 27], device='cpu', dtype=dt,
                            max_batch_tokens=4096, max_batch_size=32, shard_mb=64, rank=0, world_size=1, progress=False)
            el = time.time() - t
        r = {'stage': 'hidden_states', 'setting': f'{dt} compute, 2 threads', 'rows': len(ds), 'tokens': tokens,
             'seconds': round(el, 1), 'tokens_per_s': round(tokens / el, 1)}
        out.append(r); print(r, flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--rows', type=int, default=128); ap.add_argument('--max-new-tokens', type=int, default=64)
    ap.add_argument('--run', default=str(ROOT / 'runs' / 'smollm2_quality')); ap.add_argument('--extract-rows', type=int, default=120)
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'cpu_stages.json'))
    a = ap.parse_args()
    res = regen(a.rows, a.max_new_tokens) + extract(a.run, a.extract_rows)
    print('\n| stage | setting | rows | tokens | seconds | tokens/s |\n|---|---|---|---|---|---|')
    for r in res: print(f"| {r['stage']} | {r['setting']} | {r['rows']} | {r['tokens']} | {r['seconds']} | {r['tokens_per_s']} |")
    from dflash_nb.core import versions
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({'cpu_count': os.cpu_count(), 'load_avg_at_end': os.getloadavg(), 'versions': versions(),
                                       'results': res}, indent=2) + '\n')
    print(f'wrote {a.out}')


if __name__ == '__main__': main()
