#!/usr/bin/env python
"""The quality run's CPU settings for regeneration and feature extraction, before/after, on SmolLM2-135M-Instruct.

  * regeneration (`regenerate_file`, greedy, in `--dtype`: default `auto`, resolved by
    `dflash_nb.precision.choose_dtype` -- bfloat16 where this CPU computes it natively and faster, else float32), the
    same rows each time:
      before: `transformers.generate`, batch 32, chunks of 32 rows, one process x 2 threads (the quality config of
              the first full run);
      after:  the in-place decoding loop, batch 128 from chunks of 256 rows sorted by prompt length, one process x 2
              threads; the same at batch 64; two worker processes x 1 thread, batch 64 from chunks of 64;
  * feature extraction (`extract_to_disk`, layers [1, 8, 14, 20, 27], 2 threads): bfloat16 against float32 compute
    (needs a finished quality run's tokenized dataset: `--run`; skipped when it is missing).

    python bench/bench_cpu_stages.py [--rows 256] [--max-new-tokens 128] [--dtype auto] [--run runs/smollm2_quality] [--extract-rows 120]

Run it on an idle machine (the numbers are rates; the load average is recorded). Prints a table, writes
bench/results/cpu_stages.json. `bench/roofline.py` puts the same stages against the matmul roofline.

The CPU it ran on is recorded (`dflash_nb.precision.machine('cpu')`: model, flags, torch's kernel level, threads), with
`precision.probe('cpu')`'s measured matmul rates (float32, bfloat16, float16 GFLOP/s; taken at the stages' 2 threads).
Each stage's achieved GFLOP/s is set against them: `frac_fp32` and `frac_bf16` are that rate over this machine's
measured float32 and bfloat16 matmul rates. The FLOPs are an estimate, 2 x the model's parameter count per token
(a forward's multiply-adds; the embedding lookup counted as if it were a product, attention's score products left
out): per *generated* token for regeneration (the prompts' prefill is not counted, so its fraction is a lower bound),
per token of every row for extraction (which skips the LM head, so there it is an upper bound).
"""
import argparse, json, os, sys, tempfile, time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / 'bench'))


SETTINGS = [   # label, HFBackend kwargs, regenerate_file kwargs
    ('before: generate, batch 32, chunk 32, 1 process x 2 threads', dict(decoder='generate', batch_size=32, threads=2),
     dict(chunk_size=32, workers=1)),
    ('after: loop, batch 128, chunk 256, 1 process x 2 threads', dict(batch_size=128, threads=2), dict(chunk_size=256, workers=1)),
    ('after: loop, batch 64, chunk 256, 1 process x 2 threads', dict(batch_size=64, threads=2), dict(chunk_size=256, workers=1)),
    ('after: loop, batch 64, chunk 64, 2 processes x 1 thread', dict(batch_size=64, threads=1), dict(chunk_size=64, workers=2)),
]


def model_params(spec: str = 'smollm2') -> int:
    "The target's parameter count (tied weights once), from its config on the meta device: nothing loaded."
    from transformers import AutoConfig, AutoModelForCausalLM
    from dflash_nb.models import resolve_target
    with torch.device('meta'): m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(resolve_target(spec)))
    return sum(p.numel() for p in m.parameters())


def add_rates(r: dict, params: int, gflops: dict) -> dict:
    "`r` with its achieved GFLOP/s (2 x params per token) and the fractions of the machine's float32 and bf16 matmul rates."
    g = 2 * params * r['tokens_per_s'] / 1e9   # tokens/s: from the unrounded seconds
    return {**r, 'gflops': round(g, 2), 'frac_fp32': round(g / gflops['float32'], 4) if gflops.get('float32') else None,
            'frac_bf16': round(g / gflops['bfloat16'], 4) if gflops.get('bfloat16') else None}


def regen(rows_n, max_new_tokens, dtype, only=None):
    from bench_regenerate import prompts
    from dflash_nb.core import iter_jsonl, write_jsonl
    from dflash_nb.regenerate import BackendOptions, GenConfig, HFBackend, RegenOptions, regenerate_file
    rows = [{'id': f'r{i}', 'source': 'bench', 'messages': [{'role': 'user', 'content': p}]} for i, p in enumerate(prompts(rows_n))]
    out, texts = [], {}
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / 'in.jsonl'; write_jsonl(src, rows)
        for k, (label, bkw, fkw) in enumerate(SETTINGS):
            if only and k not in only: continue
            bkw = dict(bkw); decoder = bkw.pop('decoder', 'auto')
            be = HFBackend('smollm2', opts=BackendOptions(device='cpu', dtype=dtype, **bkw), decoder=decoder)
            s = regenerate_file(src, Path(d) / f'o{k}.jsonl', be, GenConfig(max_new_tokens=max_new_tokens),
                                RegenOptions(mode='final', select='all', **fkw), progress=False)
            texts[k] = [r['messages'][-1]['content'] for r in iter_jsonl(Path(d) / f'o{k}.jsonl')]
            r = {'stage': 'regenerate', 'setting': label, 'dtype': dtype, 'rows': s['rows_in'], 'tokens': s['new_tokens'],
                 'seconds': round(s['seconds'], 1), 'tokens_per_s': round(s['new_tokens'] / s['seconds'], 1),
                 'same_text_as_first': round(sum(a == b for a, b in zip(texts[k], next(iter(texts.values())))) / len(rows), 3)}
            out.append(r); print(r, flush=True)
            torch.set_num_threads(os.cpu_count() or 1)
    return out


