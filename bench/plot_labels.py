#!/usr/bin/env python
"""Held-out tau against CPU-minutes, data included: the curves of `bench/search_heldout.py` runs, each shifted right
by the CPU cost of the data it trained on (regeneration and the features pass, per row and per token as measured by
`bench/bench_label_costs.py`), and the tau each recipe reaches at equal total budgets.

    python bench/plot_labels.py --costs bench/results/label_costs.json \
        --recipe "a: regenerated text, text labels=regen_text" --recipe "b: original text, target argmax=orig_ce" ...
        [--budgets 20 40 60] [--out labels]

Each `--recipe "LABEL=NAME"` names a bench/results/search_heldout/NAME.json; its data cost is computed from the runs
it trained on (the `--train` runs recorded in that file): per run, its rows' tokens times the features' CPU-s per
token, plus, for a regenerated run, its rows times the regeneration's CPU-s per row. Writes
bench/results/OUT.json and OUT.png and prints the table.
"""
import argparse, json
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
RES = ROOT / 'bench' / 'results'


def data_cost(train_runs, costs: dict, n_heldout: int, heldout_run: str) -> dict:
    "CPU-seconds of the data behind `train_runs`: features for their tokens, regeneration for regenerated rows."
    out = {'features_cpu_s': 0.0, 'regen_cpu_s': 0.0, 'rows': 0, 'tokens': 0}
    for r in train_runs:
        c = costs['runs'][str(Path(r).resolve())]
        rows, toks = c['rows'], c['tokens']
        if str(Path(r).resolve()) == str(Path(heldout_run).resolve()):      # the held-out rows are not training data
            rows -= n_heldout; toks -= c['heldout_tokens']
        out['rows'] += rows; out['tokens'] += toks
        out['features_cpu_s'] += toks * costs['features_cpu_s_per_token']
        if c.get('regenerated'): out['regen_cpu_s'] += rows * costs['regen_cpu_s_per_row']
    out['cpu_s'] = out['features_cpu_s'] + out['regen_cpu_s']
    return out


def at_budget(curve, offset_s: float, budget_min: float):
    "The held-out tau of the last measurement within `budget_min` CPU-minutes (data + training), or None."
    pts = [c for c in curve if offset_s + c['train_cpu_s'] <= budget_min * 60]
    return pts[-1]['heldout_tau'] if pts else None


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--costs', default=str(RES / 'label_costs.json'))
    p.add_argument('--recipe', action='append', required=True, help='"LABEL=NAME" of a search_heldout result')
    p.add_argument('--budgets', type=float, nargs='+', default=[20, 40, 60]); p.add_argument('--out', default='labels')
    a = p.parse_args()
    costs = json.loads(Path(a.costs).read_text())
    rows = []
    for spec in a.recipe:
        label, name = spec.rsplit('=', 1)
        r = json.loads((RES / 'search_heldout' / f'{name}.json').read_text())
        d = data_cost(r['args']['train'], costs, r['args']['n_heldout'], r['args']['heldout'])
        rows.append({'label': label, 'name': name, 'data': d, 'curve': r['curve'],
                     'at': {str(b): at_budget(r['curve'], d['cpu_s'], b) for b in a.budgets},
                     'last': r['curve'][-1]})
    import matplotlib; matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, r in enumerate(rows):
        x = [(r['data']['cpu_s'] + c['train_cpu_s']) / 60 for c in r['curve']]
        ax.plot(x, [c['heldout_tau'] for c in r['curve']], marker='.', color=f'C{i}', label=r['label'])
        ax.axvline(r['data']['cpu_s'] / 60, color=f'C{i}', ls=':', lw=0.8)
    ax.set(xlabel='CPU-minutes (data: regeneration + features, dotted; then training)', ylabel='held-out teacher-forced tau',
           title='tau against CPU-minutes, data included'); ax.grid(alpha=.3); ax.legend(fontsize=8)
    fig.tight_layout(); fig.savefig(RES / f'{a.out}.png', dpi=110)
    json.dump({'costs': costs, 'budgets_min': a.budgets, 'recipes': rows}, open(RES / f'{a.out}.json', 'w'), indent=1)
    head = f"{'recipe':<44}{'rows':>6}{'data CPU-min':>14}" + ''.join(f'{f"@{b:g} min":>10}' for b in a.budgets) + f"{'last':>8}{'at CPU-min':>12}"
    print(head)
    for r in rows:
        at = ''.join(f"{'-' if r['at'][str(b)] is None else format(r['at'][str(b)], '.3f'):>10}" for b in a.budgets)
        tot = (r['data']['cpu_s'] + r['last']['train_cpu_s']) / 60
        print(f"{r['label']:<44}{r['data']['rows']:>6}{r['data']['cpu_s'] / 60:>14.1f}{at}{r['last']['heldout_tau']:>8.3f}{tot:>12.1f}")


if __name__ == '__main__':
    main()
