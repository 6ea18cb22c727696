#!/usr/bin/env python
"""Does a second, sampled answer to each prompt (`regenerate.samples: 2`) teach the drafter more than the greedy
answers alone, in the same steps? One run regenerated with two answers a prompt; two arms on the same prompts:

  * `greedy`: the greedy (first) answers of the first `--prompts` prompts;
  * `sampled`: the same prompts' greedy and sampled answers (about twice the rows).

Both are trained by our trainer at the quality config's recipe (`RECIPE`: Muon with speculators' settings, D-PACE,
linear schedule, loss / supervised count, 4 rows x 16 anchors a step, the loss on slots 1-6, bf16 autocast, lr 1e-3,
3 layers, block 16) for the same `--steps`, with `--labels` (the quality config's `text`: the row's own next tokens;
`target`: the stored target argmax). They are measured on the greedy answers of `--heldout` prompts spread evenly
over the run, which neither arm saw: held-out teacher-forced tau (`search_heldout.heldout_tau`), every `--every` steps. On the greedy
rows the text is the target's argmax, so this is what speculative decoding would accept with those features.

    dflash-nb run bench/configs/selfdistill_520.yaml --until 80_train --set run.name=selfdistill_520_s2 \\
        --set regenerate.samples=2 --set regenerate.sample_temperature=0.7 --set regenerate.top_p=0.95
    python bench/bench_samples.py --run runs/selfdistill_520_s2 --arm greedy --seed 0    # one lane (1 thread) each
    python bench/bench_samples.py --run runs/selfdistill_520_s2 --report                # table + JSON

Each arm run writes WORK/result_{arm}_{labels}[_noiseS][_RUN]_{seed}.json (WORK: `--out`, default runs/bench_samples);
`--report` gathers them (from `--report_dirs`, default WORK) into bench/results/NAME.json and NAME_table.md.

Two more knobs, for the question what else stands in for new prompts (bench/results/samples.md, regimes):
`--feature_noise S` trains on target features with fresh Gaussian noise of S x each layer's median |feature| (EAGLE's
augmentation), and `--train_run RUN` trains on the same prompts' rows of another run (e.g. answers regenerated to 256
tokens instead of 128), measured on the same held-out rows of `--run`.

And for prompts the target writes itself (`regenerate.synthesize`, Magpie): `--add_run RUN --add_rows N` trains on the
first N rows of another run as well (bench/configs/magpie_rows.yaml: prompts SmolLM2 wrote, answered greedily), and
`--heldout_runs RUN` measures the trained drafter at the end on that run's rows too, per set (the id's part after the source name)
(bench/configs/evalsets_rows.yaml: the evaluation's own prompts, MT-Bench first turns, HumanEval, the unseen prompts,
answered greedily as plain decoding answers them).
"""
import argparse, json, re, sys, time
from pathlib import Path
import torch
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / 'bench'))

RECIPE = dict(optimizer='muon', lr_schedule='linear', warmup_ratio=0.01, weight_decay=0.01, muon_lr=None,
              muon_momentum=0.95, muon_weight_decay=0.1, ns_steps=5, muon_adjust_lr='match_rms_adamw',
              position_weights='dpace', dpace_alpha=0.5, gamma=2.0, loss_norm='count', loss_slots=6,
              lr=1e-3, max_grad_norm=1.0, loss='ce')
BATCH = dict(batch_size=4, num_anchors=16)
SAMPLE_ID = re.compile(r'#s\d+$')


def split_ids(ids: list, n_prompts: int, n_held: int) -> dict:
    "Row ids by arm: `n_held` prompts spread evenly (their greedy rows: held out), then the first `n_prompts` others' greedy rows (and with their samples)."
    prompts = list(dict.fromkeys(SAMPLE_ID.sub('', i) for i in ids))
    assert len(prompts) >= n_prompts + n_held, f'{len(prompts)} prompts: not enough for {n_prompts} + {n_held}'
    held = set(prompts[int(k * len(prompts) / n_held)] for k in range(n_held))   # spread over the sources' order
    train = set([q for q in prompts if q not in held][:n_prompts])
    base = lambda i: SAMPLE_ID.sub('', i)
    return {'greedy': [i for i in ids if i in train], 'sampled': [i for i in ids if base(i) in train],
            'held': [i for i in ids if i in held]}


