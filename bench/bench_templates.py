#!/usr/bin/env python
"""Speed of the exact assistant masks (dflash_nb.masks.assistant_masks) against the raw batched tokenizer.

For each tokenizer/template (SmolLM2 always; Qwen3.6 and Qwen3 from ../shared/fixtures when present), on the same
canonical rows (real multi-turn and tool-calling conversations from the fixtures, else a generated set), measures
  raw      : batched `tokenizer(texts)` on the already-rendered texts (the floor: no rendering, no masks)
  render   : rendering every row once with the chat template (no tokenization)
  prefix   : `assistant_masks(..., method='prefix')` (1 + #assistant renders per row, verified boundaries)
  locate   : `assistant_masks(..., method='locate')` (1 render per row)
  check    : the share of `locate` spent checking that each rendered turn holds what its message holds
             (tool calls, content, reasoning: `masks._check_kept`), when the package has that check
and prints tokens per CPU-second and the ratio to `raw`. Times are CPU seconds of this process (`time.process_time`,
all its threads), the best of `--repeat`, so a machine shared with other jobs does not inflate them.

    python bench/bench_templates.py [--rows 2000] [--repeat 3] [--out templates.json]

Writes bench/results/templates.json (or `--out`).
"""
import argparse, json, platform, random, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

def fixture_rows(n):
    from dflash_nb.core import fixtures_dir
    fx = fixtures_dir()
    rows = []
    if fx is not None:
        sg = json.loads((fx / 'data/multiturn/sharegpt_dummy_conversation.json').read_text())
        roles = {'human': 'user', 'gpt': 'assistant'}
        for r in sg:
            msgs = [{'role': roles.get(t['from'], 'user'), 'content': t['value']} for t in r['conversations']]
            if any(m['role'] == 'assistant' for m in msgs): rows.append({'messages': msgs})
        alp = json.loads((fx / 'data/general/alpaca_en_demo.json').read_text())
        for r in alp:
            rows.append({'messages': [{'role': 'user', 'content': r['instruction'] + ('\n\n' + r['input'] if r['input'] else '')},
                                      {'role': 'assistant', 'content': r['output']}]})
    else:
        rnd = random.Random(0)
        words = 'the a of to and in is it that for on with as this be by data model value list function'.split()
        for _ in range(n):
            msgs = []
            for _ in range(rnd.randint(1, 4)):
                msgs += [{'role': 'user', 'content': ' '.join(rnd.choices(words, k=rnd.randint(5, 60)))},
                         {'role': 'assistant', 'content': ' '.join(rnd.choices(words, k=rnd.randint(20, 300)))}]
            rows.append({'messages': msgs})
    random.Random(0).shuffle(rows)
    while len(rows) < n: rows += rows[:n - len(rows)]
    return rows[:n]

def best(fn, repeat):
    "The least CPU time of `repeat` runs of `fn`, and its result."
    ts = []
    for _ in range(repeat):
        t = time.process_time(); out = fn(); ts.append(time.process_time() - t)
    return min(ts), out

def check_share(tok, tpl, rows, repeat):
    "CPU seconds spent in the content check over all rows, and its share of `locate`'s total (None without the check)."
    import dflash_nb.masks as T
    if not hasattr(T, '_check_kept'): return None
    r = T.as_renderer(tok, tpl)
    f = T.template_features(r)
    located = []
    for x in rows:
        try: located.append((x['messages'], *T.locate_turns(r, x['messages'], x.get('tools'), method='locate')))
        except T.MaskError: pass
    t, _ = best(lambda: [T._check_kept(m, text, turns, f) for m, text, turns in located], repeat)
    return t

def main():
    ap = argparse.ArgumentParser(); ap.add_argument('--rows', type=int, default=2000); ap.add_argument('--repeat', type=int, default=3)
    ap.add_argument('--out', default='templates.json')
    a = ap.parse_args()
    from dflash_nb.models import load_tokenizer
    from dflash_nb.masks import assistant_masks, as_renderer, fixture_tokenizer, fixture_template
    rows = fixture_rows(a.rows)
    cases = [('smollm2', load_tokenizer('smollm2'), None)]
    if fixture_tokenizer('qwen3_6') is not None:
        cases += [('qwen3_6', fixture_tokenizer('qwen3_6'), str(fixture_template('qwen3_6'))),
                  ('qwen3', fixture_tokenizer('qwen3'), None)]
    results, lines = [], []
    for name, tok, tpl in cases:
        r = as_renderer(tok, tpl)
        t_render, texts = best(lambda: [r.render(x['messages']) for x in rows], a.repeat)
        t_raw, enc = best(lambda: tok(texts, add_special_tokens=False), a.repeat)
        ntok = sum(len(x) for x in enc['input_ids'])
        res = {'case': name, 'rows': len(rows), 'tokens': ntok, 'raw_tok_s': ntok / t_raw, 'render_rows_s': len(rows) / t_render}
        for method in ('prefix', 'locate'):
            t, out = best(lambda: assistant_masks(tok, rows, tpl, method=method), a.repeat)
            errs = sum('error' in o for o in out)
            res[f'{method}_tok_s'] = ntok / t; res[f'{method}_ratio'] = t_raw / t; res[f'{method}_errors'] = errs
            res[f'{method}_cpu_s'] = t
        t_check = check_share(tok, tpl, rows, a.repeat)
        res['check_cpu_s'] = t_check
        res['check_share_of_locate'] = None if t_check is None else t_check / res['locate_cpu_s']
        results.append(res)
        share = '     -' if t_check is None else f"{100 * res['check_share_of_locate']:>5.1f}%"
        lines.append(f"{name:<10} {len(rows):>6} {ntok:>9} {res['raw_tok_s']:>12,.0f} {res['prefix_tok_s']:>12,.0f} "
                     f"{res['prefix_ratio']:>6.2f} {res['locate_tok_s']:>12,.0f} {res['locate_ratio']:>6.2f} {res['prefix_errors']:>5} {share}")
    print(f"{'case':<10} {'rows':>6} {'tokens':>9} {'raw tok/s':>12} {'prefix tok/s':>12} {'ratio':>6} {'locate tok/s':>12} "
          f"{'ratio':>6} {'errs':>5} {'check':>6}   (tokens per CPU-second)")
    print('\n'.join(lines))
    out = ROOT / 'bench' / 'results' / a.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({'platform': platform.platform(), 'python': platform.python_version(), 'clock': 'process_time',
                               'package': str(Path(sys.modules['dflash_nb'].__file__).parent), 'results': results}, indent=2) + '\n')
    print('wrote', out)

if __name__ == '__main__':
    main()
