#!/usr/bin/env python
"""The training-free baseline: prompt lookup (n-gram drafts from prompt + output) on SmolLM2's greedy outputs.

    python bench/bench_prompt_lookup.py                          # MT-Bench + HumanEval fixtures, 8 prompts each, 64 tokens
    python bench/bench_prompt_lookup.py --prompts FILE --max-new-tokens 256 --block-size 8

A trained drafter has to clearly beat these numbers to be worth serving. Runs the same loop and metrics as
`90_evaluate` (plain decoding as the reference, losslessness checked, the two decoded back to back on each prompt in
an order rotated from prompt to prompt); prints a table and writes JSON to bench/results/prompt_lookup_<target>.json.
The speedup is the median over prompts of the per-prompt ratio, with its interquartile range and range, and the
timing verdict of `verdicts.timing_verdict` (faster / slower / within noise / contradicts forwards/token). CPU
wall-clock speedups on a shared machine are indicative only; tau and target forwards per token are what carry over.
CPU-seconds of the process are reported beside the wall time.
"""
import argparse, json, os, platform, time
from pathlib import Path
import torch

from dflash_nb.core import fixtures_dir, prompt_set_name
from dflash_nb.evaluate import Bookkeeping, EvalGeneration, PromptLookupDrafter, evaluate_prompts, load_prompt_file
from dflash_nb.verdicts import summarize
from dflash_nb.models import load_target


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--target', default='smollm2')
    ap.add_argument('--prompts', action='append', default=[])
    ap.add_argument('--max-prompts', type=int, default=8)
    ap.add_argument('--max-new-tokens', type=int, default=64)
    ap.add_argument('--block-size', type=int, default=16)
    ap.add_argument('--max-ngram', type=int, default=2)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--out', default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    files = a.prompts
    if not files:
        fx = fixtures_dir()
        if fx is None: raise SystemExit('no --prompts and no fixtures (DFLASH_NB_FIXTURES)')
        files = [fx / 'data' / 'eval' / 'mt_bench_questions.jsonl', fx / 'data' / 'eval' / 'HumanEval.jsonl.gz']
    model, tok = load_target(a.target, device='cpu')
    rows = []
    for f in files:
        items, _ = load_prompt_file(f, a.max_prompts)
        for it in items:
            if 'turns' in it: it['turns'] = it['turns'][:1]
        t, cpu = time.time(), time.process_time()
        gens = evaluate_prompts(model, tok, items, {'prompt_lookup': (PromptLookupDrafter(a.block_size, a.max_ngram), 0)},
                                EvalGeneration(max_new_tokens=a.max_new_tokens, temperature=0.0, seed=0, enable_thinking=False, lossless='enforce'),
                                set_name=prompt_set_name(f), book=Bookkeeping(log=None))
        m = summarize(gens['prompt_lookup'], gens['plain'], a.block_size)
        rows.append({'set': prompt_set_name(f), 'prompts': m['prompts'], 'tokens': m['tokens'], 'tau': m['tau'],
                     'accept_at_1': m['accept_at'][0], 'fwd_per_token': m['target_forwards_per_token'],
                     'plain_tok_s': m['plain_tokens_per_s'], 'tok_s': m['tokens_per_s'], 'speedup': m['speedup'],
                     'speedup_iqr': m['speedup_iqr'], 'speedup_range': m['speedup_range'],
                     'speedup_bound': m['speedup_bound'], 'timing': m['timing'], 'identical': m['identical'],
                     'seconds': round(time.time() - t, 1), 'cpu_seconds': round(time.process_time() - cpu, 1)})
    cols = list(rows[0])
    print('| ' + ' | '.join(cols) + ' |'); print('|' + '---|' * len(cols))
    for r in rows: print('| ' + ' | '.join(str(r[c]) for c in cols) + ' |')
    out = Path(a.out or Path(__file__).parent / 'results' / f'prompt_lookup_{a.target}.json')
    out.parent.mkdir(parents=True, exist_ok=True)
    load = [round(x, 2) for x in os.getloadavg()]          # other jobs on the machine while it ran
    out.write_text(json.dumps({'args': {k: str(v) for k, v in vars(a).items()}, 'platform': platform.platform(),
                               'torch': torch.__version__, 'loadavg_at_end': load, 'results': rows}, indent=2))
    print(f'wrote {out}')


if __name__ == '__main__':
    main()