def setup(a):
    "The feature store, the arms' ids, the held-out rows, the target's embedding and head, the drafter config."
    from transformers import AutoConfig
    from dflash_nb.drafter import build_config, resolve_mask_token_id
    from dflash_nb.features import FeatureStore
    from dflash_nb.models import load_tokenizer, resolve_target
    from dflash_nb.target_weights import load_target_head
    store = FeatureStore(Path(a.run) / '60_hidden_states' / 'features')
    arms = split_ids(list(store.ids), a.prompts, a.heldout)
    train_store = FeatureStore(Path(a.train_run) / '60_hidden_states' / 'features') if a.train_run else store
    if a.train_run:                                  # the same prompts' rows from another run (e.g. longer answers)
        have = set(train_store.ids)
        arms = {k: v if k == 'held' else [i for i in v if i in have] for k, v in arms.items()}
    tok, tcfg = load_tokenizer('smollm2'), AutoConfig.from_pretrained(resolve_target('smollm2'))
    mask_id = resolve_mask_token_id(tok, tcfg.vocab_size, '<empty_output>')
    dcfg = build_config(tcfg, mask_id, num_hidden_layers=3, block_size=16, target_layer_ids=store.layer_ids)
    emb, head = load_target_head('smollm2')
    add = FeatureStore(Path(a.add_run) / '60_hidden_states' / 'features') if a.add_run else None
    add_ids = [i for i in add.ids if i.startswith('synthesized/')][:a.add_rows] if add else []   # the prompts the target wrote
    assert len(add_ids) == a.add_rows, f'--add_run has {len(add_ids)} rows, not --add_rows {a.add_rows}'
    sets = {}                                        # extra held-out rows, by their id's part after the source's name
    for r in a.heldout_runs or []:
        st = FeatureStore(Path(r) / '60_hidden_states' / 'features')
        for i in st.ids: sets.setdefault(i.split('/')[1], []).append(st[i])        # evalsets/mtbench/81: mtbench
    return dict(store=store, train_store=train_store, add_store=add, add_ids=add_ids, arms=arms, sets=sets, held=[store[i] for i in arms['held']], mask_id=mask_id, dcfg=dcfg, emb=emb, head=head)


class NoisyRows:
    """Rows whose target features get fresh Gaussian noise at every fetch: std `sigma` times each row's and layer's
    median |feature| (the features carry outliers of ~25,000 against medians of 0.7-10, so a plain std would drown
    the typical entries). EAGLE's augmentation (uniform noise on the target's features), scaled per layer."""
    def __init__(self, rows, sigma): self.rows, self.sigma = rows, sigma
    def __len__(self): return len(self.rows)
    def __getitem__(self, i):
        r = dict(self.rows[i]); h = r['hidden_states']
        scale = h.float().abs().median(dim=0).values.median(dim=-1).values   # [n layers]
        r['hidden_states'] = (h.float() + self.sigma * scale[None, :, None] * torch.randn(h.shape)).to(h.dtype)
        return r
    meta = None


