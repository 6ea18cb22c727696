#!/usr/bin/env python
"""Decoding speed, the base commit's two paths against the one library (`dflash_nb.decoding`, issue 47).

Before, regeneration had its own batched loop (`regenerate.greedy_decode`, a slab KV cache) and evaluation its own
one-prompt loop (`evaluate.plain_generate`, `TargetSession`); now both import `decoding`. Per target (the tiny seeded
`tiny-qwen3`, SmolLM2-135M in float32 as the tests load it) and batch (1, 16, 64):

- plain batched decoding, greedy and sampled (T 0.7, top_p 0.95): tokens per second of the decode steps alone,
  `B * (N - 1) / (t(N new tokens) - t(1 new token))` (the prefill subtracted), best of `--reps`;
- at batch 1 also evaluation's plain loop (`plain_generate`): the faster of the two paths is the bar for both;
- speculative decoding (`speculative_generate`): milliseconds per draft-verify cycle and tau, prompt lookup and an
  untrained DFlash drafter (block 4) on tiny-qwen3, prompt lookup on SmolLM2.

Each side runs in its own process, one torch thread, alternating old/new `--reps` times: the old one from
`git archive BASE dflash_nb` with PYTHONPATH on it, the new one from this checkout. Greedy tokens must be equal
(`same`). Writes bench/results/decoding.json.

    python bench/bench_decoding.py [--base 6ae4dd6] [--new-tokens 16] [--reps 2] [--quick]
"""
import argparse, json, os, subprocess, sys, tempfile, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]

PROMPTS = ['Say hi.', 'Name a color.', 'Write a haiku about the sea.', 'What is 2 + 2? Answer with a number.',
           'Explain how a bicycle gear system works.', 'Translate "cat" to French.', 'List three prime numbers.',
           'Describe the water cycle.']


def _api():
    "The decoding functions of whichever dflash_nb is on the path (the library, else the base commit's modules)."
    try:
        from dflash_nb import decoding as D
        return 'new', D.greedy_decode, D.plain_generate, D.speculative_generate, D.Sampler, D.PromptLookupDrafter, D.DFlashDraftSession
    except ImportError:
        from dflash_nb import regenerate as R, evaluate as E
        return 'old', R.greedy_decode, E.plain_generate, E.speculative_generate, E.Sampler, E.PromptLookupDrafter, E.DFlashDraftSession


def _sampled(side, greedy_decode, Sampler, model, ps, n):
    if side == 'new': return greedy_decode(model, ps, 0, [], n, Sampler(0.7, 0, 0.95))
    return greedy_decode(model, ps, 0, [], n, 0.7, 0.95, 0)


def worker(spec: str, batches: list, n: int, quick: bool) -> dict:
    "Time this process's dflash_nb on target `spec`; the measurements as a dict."
    import torch
    torch.set_num_threads(1); torch.manual_seed(0)
    from dflash_nb.models import load_target
    side, greedy_decode, plain_generate, speculative_generate, Sampler, Lookup, DraftSession = _api()
    model, tok = load_target(spec, device='cpu', dtype='float32')
    if tok.chat_template:
        text = [tok.apply_chat_template([{'role': 'user', 'content': p}], add_generation_prompt=True, tokenize=False) for p in PROMPTS]
        base = [tok(t, add_special_tokens=False)['input_ids'] for t in text]
    else: base = [[(7 * i + 13 * j) % 1000 + 5 for j in range(12 + 3 * i)] for i in range(len(PROMPTS))]
    out = {'side': side, 'target': spec, 'plain': [], 'spec': []}
    def clock(f):
        t0 = time.perf_counter(); r = f(); return time.perf_counter() - t0, r
    for B in batches:
        ps = [base[i % len(base)] for i in range(B)]
        for kind in ('greedy', 'sampled') if B > 1 else ('greedy',):
            run = (lambda k: greedy_decode(model, ps, 0, [], k)) if kind == 'greedy' else \
                  (lambda k: _sampled(side, greedy_decode, Sampler, model, ps, k))
            t1, _ = clock(lambda: run(1)); tn, toks = clock(lambda: run(n))
            out['plain'].append({'path': 'greedy_decode', 'kind': kind, 'batch': B, 'prefill_s': round(t1, 3),
                                 'decode_tok_s': round(B * (n - 1) / max(tn - t1, 1e-9), 1), 'tokens': toks})
        if B == 1:
            t1, _ = clock(lambda: plain_generate(model, ps[0], 1)); tn, g = clock(lambda: plain_generate(model, ps[0], n))
            out['plain'].append({'path': 'plain_generate', 'kind': 'greedy', 'batch': 1, 'prefill_s': round(t1, 3),
                                 'decode_tok_s': round((n - 1) / max(tn - t1, 1e-9), 1), 'tokens': [g.tokens]})
    rep = base[2] + base[2][-6:] * 2                   # a prompt that repeats itself: prompt lookup accepts
    drafters = {'prompt_lookup': Lookup(block_size=4)}
    if spec.startswith('tiny') and not quick:
        from dflash_nb.drafter import DFlashDrafter, build_config
        cfg = build_config(model.config, mask_token_id=0, num_hidden_layers=1, block_size=4, target_layer_ids=[0, 2])
        drafters['dflash_untrained'] = DraftSession(DFlashDrafter(cfg).init_weights(0).eval(), model.get_input_embeddings(),
                                                    model.get_output_embeddings())
    for name, dr in drafters.items():
        g = speculative_generate(model, dr, rep, 4 * n)
        out['spec'].append({'drafter': name, 'cycles': len(g.accept_lengths), 'tau': round(g.tau, 3),
                            'ms_per_cycle': round(1000 * (g.seconds - g.prefill_seconds) / max(len(g.accept_lengths), 1), 2),
                            'tokens': [g.tokens]})
    return out


