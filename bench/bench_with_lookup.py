#!/usr/bin/env python
"""The trained drafter and prompt lookup verified as one tree (`trained+lookup`), beside each alone, on a finished
quality run: `evaluate_drafter` on the run's drafter with the run's own 90_evaluate settings (its manifest's
parameters: prompt sets, prompt files, max_prompts, max_new_tokens, greedy, lossless enforced), variants
`trained+lookup` only (plus plain decoding, always). Prints per set the new variant's tau next to the trained drafter's and
prompt lookup's from the run's `90_evaluate/eval.json` (the same prompts), and writes JSON (the evaluation itself: RUN/bench_with_lookup/).

    python bench/bench_with_lookup.py runs/smollm2_quality [--out bench/results/with_lookup.json]
"""
import argparse, sys
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None):
    p = argparse.ArgumentParser(); p.add_argument('run')
    p.add_argument('--out', default=str(ROOT / 'bench/results/with_lookup.json'))
    a = p.parse_args(argv)
    from dflash_nb.core import read_json, write_json, busy_cores, expand_path
    from dflash_nb.evaluate import EvalJob, EvalSettings, evaluate_drafter
    from dflash_nb.params import from_declared
    run = Path(a.run)
    P, before = read_json(run / '90_evaluate' / 'manifest.json')['params'], read_json(run / '90_evaluate' / 'eval.json')
    busy = busy_cores()
    s = from_declared(EvalSettings, {**P, 'variants': ['trained+lookup']})
    ev = evaluate_drafter(run / '80_train' / 'drafter', s,
                          EvalJob(target=P['target'], prompt_sets=P['prompt_sets'], prompt_files=[expand_path(f) for f in P['prompt_files']],
                                  out_dir=run / 'bench_with_lookup', resume=True), log=print)
    rows = []
    for name, r in ev['sets'].items():
        old = before['sets'][name]['variants']
        new = r['variants']['trained+lookup']
        rows.append({'set': name, 'prompts': new['prompts'], 'trained': old['trained']['tau'],
                     'prompt_lookup': old['prompt_lookup']['tau'], 'trained+lookup': new['tau'],
                     'identical': new['identical'], 'refeed_forwards': new['refeed_forwards'], 'cycles': new['cycles'],
                     'speedup_vs_plain': new.get('speedup')})
    print('| set | prompts | trained | prompt lookup | trained+lookup | identical | cycles re-fed |\n|---|---|---|---|---|---|---|')
    for r in rows:
        print(f"| {r['set']} | {r['prompts']} | {r['trained']:.3f} | {r['prompt_lookup']:.3f} | **{r['trained+lookup']:.3f}** | "
              f"{r['identical']:.2f} | {r['refeed_forwards']} of {r['cycles']} |")
    write_json(a.out, {'run': str(run), 'busy_cores_at_start': busy, 'settings': {k: P[k] for k in (
        'prompt_sets', 'prompt_files', 'max_prompts', 'max_new_tokens', 'temperature', 'lossless')}, 'sets': rows})


if __name__ == '__main__':
    main()