def train_arm(a, S) -> dict:
    "Train one arm for `--steps`, held-out tau every `--every` steps (training CPU-seconds counted apart)."
    from dflash_nb.core import seed_everything
    from dflash_nb.drafter import DFlashDrafter
    from dflash_nb.train import Trainer, TrainConfig
    from search_heldout import heldout_tau, Rows
    seed_everything(a.seed)
    ids = S['arms'][a.arm]
    cfg = TrainConfig(epochs=1000, max_steps=a.steps, amp='bf16', log_every=50, ckpt_every=0, seed=a.seed, tensorboard=False,
                      labels=a.labels, **BATCH, **RECIPE)
    rows = Rows([S['train_store'], S['add_store']], [(0, i) for i in ids] + [(1, i) for i in S['add_ids']])
    tr = Trainer(DFlashDrafter(S['dcfg']).init_weights(a.seed), S['emb'], S['head'],
                 NoisyRows(rows, a.feature_noise) if a.feature_noise else rows, cfg, log=lambda m: None)
    cpu, curve = 0.0, []
    while tr.step < a.steps:
        c0 = time.process_time(); tr.fit(resume=False, stop_after=min(a.every, a.steps - tr.step)); cpu += time.process_time() - c0
        tau, acc = heldout_tau(tr.model, S['held'], S['emb'], S['head'], S['mask_id'], S['dcfg'])
        curve.append({'step': tr.step, 'cpu_s': round(cpu, 1), 'heldout_tau': round(tau, 4), 'heldout_acc': [round(x, 4) for x in acc]})
        print(a.arm, a.labels, a.seed, json.dumps(curve[-1]), flush=True)
    sets = {k: round(heldout_tau(tr.model, v, S['emb'], S['head'], S['mask_id'], S['dcfg'])[0], 4) for k, v in S['sets'].items()}
    print(a.arm, a.seed, 'held-out sets at the end:', sets, flush=True)
    tokens = sum(int(S['train_store'][i]['loss_mask'].sum()) for i in ids) + sum(int(S['add_store'][i]['loss_mask'].sum()) for i in S['add_ids'])
    return {'arm': a.arm, 'labels': a.labels, 'seed': a.seed, 'rows': len(rows), 'prompts': a.prompts, 'feature_noise': a.feature_noise,
            'train_run': a.train_run, 'add_run': a.add_run, 'add_rows': len(S['add_ids']), 'train_tokens': tokens,
            'heldout_rows': len(S['held']), 'steps': tr.step, 'epochs': round(tr.step * BATCH['batch_size'] / len(rows), 2),
            'cpu_s': curve[-1]['cpu_s'], 'heldout_tau': curve[-1]['heldout_tau'], 'curve': curve, 'heldout_sets': sets,
            'heldout_sets_rows': {k: len(v) for k, v in S['sets'].items()},
            'settings': {**RECIPE, **BATCH, 'labels': a.labels, 'feature_noise': a.feature_noise, 'amp': 'bf16 autocast', 'num_hidden_layers': 3, 'block_size': 16},
            'load_at_end': round(__import__('os').getloadavg()[0], 1)}


def _arm_name(r: dict) -> str:
    "An arm's name with what sets it apart: prompts, answers, labels, feature noise, the run its rows came from."
    extra = ([f"noise {r['feature_noise']:g}"] if r.get('feature_noise') else []) + ([Path(r['train_run']).name] if r.get('train_run') else []) \
        + ([f"+ {r['add_rows']} rows of {Path(r['add_run']).name}"] if r.get('add_run') else [])
    return ', '.join([f"{r['prompts']} prompts", r['arm'], f"labels {r['labels']}"] + extra)