def base_tree(base: str) -> Path:
    "The base commit's package, unpacked once (git archive) under the temp folder."
    d = Path(tempfile.gettempdir()) / f'dflash_nb_base_{base}'
    if not (d / 'dflash_nb' / 'regenerate.py').exists():
        d.mkdir(parents=True, exist_ok=True)
        tar = subprocess.run(['git', '-C', str(ROOT), 'archive', base, 'dflash_nb'], capture_output=True, check=True).stdout
        subprocess.run(['tar', '-x', '-C', str(d)], input=tar, check=True)
    return d


def run_side(path: Path, spec: str, a) -> dict:
    env = {**os.environ, 'PYTHONPATH': str(path), 'OMP_NUM_THREADS': '1'}
    code = (f'import json, sys; sys.path.insert(0, {str(ROOT / "bench")!r}); import bench_decoding as b; '
            f'print("RESULT" + json.dumps(b.worker({spec!r}, {a.batches!r}, {a.new_tokens}, {a.quick})))')
    r = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if r.returncode: raise RuntimeError(r.stderr[-3000:])
    return json.loads(r.stdout[r.stdout.index('RESULT') + 6:])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--base', default='6ae4dd6'); p.add_argument('--new-tokens', type=int, default=16)
    p.add_argument('--reps', type=int, default=2); p.add_argument('--targets', nargs='+', default=['tiny-qwen3', 'smollm2'])
    p.add_argument('--batches', type=int, nargs='+', default=[1, 16, 64]); p.add_argument('--quick', action='store_true')
    p.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'decoding.json'))
    a = p.parse_args(argv)
    old_path, best = base_tree(a.base), {}
    t0 = time.time()
    for spec in a.targets:
        for rep in range(a.reps):
            for side, path in (('old', old_path), ('new', ROOT)):
                r = run_side(path, spec, a)
                for m in r['plain']:
                    k = (spec, 'plain', m['path'], m['kind'], m['batch'], side)
                    if k not in best or m['decode_tok_s'] > best[k]['decode_tok_s']: best[k] = m
                for m in r['spec']:
                    k = (spec, 'spec', m['drafter'], '', 0, side)
                    if k not in best or m['ms_per_cycle'] < best[k]['ms_per_cycle']: best[k] = m
    rows = []
    for (spec, what, path, kind, B, side), m in sorted(best.items()):
        if side != 'new': continue
        o = best[(spec, what, path, kind, B, 'old')]
        row = {'target': spec, 'what': what, 'path': path, 'kind': kind, 'batch': B, 'same_tokens': m['tokens'] == o['tokens']}
        if what == 'plain': row.update(old_tok_s=o['decode_tok_s'], new_tok_s=m['decode_tok_s'])
        else: row.update(old_ms_cycle=o['ms_per_cycle'], new_ms_cycle=m['ms_per_cycle'], tau_old=o['tau'], tau_new=m['tau'])
        rows.append(row)
    print(f"{'target':<11} {'path':<17} {'kind':<8} {'batch':>5} {'old':>9} {'new':>9}  unit     same")
    for r in rows:
        old, new, unit = (r['old_tok_s'], r['new_tok_s'], 'tok/s') if r['what'] == 'plain' else (r['old_ms_cycle'], r['new_ms_cycle'], 'ms/cycle')
        print(f"{r['target']:<11} {r['path']:<17} {r['kind']:<8} {r['batch'] or '':>5} {old:>9} {new:>9}  {unit:<8} {r['same_tokens']}"
              + (f"  tau {r['tau_old']} -> {r['tau_new']}" if r['what'] == 'spec' else ''))
    cpu = next((l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')), '?')
    flags = set(next((l.split(':', 1)[1].split() for l in open('/proc/cpuinfo') if l.startswith('flags')), []))
    res = {'base': a.base, 'new_tokens': a.new_tokens, 'reps': a.reps, 'threads': 1, 'dtype': 'float32', 'cpu': cpu,
           'cpu_flags': sorted(flags & {'avx2', 'fma', 'f16c', 'avx512f', 'avx512_bf16', 'amx_bf16'}), 'cores': os.cpu_count(),
           'loadavg_at_end': open('/proc/loadavg').read().split()[:3], 'seconds': round(time.time() - t0, 1), 'rows': rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True); Path(a.out).write_text(json.dumps(res, indent=1) + '\n')
    print(f"wrote {a.out} ({res['seconds']} s; {cpu}, {' '.join(res['cpu_flags'])}, {res['cores']} cores, load {res['loadavg_at_end']})")


if __name__ == '__main__':
    main()
