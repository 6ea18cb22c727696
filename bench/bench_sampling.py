#!/usr/bin/env python
"""Sampled against greedy decoding through the stage's decoding loop (`regenerate.greedy_decode` with `pick_tokens`):
the same 64 prompts of a run's `30_convert/conversations.jsonl` (their first user turn), SmolLM2 in bf16, one batch of
64, 64 new tokens, one thread; greedy, then sampled (temperature 0.7, top_p 0.95), twice each, alternating. Prints
and writes generated tokens per CPU-second (this process's `time.process_time`).

    python bench/bench_sampling.py runs/selfdistill_520_s2 [--out bench/results/sampling.json]
"""
import argparse, json, sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None):
    p = argparse.ArgumentParser(); p.add_argument('run'); p.add_argument('--out', default=str(ROOT / 'bench/results/sampling.json'))
    a = p.parse_args(argv)
    from dflash_nb.core import iter_jsonl, write_json
    from dflash_nb.regenerate import HFBackend, BackendOptions, GenConfig, GenRequest
    rows = list(iter_jsonl(Path(a.run) / '30_convert' / 'conversations.jsonl'))[:64]
    be = HFBackend('smollm2', opts=BackendOptions(device='cpu', dtype='bfloat16', batch_size=64, threads=1))
    reqs = [GenRequest(messages=[m for m in r['messages'] if m['role'] != 'assistant'][:1]) for r in rows]
    greedy, sampled = GenConfig(max_new_tokens=64), GenConfig(max_new_tokens=64, temperature=0.7, top_p=0.95)
    res = []
    for name, gen in [('greedy', greedy), ('sampled', sampled)] * 2:
        c0, t0 = time.process_time(), time.time()
        out = be.generate(reqs, gen)
        n, cpu = sum(o.new_tokens for o in out), time.process_time() - c0
        res.append({'decoding': name, 'tokens': n, 'cpu_s': round(cpu, 1), 'wall_s': round(time.time() - t0, 1),
                    'tokens_per_cpu_s': round(n / cpu, 1)})
        print(json.dumps(res[-1]), flush=True)
    write_json(a.out, {'rows': len(reqs), 'batch': 64, 'max_new_tokens': 64, 'dtype': 'bfloat16', 'threads': 1,
                       'sampled': {'temperature': 0.7, 'top_p': 0.95}, 'runs': res})


if __name__ == '__main__':
    main()
