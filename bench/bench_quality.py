#!/usr/bin/env python
"""What the quality run's drafter buys: reads a finished run of configs/smollm2_quality.yaml and reports

  * tau against training tokens: every kept checkpoint of 80_train, decoded for real (speculative decoding with
    SmolLM2 in float32, greedy) on the first `--n` MT-Bench and HumanEval prompts, `--max-new-tokens` each;
  * from 90_evaluate/eval.json: per set, tau, per-position acceptance, lossless rate and tokens/s against plain
    decoding, for every variant the evaluation ran: the trained drafter, the untrained one, the zeroed control, the
    trained drafter served its features one position late (`served_late`; runs before it had `served_offset`, one
    layer early), and prompt lookup.

Prints a table, writes bench/results/quality.json and bench/results/quality.png.

    python bench/bench_quality.py runs/smollm2_quality [--n 8] [--max-new-tokens 128] [--skip-curve | --reuse-curve]
"""
import argparse, json, os, re, time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def shown(path) -> str:
    "A path as the results show it: relative to the checkout (or as given when relative), never a machine's folders."
    p = Path(path)
    if not p.is_absolute(): return p.as_posix()
    try: return p.resolve().relative_to(ROOT).as_posix()
    except ValueError: pass   # another checkout's runs/...: from its runs folder, else the name alone
    parts = p.parts
    return '/'.join(parts[max(i for i, x in enumerate(parts) if x == 'runs'):]) if 'runs' in parts else p.name


def checkpoint_drafters(run: Path):
    "[(step, drafter)] for every checkpoint of 80_train (model weights from state.pt, config from the exported drafter)."
    from dflash_nb.drafter import DFlashDrafter, DFlashConfig
    from dflash_nb.core import read_json
    cfg = DFlashConfig.from_json_dict(read_json(run / '80_train' / 'drafter' / 'config.json'))
    out = []
    P = read_json(run / '80_train' / 'manifest.json')['params']
    if not P.get('init_from_target'):      # step 0: the random initialization training started from (the untrained drafter)
        out.append((0, DFlashDrafter(cfg).init_weights(P.get('seed', 0)).eval()))
    for p in sorted((run / '80_train' / 'checkpoints').glob('step-*')):
        st = torch.load(p / 'state.pt', map_location='cpu', weights_only=True)
        d = DFlashDrafter(cfg); d.load_state_dict(st['model']); d.eval()
        out.append((int(re.sub(r'\D', '', p.name)), d))
    return out


def train_tokens_per_step(run: Path) -> float:
    "Mean sequence tokens per optimizer step of 80_train (rows used x mean length / steps per epoch)."
    from dflash_nb.core import read_json
    from dflash_nb.features import FeatureStore
    P = read_json(run / '80_train' / 'manifest.json')['params']
    fs = FeatureStore(run / '60_hidden_states' / 'features')
    lengths = [len(fs[i]['input_ids']) for i in range(len(fs))]
    return sum(lengths) / len(lengths) * P['batch_size'] * P['grad_accum']


def tau_curve(run: Path, n: int, max_new_tokens: int, max_checkpoints: int | None = None, log=print) -> list:
    from dflash_nb.evaluate import Bookkeeping, DFlashDraftSession, EvalGeneration, evaluate_prompts, load_prompt_set
    from dflash_nb.verdicts import summarize
    from dflash_nb.models import load_target
    model, tok = load_target('smollm2', device='cpu')
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    ck = checkpoint_drafters(run)
    if max_checkpoints and len(ck) > max_checkpoints:   # evenly spaced, the last one included
        ck = [ck[round(i * (len(ck) - 1) / (max_checkpoints - 1))] for i in range(max_checkpoints)] if max_checkpoints > 1 else ck[-1:]
    if not ck: raise FileNotFoundError(f'{shown(run)}/80_train/checkpoints has no checkpoint (train with keep_checkpoints > 1)')
    per_step = train_tokens_per_step(run)
    variants = {f'step-{s}': (DFlashDraftSession(d, emb, head), 0) for s, d in ck}
    curve = {s: {'step': s, 'train_tokens': int(s * per_step)} for s, _ in ck}
    for sname in ('mt_bench', 'humaneval'):
        items, _ = load_prompt_set(sname, n, allow_hub=False)
        for it in items: it['turns'] = it['turns'][:1]
        t = time.time()
        gens = evaluate_prompts(model, tok, items, variants, EvalGeneration(max_new_tokens=max_new_tokens, temperature=0.0, seed=0, enable_thinking=False, lossless='report'),
                                set_name=sname, book=Bookkeeping(log=None))
        for s, _ in ck:
            m = summarize(gens[f'step-{s}'], gens['plain'], 16)
            curve[s][sname] = {'tau': m['tau'], 'identical': m['identical'], 'accept_at': m['accept_at'][:6]}
        log(f'[curve] {sname}: {len(items)} prompts x {len(ck)} checkpoints in {time.time() - t:.0f} s')
    return [curve[s] for s, _ in ck]