def extract(run, n):
    from datasets import load_from_disk
    from dflash_nb.hidden_states import ExtractOptions, extract_to_disk
    ds = load_from_disk(str(Path(run) / '50_tokenization' / 'dataset'))
    ds = ds.select(range(min(n, len(ds))))
    tokens = sum(len(x) for x in ds['input_ids'])
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    out = []
    for dt in ('float32', 'bfloat16'):
        with tempfile.TemporaryDirectory() as d:
            t = time.time()
            opts = ExtractOptions(layer_ids=[1, 8, 14, 20, 27], device='cpu', dtype=dt, max_batch_tokens=4096,
                                  max_batch_size=32, shard_mb=64, label_topk=0)
            extract_to_disk(ds, 'smollm2', Path(d) / 'f', opts, ranks=(0, 1), progress=False)
            el = time.time() - t
        r = {'stage': 'hidden_states', 'setting': f'{dt} compute, 2 threads', 'dtype': dt, 'rows': len(ds), 'tokens': tokens,
             'seconds': round(el, 1), 'tokens_per_s': round(tokens / el, 1)}
        out.append(r); print(r, flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--rows', type=int, default=256); ap.add_argument('--max-new-tokens', type=int, default=128)
    ap.add_argument('--dtype', default='auto', choices=('auto', 'float32', 'bfloat16', 'float16'),
                    help="regeneration's compute dtype; auto: dflash_nb.precision.choose_dtype's measured choice for this CPU")
    ap.add_argument('--settings', default=None, help='comma-separated indices of SETTINGS to run (default: all)')
    ap.add_argument('--run', default=str(ROOT / 'runs' / 'smollm2_quality')); ap.add_argument('--extract-rows', type=int, default=120)
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'cpu_stages.json'))
    a = ap.parse_args()
    from dflash_nb.precision import choose_dtype, machine, probe
    load0 = os.getloadavg()
    threads0 = torch.get_num_threads()
    torch.set_num_threads(min(2, os.cpu_count() or 1))   # the rates the stages' 2 threads can reach
    cpu, pr = machine('cpu'), probe('cpu')
    dtype = choose_dtype(a.dtype, 'cpu')
    torch.set_num_threads(threads0)
    rates = pr['gflops']
    print(f"CPU: {cpu['name']} [{' '.join(cpu.get('flags', []))}], torch {cpu.get('capability')}, {cpu['threads']} threads: matmul "
          + ', '.join(f'{k} {v} GFLOP/s' for k, v in rates.items()) + f'; --dtype {a.dtype} -> {dtype}', flush=True)
    params = model_params('smollm2')
    only = {int(x) for x in a.settings.split(',')} if a.settings else None
    res = regen(a.rows, a.max_new_tokens, dtype, only)
    if (Path(a.run) / '50_tokenization' / 'dataset').exists(): res += extract(a.run, a.extract_rows)
    else: print(f'no tokenized dataset in {a.run}: feature extraction skipped')
    res = [add_rates(r, params, rates) for r in res]
    print(f"\nFLOPs: 2 x {params:,} parameters per token (generated tokens for regeneration, every token for extraction); "
          f"fractions of this CPU's measured matmul rates: float32 {rates['float32']}, bfloat16 {rates['bfloat16']} GFLOP/s")
    print('\n| stage | setting | dtype | rows | tokens | seconds | tokens/s | GFLOP/s | of fp32 matmul | of bf16 matmul |\n'
          '|---|---|---|---|---|---|---|---|---|---|')
    for r in res: print(f"| {r['stage']} | {r['setting']} | {r['dtype']} | {r['rows']} | {r['tokens']} | {r['seconds']} | {r['tokens_per_s']} "
                        f"| {r['gflops']} | {r['frac_fp32']} | {r['frac_bf16']} |")
    from dflash_nb.core import versions
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    print(f'load average (1 min): {load0[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end, {os.cpu_count()} cores')
    Path(a.out).write_text(json.dumps({'cpu_count': os.cpu_count(), 'load_avg_at_start': load0, 'load_avg_at_end': os.getloadavg(), 'versions': versions(),
                                       'machine': cpu, 'probe': {k: pr[k] for k in ('gflops', 'ratio', 'native', 'forced', 'seconds') if k in pr},
                                       'dtype': {'asked': a.dtype, 'chosen': dtype}, 'params': params,
                                       'flops': '2 x params per token: generated tokens (regeneration), every token (extraction)',
                                       'results': res}, indent=2) + '\n')
    print(f'wrote {a.out}')


if __name__ == '__main__': main()
