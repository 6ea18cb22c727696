#!/usr/bin/env python
"""Prompt synthesis with and without dropping the draws that stopped (`greedy_decode(..., drop_finished=)`), the
decoding `synthesize_prompts` runs: SmolLM2 in bf16, batches of `--batch` draws from its user header, temperature 1.0
(the quality config's `synthesize_temperature`), `--max-tokens` 128, `--threads` torch threads. The two settings
alternate batch by batch with the same seeds, so load drifts hit both. Prints and writes, per setting: draws, draws
that ended (an end of turn within the cap: what synthesis can keep), their mean length, real tokens (up to the end of
turn, or the cap), decoded row-steps, wall and CPU seconds, and draws per wall second; then the ratio.

    python bench/bench_synthesize.py [--batches 2] [--batch 256] [--out bench/results/synthesize.json]
"""
import argparse, json, os, sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def one_batch(be, header, a, seed, drop):
    "Decode one batch of draws; what it made and what it cost."
    from dflash_nb.decoding import Sampler, greedy_decode
    stops = set(be.stop_ids)
    c0, t0 = time.process_time(), time.time()
    out = greedy_decode(be.model, [header] * a.batch, be.tok.pad_token_id, be.stop_ids, a.max_tokens,
                        Sampler(a.temperature, seed), drop_finished=drop)
    wall, cpu = time.time() - t0, time.process_time() - c0
    ends = [next((k + 1 for k, t in enumerate(o) if t in stops), None) for o in out]
    done = [e for e in ends if e]
    return {'drop_finished': drop, 'seed': seed, 'draws': len(out), 'ended': len(done),
            'mean_len_ended': round(sum(done) / max(len(done), 1), 1),
            'real_tokens': sum(e or a.max_tokens for e in ends), 'decoded_row_steps_full': len(out) * len(out[0]),
            'wall_s': round(wall, 1), 'cpu_s': round(cpu, 1), 'draws_per_s': round(len(out) / wall, 3),
            'first_ended': [be.tok.decode(o[:e - 1]) for o, e in zip(out, ends) if e][:3]}


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument('--batches', type=int, default=2); p.add_argument('--batch', type=int, default=256)
    p.add_argument('--max-tokens', type=int, default=128); p.add_argument('--temperature', type=float, default=1.0)
    p.add_argument('--threads', type=int, default=2)
    p.add_argument('--out', default=str(ROOT / 'bench/results/synthesize.json'))
    a = p.parse_args(argv)
    from dflash_nb.core import write_json, busy_cores
    from dflash_nb.regenerate import HFBackend, BackendOptions, user_header
    be = HFBackend('smollm2', opts=BackendOptions(device='cpu', dtype='bfloat16', batch_size=a.batch, threads=a.threads))
    header = be.tok(user_header(be.tok), add_special_tokens=False)['input_ids']
    busy, res = busy_cores(), []
    for b in range(a.batches):
        for drop in ((False, True) if b % 2 == 0 else (True, False)):
            res.append(one_batch(be, header, a, 1000 * b, drop)); print(json.dumps(res[-1]), flush=True)
    tot = {d: {k: sum(r[k] for r in res if r['drop_finished'] == d) for k in ('draws', 'ended', 'real_tokens', 'wall_s', 'cpu_s')}
           for d in (False, True)}
    ratio = round(tot[False]['wall_s'] / tot[True]['wall_s'], 3)
    print(f"| drop_finished | draws | ended | real tokens | wall s | CPU s | draws/s |\n|---|---|---|---|---|---|---|")
    for d, t in tot.items():
        print(f"| {d} | {t['draws']} | {t['ended']} | {t['real_tokens']} | {t['wall_s']:.1f} | {t['cpu_s']:.1f} | {t['draws'] / t['wall_s']:.2f} |")
    print(f'wall-clock speedup of drop_finished: {ratio}x (busy cores at the start: {busy:.2f})')
    write_json(a.out, {'model': 'smollm2', 'dtype': 'bfloat16', 'batch': a.batch, 'max_tokens': a.max_tokens,
                       'temperature': a.temperature, 'top_p': 1.0, 'threads': a.threads, 'cpu': os.cpu_count(),
                       'busy_cores_at_start': busy, 'batches': res, 'totals': tot, 'speedup_wall': ratio})


if __name__ == '__main__':
    main()