def report(works: list, name: str = 'samples'):
    "bench/results/{name}.json and {name}_table.md: per run, and the mean of the seeds per arm."
    from statistics import mean
    from dflash_nb.core import read_json, write_json
    runs = [read_json(p) for w in works for p in sorted(Path(w).glob('result_*.json'))]
    for r in runs: r.setdefault('feature_noise', 0.0); r.setdefault('train_run', None)
    out = ROOT / 'bench' / 'results'
    write_json(out / f'{name}.json', {'recipe': RECIPE, 'batch': BATCH, 'runs': runs})
    md = ['| arm | seed | rows | supervised tokens | epochs | steps | CPU-s | held-out tau | slot 1 | slot 2 | load at end |',
          '|---|---|---|---|---|---|---|---|---|---|---|']
    md += [f"| {_arm_name(r)} | {r['seed']} | {r['rows']} | {r.get('train_tokens', '—')} | {r['epochs']} | {r['steps']} | {r['cpu_s']:.0f} | "
           f"{r['heldout_tau']:.3f} | {r['curve'][-1]['heldout_acc'][0]:.3f} | {r['curve'][-1]['heldout_acc'][1]:.3f} | {r['load_at_end']} |" for r in runs]
    groups = {}
    for r in runs: groups.setdefault(_arm_name(r), []).append(r)
    md += ['', '| arm | seeds | mean held-out tau | ' + ' | '.join(f"step {c['step']}" for c in runs[0]['curve']) + ' |',
           '|---|---|---|' + '---|' * len(runs[0]['curve'])]
    for arm, rs in groups.items():
        steps = [mean(r['curve'][k]['heldout_tau'] for r in rs) for k in range(min(len(r['curve']) for r in rs))]
        md.append(f"| {arm} | {len(rs)} | {mean(r['heldout_tau'] for r in rs):.3f} | " + ' | '.join(f'{t:.3f}' for t in steps) + ' |')
    names = sorted({k for r in runs for k in r.get('heldout_sets') or {}})
    if names:                                        # the extra held-out sets (measured at the end), seeds averaged
        cell = lambda v: f'{mean(v):.3f} (' + ', '.join(f'{x:.3f}' for x in v) + ')' if len(v) > 1 else f'{v[0]:.3f}' if v else '—'
        md += ['', '| arm | ' + ' | '.join(f'{n} tau (seeds)' for n in names) + ' |', '|---|' + '---|' * len(names)]
        for arm, rs in groups.items():
            got = {n: [r['heldout_sets'][n] for r in rs if n in (r.get('heldout_sets') or {})] for n in names}
            if any(got.values()): md.append(f'| {arm} | ' + ' | '.join(cell(got[n]) for n in names) + ' |')
    (out / f'{name}_table.md').write_text('\n'.join(md) + '\n')
    print('\n'.join(md))


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument('--run', default=None); p.add_argument('--out', default=None)
    p.add_argument('--arm', choices=['greedy', 'sampled'], default=None)
    p.add_argument('--labels', choices=['text', 'target'], default='text')
    p.add_argument('--prompts', type=int, default=400); p.add_argument('--heldout', type=int, default=40)
    p.add_argument('--steps', type=int, default=600); p.add_argument('--every', type=int, default=100)
    p.add_argument('--seed', type=int, default=0); p.add_argument('--threads', type=int, default=1)
    p.add_argument('--feature_noise', type=float, default=0.0, help="Gaussian noise on the features, x each layer's median |feature| (0: none)")
    p.add_argument('--train_run', default=None, help='train on the same prompts\' rows of this run (held-out rows: --run\'s)')
    p.add_argument('--add_run', default=None, help='train also on the first --add_rows rows of this run (e.g. synthesized prompts)')
    p.add_argument('--add_rows', type=int, default=0)
    p.add_argument('--heldout_runs', nargs='*', default=None, help="runs whose rows are held-out sets too, measured at the end "
                   "(grouped by the id's part after the source name: e.g. runs/evalsets_rows: mtbench, humaneval, unseen)")
    p.add_argument('--report', action='store_true')
    p.add_argument('--report_dirs', nargs='*', default=None, help='--report: the work folders to gather (default: --out)')
    p.add_argument('--report_name', default='samples', help='--report: bench/results/NAME.json and NAME_table.md')
    a = p.parse_args(argv)
    work = Path(a.out or ROOT / 'runs' / 'bench_samples')
    if a.report: return report([Path(w) for w in a.report_dirs or [work]], a.report_name)
    work.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(a.threads)
    res = train_arm(a, setup(a))
    from dflash_nb.core import write_json
    noise = (f'_noise{a.feature_noise:g}' if a.feature_noise else '') + (f'_{Path(a.train_run).name}' if a.train_run else '') \
        + (f'_{Path(a.add_run).name}{a.add_rows}' if a.add_run else '')
    tag = f'_p{a.prompts}' if a.prompts != 400 else ''   # arms of several prompt counts can share a work folder
    write_json(work / f'result_{a.arm}_{a.labels}{tag}{noise}_{a.seed}.json', res)


if __name__ == '__main__':
    main()