def plot(curve, ev, path):
    import matplotlib; matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    sets = [s for s, r in (ev or {}).get('sets', {}).items() if r.get('variants')]
    fig, ax = plt.subplots(1, 1 + len(sets), figsize=(5.2 * (1 + len(sets)), 3.8), squeeze=False)
    a = ax[0, 0]
    for sname in ('mt_bench', 'humaneval'):
        pts = [(c['train_tokens'], c[sname]['tau']) for c in curve or [] if sname in c]
        if pts: a.plot(*zip(*pts), marker='o', label=sname)
    a.axhline(1.0, color='grey', lw=0.6)
    a.set(title='tau against training tokens (checkpoints)', xlabel='training tokens (sequence tokens seen)', ylabel='tau')
    if curve: a.legend(fontsize=8)
    for j, sname in enumerate(sets, 1):
        for v, m in ev['sets'][sname]['variants'].items():
            ax[0, j].plot(range(1, len(m['accept_at']) + 1), m['accept_at'], marker='o', ms=3, label=f"{v} (tau {m['tau']:.2f})")
        ax[0, j].set(title=f'{sname}: P(slot k accepted)', xlabel='draft slot k', ylim=(0, 1.02))
        ax[0, j].legend(fontsize=7)
    fig.tight_layout(); fig.savefig(path, dpi=100); plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('run', nargs='?', default=str(ROOT / 'runs' / 'smollm2_quality'))
    ap.add_argument('--n', type=int, default=8, help='prompts per set for the checkpoint curve')
    ap.add_argument('--max-new-tokens', type=int, default=128)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--max-checkpoints', type=int, default=6, help='evenly spaced checkpoints on the curve')
    ap.add_argument('--skip-curve', action='store_true')
    ap.add_argument('--reuse-curve', action='store_true', help='take the curve from an earlier --out of the same run')
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'quality.json'))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from dflash_nb.core import read_json
    run = Path(a.run)
    old = read_json(a.out) if a.reuse_curve and Path(a.out).exists() else {}
    if old.get('run') == shown(run) and old.get('curve'): curve = old['curve']
    else: curve = None if a.skip_curve else tau_curve(run, a.n, a.max_new_tokens, a.max_checkpoints)
    ev = read_json(run / '90_evaluate' / 'eval.json') if (run / '90_evaluate' / 'eval.json').exists() else None
    wall = {}
    for st in sorted(run.glob('[0-9][0-9]_*/manifest.json')):
        m = read_json(st); wall[st.parent.name] = (m.get('timings') or {}).get('total')
    rows = []
    for sname, r in ((ev or {}).get('sets') or {}).items():
        for v, m in (r.get('variants') or {}).items():
            rows.append({'set': sname, 'variant': v, 'prompts': m.get('prompts', r.get('prompts')), 'tau': m['tau'],
                         'accept_at': m['accept_at'], 'identical': m['identical'], 'speedup': m['speedup'],
                         'tpot_ms': m['tpot_ms'], 'plain_tpot_ms': m['plain_tpot_ms']})
    print('\n| set | variant | prompts | tau | P(slot1) | P(slot2) | P(slot3) | identical | tokens/s vs plain |')
    print('|---|---|---|---|---|---|---|---|---|')
    f = lambda x, spec='.3f': '—' if x is None else format(x, spec)
    for r in rows:
        acc = (list(r['accept_at'] or []) + [None, None, None])[:3]
        print(f"| {r['set']} | {r['variant']} | {r['prompts']} | {f(r['tau'])} | {f(acc[0])} | {f(acc[1])} | {f(acc[2])} | "
              f"{f(r['identical'], '.2f')} | {f(r['speedup'], '.2f')}x |")
    if curve:
        print('\n| step | training tokens | tau MT-Bench | tau HumanEval |\n|---|---|---|---|')
        for c in curve:
            print(f"| {c['step']} | {c['train_tokens']} | {c['mt_bench']['tau']:.3f} | {c['humaneval']['tau']:.3f} |")
    print('\nstage wall time (s):', json.dumps(wall), ' total', round(sum(v or 0 for v in wall.values()), 1))
    out = Path(a.out); out.parent.mkdir(parents=True, exist_ok=True)
    res = {'run': shown(run), 'eval': rows, 'curve': curve, 'curve_prompts_per_set': old.get('curve_prompts_per_set', a.n) if old.get('curve') else a.n,
           'max_new_tokens': old.get('max_new_tokens', a.max_new_tokens) if old.get('curve') else a.max_new_tokens,
           'stage_seconds': wall, 'cpu_count': os.cpu_count(), 'load_avg': os.getloadavg()}
    out.write_text(json.dumps(res, indent=1) + '\n')
    plot(curve, ev, out.with_suffix('.png'))
    print(f'wrote {shown(out)} and {shown(out.with_suffix(".png"))}')


if __name__ == '__main__':
    main()
