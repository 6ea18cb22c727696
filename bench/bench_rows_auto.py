"""What `rows: auto` costs in tokenization: CPU seconds of `encode_rows` with `rows='conversation'` and `rows='auto'`,
interleaved, best of 3, on the agentic fixture rows (tests/fixtures/agentic, normalized, repeated) with Qwen3's
template and tokenizer from ../shared/fixtures, and on the same rows with their reasoning removed (nothing to split).
Prints a table and writes bench/results/rows_auto.json. Usage: python bench/bench_rows_auto.py [--repeat 20]"""
import argparse, copy, json, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'tests'))
import test_agentic as T
from dflash_nb.masks import fixture_template, fixture_tokenizer
from dflash_nb.tokenization import TokenizeOptions, encode_rows

def main(repeat: int):
    tok, tpl = fixture_tokenizer('qwen3'), fixture_template('qwen3')
    if tok is None: sys.exit('needs ../shared/fixtures (Qwen3 tokenizer and template)')
    rows = [dict(r, id=f"{r['id']}-{k}") for k in range(repeat) for r in T.agentic_rows()]
    plain = copy.deepcopy(rows)
    for r in plain:
        for m in r['messages']: m.pop('reasoning_content', None)
    res = {}
    for _ in range(3):
        for name, data in (('reasoning', rows), ('no reasoning', plain)):
            for mode in ('conversation', 'auto'):
                t = time.process_time()
                out, rej, c = encode_rows(tok, data, TokenizeOptions(chat_template=str(tpl), max_seq_len=0, rows=mode))
                r = res.setdefault(f'{name}/{mode}', {'cpu_s': [], 'rows': len(data), 'samples': len(out), 'quarantined': len(rej),
                                                     'rows_split': c['rows_split'], 'tokens': sum(o['seq_len'] for o in out),
                                                     'supervised': sum(sum(o['loss_mask']) for o in out)})
                r['cpu_s'].append(round(time.process_time() - t, 3))
    print(f"{'rows':13s} {'mode':13s} {'cpu s':>6s} {'samples':>7s} {'split':>5s} {'tokens':>7s} {'supervised':>10s}")
    for k, r in res.items():
        name, mode = k.split('/')
        print(f"{name:13s} {mode:13s} {min(r['cpu_s']):6.2f} {r['samples']:7d} {r['rows_split']:5d} {r['tokens']:7d} {r['supervised']:10d}")
    out = ROOT / 'bench' / 'results' / 'rows_auto.json'
    out.write_text(json.dumps(res, indent=1)); print(f'wrote {out.relative_to(ROOT)}')

if __name__ == '__main__':
    ap = argparse.ArgumentParser(); ap.add_argument('--repeat', type=int, default=20)
    main(ap.parse_args().repeat)
