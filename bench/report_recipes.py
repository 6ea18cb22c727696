#!/usr/bin/env python
"""The recipe options of issue 27 item 2 side by side: held-out teacher-forced tau per optimizer step and per training
CPU-second, read from `bench/search_heldout.py` results (bench/results/search_heldout/NAME.json).

    python bench/report_recipes.py NAME [NAME ...] [--out bench/results/recipes.md]

One row per run and measurement step, the settings that differ named; writes a markdown table and prints it.
"""
import argparse, json
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
KEYS = ('optimizer', 'lr_schedule', 'position_weights', 'loss_norm', 'weight_decay', 'lr', 'gamma', 'loss_slots', 'layers',
        'anchors', 'bs', 'amp')

def main():
    p = argparse.ArgumentParser(); p.add_argument('names', nargs='+'); p.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'recipes.md'))
    a = p.parse_args()
    runs = {n: json.loads((ROOT / 'bench' / 'results' / 'search_heldout' / f'{n}.json').read_text()) for n in a.names}
    md = ['| run | optimizer | schedule | position weights | loss / | weight decay | step | train CPU-s | CPU-s a step | held-out tau | slot 1 | slot 2 |',
          '|---|---|---|---|---|---|---|---|---|---|---|---|']
    for n, r in runs.items():
        g = r['args']
        for c in r['curve'][1:]:
            md.append(f"| {n} | {g.get('optimizer', 'adamw')} | {g.get('lr_schedule', 'cosine')} | {g.get('position_weights', 'decay')} | "
                      f"{g.get('loss_norm', 'weights')} | {g.get('weight_decay', 0.0)} | {c['step']} | {c['train_cpu_s']:.0f} | "
                      f"{c['train_cpu_s'] / c['step']:.3f} | {c['heldout_tau']:.3f} | {c['heldout_acc'][0]:.3f} | {c['heldout_acc'][1]:.3f} |")
    common = {k: runs[a.names[0]]['args'].get(k) for k in KEYS if k not in ('optimizer',)}
    md += ['', f"Common: {json.dumps({k: v for k, v in common.items() if all(r['args'].get(k) == v for r in runs.values())})}; "
           f"{runs[a.names[0]]['rows']} training rows, held-out rows: the last {runs[a.names[0]]['args']['n_heldout']} of the run."]
    Path(a.out).write_text('\n'.join(md) + '\n'); print('\n'.join(md))

if __name__ == '__main__':
    main()
