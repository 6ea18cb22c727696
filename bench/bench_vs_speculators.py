#!/usr/bin/env python
"""Our trainer beside speculators 0.9.0's DFlash trainer, on the same exported rows and the same drafter (3 layers,
block 16, SmolLM2's layers [1, 8, 14, 20, 27], CE on the target's argmax over all 15 slots, 16 blocks a step, lr 1e-3,
clip 1.0), at two recipes that name every setting on both sides (`RECIPES`):

  * `speculators`: speculators at its own defaults (Muon on the 2-D matrices + AdamW, linear schedule with its 1%
    warmup, D-PACE position weights, the loss divided by the supervised count, weight decay 0.1 / 0.01), and ours
    at the same recipe;
  * `adamw`: both on AdamW (weight decay 0.01), cosine with 4% warmup, the fixed decay gamma 2, the count;
  * `ours` (ours only): our defaults (Muon, cosine, the decay gamma 2 on slots 1-6, the weights' sum), measured
    against speculators at its defaults.
  * `speculators_64blocks` (ours only): speculators' recipe at 4 rows x 16 anchors a step (64 blocks), the quality
    config's batch, against speculators at its defaults and 16 blocks; `speculators_64blocks_6slots` / `_4slots` the same with
    the loss on slots 1-6 / 1-4, `speculators_128blocks` at 4 rows x 32 anchors.

Both drafters are measured by the same code: held-out teacher-forced tau and slot accuracies on rows neither saw
(`search_heldout.heldout_tau`), and CPU-seconds (user + sys of the process: speculators' minus its start-up, ours
the training loop alone). Ours is also measured every `--every` steps, for the CPU-seconds it needs to reach
speculators' tau.

    python bench/bench_vs_speculators.py --run RUN --prepare                       # export the rows once
    python bench/bench_vs_speculators.py --run RUN --side spec|ours --recipe R --seed S [--steps 600]
    python bench/bench_vs_speculators.py --run RUN --report                         # table + JSON + markdown

Each `--side` run writes `WORK/result_{side}_{recipe}_{seed}.json` (WORK: `--out`, default runs/vs_speculators), so
the runs can go in parallel, one thread each; `--report` gathers them into bench/results/vs_speculators.json and
bench/results/vs_speculators.md.

RUN holds self-distilled rows (the target's own greedy answers) with stored features that include the last layer
(`include_last`: speculators computes its labels from it) and at least the top-1 target labels (ours reads them):
`RUN/50_tokenization/dataset` and `RUN/60_hidden_states/features` (bench/configs/selfdistill_520.yaml makes one:
`dflash-nb run bench/configs/selfdistill_520.yaml --until 80_train`). The first `--rows` rows train both; the last
`--heldout` rows measure both.

What it takes to run speculators' trainer on a CPU-only machine (patched at run time in its own process, nothing
installed is edited; see `SPEC_TRAIN`):
  * device selection in its trainer: `torch.accelerator` reports no accelerator, so the trainer would fall back to
    'cuda' for autocast and move the model and every batch to `local_rank` (0 = cuda:0). The accelerator is reported
    as the CPU and the local rank as 'cpu'; its step timer's accelerator synchronize becomes a no-op; its data
    loader's pinned memory (which needs an accelerator) is turned off;
  * `--full-attention-indices 0 1 2`: without it speculators makes every draft layer a sliding-window layer (window
    2048, causal inside the block), a different drafter from ours (and from z-lab's full-attention ones);
  * flags: `--loss-implementation eager` (the fused losses need Triton), `--draft-attn-impl sdpa` (flex attention
    would be compiled), `--num-workers 0`; the length is set by `--epochs` (0.9.0's `--max-steps` does not end its
    loop), computed from its own dataloader's length so that both trainers take the same number of steps.
speculators runs in a venv built like those of tests/interop_venvs.py: 'spec09' (speculators 0.9.0 + hs-connectors on
the main env's torch and transformers) plus python-dotenv, which its training CLI's settings parser imports (the
interop tests read data and models only and never need it); one thread, like ours.
"""
import argparse, json, math, os, resource, subprocess, sys, time
from pathlib import Path
import torch
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / 'bench')); sys.path.insert(0, str(ROOT / 'tests'))

import interop_venvs
VENV = 'spec09train'
interop_venvs.VENVS.setdefault(VENV, interop_venvs.VENVS['spec09'] + ['python-dotenv==1.2.4'])


# Every setting that differs between trainers, named once per recipe: ours takes them as TrainConfig fields, speculators
# as its CLI flags (SPEC_FLAGS). speculators' defaults (0.9.0, `train/config/schema.py`): optimizer muon, muon_lr = lr,
# momentum 0.95, muon weight decay 0.1, AdamW weight decay 0.01, 5 Newton-Schulz steps, match_rms_adamw, scheduler
# linear with 1% warmup when no warmup is given, D-PACE (alpha 0.5) for DFlash, its loss divided by the supervised count.
SPECULATORS = dict(optimizer='muon', lr_schedule='linear', warmup_ratio=0.01, weight_decay=0.01, muon_lr=None,
                   muon_momentum=0.95, muon_weight_decay=0.1, ns_steps=5, muon_adjust_lr='match_rms_adamw',
                   position_weights='dpace', dpace_alpha=0.5, gamma=2.0, loss_norm='count')
RECIPES = {
    'speculators': SPECULATORS,
    'adamw': dict(optimizer='adamw', lr_schedule='cosine', warmup_ratio=0.04, weight_decay=0.01,
                  position_weights='decay', gamma=2.0, loss_norm='count'),
    # ours only (speculators cannot divide by the weights' sum): our defaults with the quality config's loss settings
    'ours': dict(optimizer='muon', lr_schedule='cosine', warmup_ratio=0.04, weight_decay=0.01, muon_lr=None,
                 muon_momentum=0.95, muon_weight_decay=0.1, ns_steps=5, muon_adjust_lr='match_rms_adamw',
                 position_weights='decay', gamma=2.0, loss_norm='weights', loss_slots=6),
    # ours only: speculators' recipe with 4 rows x 16 anchors a step (64 blocks; speculators stays at its 16), the
    # quality config's batch: Muon's fixed cost a step is shared by 4x the blocks
    'speculators_64blocks': {**SPECULATORS, 'num_anchors': 16},
    # ours only: the same with the loss on slots 1-6 / 1-4 (slots 7-15 cost LM-head logits a block; D-PACE weighs a
    # slot by the running acceptance of the slots before it)
    'speculators_64blocks_6slots': {**SPECULATORS, 'num_anchors': 16, 'loss_slots': 6},
    'speculators_64blocks_4slots': {**SPECULATORS, 'num_anchors': 16, 'loss_slots': 4},
    # ours only: 4 rows x 32 anchors (128 blocks a step)
    'speculators_128blocks': {**SPECULATORS, 'num_anchors': 32},
}
COMMON = dict(lr=1e-3, max_grad_norm=1.0, loss='ce', labels='target', loss_slots=None, num_hidden_layers=3, block_size=16)

def spec_flags(r: dict) -> list:
    "speculators' CLI flags for recipe `r` (its loss is always divided by the supervised count)."
    assert r['loss_norm'] == 'count', "speculators divides by the supervised count only"
    assert 'num_anchors' not in r, 'speculators runs 16 blocks a step here (--max-anchors 16)'
    f = ['--optimizer', r['optimizer'], '--weight-decay', r['weight_decay'], '--scheduler-type', r['lr_schedule'],
         '--scheduler-warmup-ratio', r['warmup_ratio'], '--dflash-decay-gamma', r['gamma'],
         '--per-position-loss-weight', {'decay': 'fixed-exp-decay', 'dpace': 'dpace'}[r['position_weights']]]
    if r['position_weights'] == 'dpace': f += ['--dpace-alpha', r['dpace_alpha']]
    if r['optimizer'] == 'muon':
        f += ['--muon-momentum', r['muon_momentum'], '--muon-weight-decay', r['muon_weight_decay'],
              '--muon-ns-steps', r['ns_steps'], '--muon-adjust-lr-fn', r['muon_adjust_lr']]
        if r['muon_lr'] is not None: f += ['--muon-lr', r['muon_lr']]
    return f

SPEC_TRAIN = r'''
import sys, torch
# CPU only: report the CPU as the accelerator (autocast device type), no device synchronize, local rank 'cpu'
torch.accelerator.current_accelerator = lambda check_available=False: None if check_available else torch.device("cpu")
torch.accelerator.synchronize = lambda *a, **k: None
torch.accelerator.is_available = lambda: False         # (its step timer would read accelerator memory statistics)
import torch.utils.data._utils.pin_memory as PM       # its data loader pins memory (needs an accelerator): a no-op
PM.pin_memory = lambda data, device=None: data
import speculators.train.trainer as T
T.get_local_rank = lambda: "cpu"
from speculators.train.cli import main
from speculators.train.config import TrainConfig
main(TrainConfig.resolve(sys.argv[1:]))
'''

SPEC_STEPS = r'''
import argparse, sys, json, torch
from transformers import AutoConfig
from speculators.train.config import TrainConfig
from speculators.train.dataloader import create_train_val_loaders
from hs_connectors import HiddenStatesBackend
a = TrainConfig.resolve(sys.argv[1:]).flatten()
transfer = HiddenStatesBackend.registry[a["hidden_states_backend"]].from_train_args(argparse.Namespace(**a), a["data_path"])
tl, vl = create_train_val_loaders(
    data_path=a["data_path"], total_seq_len=a["total_seq_len"], hidden_states_dtype=torch.bfloat16, transfer=transfer,
    vllm_endpoint=None, on_missing="raise", verifier_name_or_path=a["verifier_name_or_path"],
    request_timeout=a["request_timeout"], max_retries=a["max_retries"],
    generation_validation_retries=a["generation_validation_retries"],
    max_consecutive_generation_failures=a["max_consecutive_generation_failures"],
    hidden_size=AutoConfig.from_pretrained(a["verifier_name_or_path"]).hidden_size,
    num_target_layers=len(a["target_layer_ids"]), num_workers=0, prefetch_factor=None, preprocess=None,
    train_data_ratio=a["train_data_ratio"], seed=a["seed"])
print("JSON" + json.dumps({"steps_per_epoch": len(tl)}))
'''


def prepare(run: Path, work: Path, n_rows: int, n_held: int):
    "A run folder with the first `n_rows` rows' features (speculators export) and the held-out rows' features apart."
    from datasets import load_from_disk
    from dflash_nb.export import export_speculators
    from dflash_nb.features import FeatureStore
    from dflash_nb.core import write_json
    src = FeatureStore(run / '60_hidden_states' / 'features')
    if not src.include_last or src.label_topk < 1:
        raise SystemExit(f'{run}: the features need include_last and label_topk >= 1 (speculators reads the last layer)')
    ds = load_from_disk(str(run / '50_tokenization' / 'dataset'))
    ids = [i for i in ds['id'] if i in src]
    train_ids, held_ids = ids[:n_rows], ids[-n_held:]
    assert len(ids) > n_rows + n_held, 'not enough rows for the train and held-out sets'
    keep = set(ids[:n_rows + 1])         # + 1 row: speculators splits off a validation tail (at least one row) and
                                         # trains on exactly the first n_rows (`--train-data-ratio`, see spec_args)
    r = work / 'run'
    (r / '50_tokenization').mkdir(parents=True, exist_ok=True)
    sub = ds.filter(lambda x: x['id'] in keep)
    if not (r / '50_tokenization' / 'dataset').exists(): sub.save_to_disk(str(r / '50_tokenization' / 'dataset'))
    tok_dir = (run / '50_tokenization' / 'dataset').resolve().parent      # the tokenization output (d2t.npy, t2d.npy)
    for f in ('d2t.npy', 't2d.npy'):
        if not (r / '50_tokenization' / f).exists(): os.symlink(tok_dir / f, r / '50_tokenization' / f)
    write_json(r / '50_tokenization' / 'manifest.json', {'stage': '50_tokenization', 'params': {'target': 'smollm2'}})
    (r / '60_hidden_states').mkdir(exist_ok=True)
    if not (r / '60_hidden_states' / 'features').exists(): os.symlink(run / '60_hidden_states' / 'features', r / '60_hidden_states' / 'features')
    write_json(r / '60_hidden_states' / 'manifest.json', {'stage': '60_hidden_states', 'params': {'include_last': True}})
    if not (work / 'export' / 'export.json').exists(): export_speculators(r, work / 'export', version='0.9')
    return src, train_ids, held_ids

def spec_args(work: Path, a, mask_id: int, layer_ids, epochs: int, total_steps: int, dry: bool = False, tag: str = '') -> list:
    from dflash_nb.core import to_aux_layer_ids
    from dflash_nb.models import resolve_target
    args = ['--speculator-type', 'dflash', '--verifier-name-or-path', resolve_target('smollm2'),
            '--data-path', work / 'export', '--save-path', work / (f'spec_dry{tag}' if dry else f'spec_ckpt{tag}'),
            '--num-layers', 3, '--full-attention-indices', 0, 1, 2, '--block-size', 16, '--target-layer-ids', *to_aux_layer_ids(layer_ids),
            '--mask-token-id', mask_id, '--draft-vocab-size', 49152, '--max-anchors', 16, '--total-seq-len', 1024,
            '--lr', COMMON['lr'], *spec_flags(RECIPES[a.recipe]),
            '--scheduler-total-steps', total_steps, '--epochs', epochs, '--loss-fn', 'ce', '--loss-implementation', 'eager',
            '--draft-attn-impl', 'sdpa',
            '--num-workers', 0, '--hidden-states-dtype', 'bfloat16', '--train-data-ratio', (a.rows + 0.5) / (a.rows + 1), '--seed', a.seed,
            '--checkpoint-freq', epochs, '--log-freq', 50, '--no-resume-from-checkpoint']
    return [str(x) for x in args] + (['--dry-run'] if dry else [])

def run_spec(script: str, args: list, log: Path) -> float:
    "Run `script` in the spec09 venv with `args`; returns its CPU seconds (user + sys of the child)."
    from interop_venvs import venv_python
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env.update(HF_HUB_OFFLINE='1', TRANSFORMERS_OFFLINE='1', OMP_NUM_THREADS='1', TOKENIZERS_PARALLELISM='false')
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(log, 'w') as f:
        r = subprocess.run([str(venv_python(VENV)), '-c', script, *args], stdout=f, stderr=subprocess.STDOUT, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode: raise SystemExit(f'speculators exited {r.returncode}: see {log}')
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

def setup(a):
    "Everything both sides read: the exported rows, the held-out rows, the target's head, the drafter config."
    from transformers import AutoConfig
    from dflash_nb.drafter import build_config, resolve_mask_token_id
    from dflash_nb.models import load_tokenizer, resolve_target
    from dflash_nb.target_weights import load_target_head
    run = Path(a.run).resolve(); work = Path(a.out or ROOT / 'runs' / 'vs_speculators').resolve(); work.mkdir(parents=True, exist_ok=True)
    store, train_ids, held_ids = prepare(run, work, a.rows, a.heldout)
    tok = load_tokenizer('smollm2'); tcfg = AutoConfig.from_pretrained(resolve_target('smollm2'))
    mask_id = resolve_mask_token_id(tok, tcfg.vocab_size, '<empty_output>')
    dcfg = build_config(tcfg, mask_id, num_hidden_layers=3, block_size=16, target_layer_ids=store.layer_ids)
    emb, head = load_target_head('smollm2')
    return dict(run=run, work=work, store=store, train_ids=train_ids, held=[store[i] for i in held_ids], mask_id=mask_id,
                dcfg=dcfg, emb=emb, head=head)


def run_speculators(a, S) -> dict:
    "speculators' steps per epoch, a dry run (its start-up cost), the training; its final drafter measured."
    from interop_venvs import run_in
    from dflash_nb.drafter import load_drafter
    from search_heldout import heldout_tau
    work, tag = S['work'], f'_{a.recipe}_{a.seed}'
    spe = json.loads(run_in(VENV, SPEC_STEPS, *spec_args(work, a, S['mask_id'], S['store'].layer_ids, 1, 1)).split('JSON', 1)[1])['steps_per_epoch']
    epochs = max(1, math.ceil(a.steps / spe)); steps = epochs * spe
    dry = run_spec(SPEC_TRAIN, spec_args(work, a, S['mask_id'], S['store'].layer_ids, epochs, steps, dry=True, tag=tag), work / f'spec_dry{tag}.log')
    t0 = time.time()
    cpu = run_spec(SPEC_TRAIN, spec_args(work, a, S['mask_id'], S['store'].layer_ids, epochs, steps, tag=tag), work / f'spec_train{tag}.log')
    ck = sorted((p.parent for p in (work / f'spec_ckpt{tag}').rglob('config.json') if 'speculators_model_type' in p.read_text()),
                key=lambda p: p.stat().st_mtime)[-1]
    tau, acc = heldout_tau(load_drafter(ck).float(), S['held'], S['emb'], S['head'], S['mask_id'], S['dcfg'])
    return {'steps': steps, 'cpu_s': round(cpu - dry, 1), 'startup_cpu_s': round(dry, 1), 'wall_s': round(time.time() - t0, 1),
            'steps_per_epoch': spe, 'epochs': epochs, 'heldout_tau': round(tau, 4), 'heldout_acc': [round(x, 4) for x in acc[:6]],
            'settings': {**COMMON, **RECIPES[a.recipe], 'warmup_steps': steps // 100 if RECIPES[a.recipe]['warmup_ratio'] == 0.01 else None,
                         'batch': '16 anchors over rows packed into 1,024 tokens', 'amp': 'bf16 autocast (its hidden_states_dtype)',
                         'flags': spec_flags(RECIPES[a.recipe])}}


def run_ours(a, S) -> dict:
    """Our trainer at the recipe, 4 rows x 4 anchors a step (the recipe's `num_anchors` if it names one), held-out tau every `--every` steps (training CPU counted apart);
    as many steps as speculators took at the same recipe and seed when it ran first (it rounds up to whole epochs)."""
    from dflash_nb.core import seed_everything, read_json
    spec = S['work'] / f'result_spec_{a.recipe}_{a.seed}.json'
    if spec.exists(): a.steps = read_json(spec)['steps']
    from dflash_nb.drafter import DFlashDrafter
    from dflash_nb.train import Trainer, TrainConfig
    from search_heldout import heldout_tau, Rows
    seed_everything(a.seed)
    data = Rows([S['store']], [(0, i) for i in S['train_ids']])
    r = RECIPES[a.recipe]
    n = r.get('num_anchors', 4)
    cfg = TrainConfig(epochs=1000, max_steps=a.steps, num_anchors=n, batch_size=4, amp='bf16', log_every=50, ckpt_every=0, seed=a.seed,
                      tensorboard=False, **{k: v for k, v in {**COMMON, **r}.items() if k not in ('num_hidden_layers', 'block_size', 'num_anchors')})
    tr = Trainer(DFlashDrafter(S['dcfg']).init_weights(a.seed), S['emb'], S['head'], data, cfg, log=lambda m: None)
    cpu, curve = 0.0, []
    while tr.step < a.steps:
        c0 = time.process_time(); tr.fit(resume=False, stop_after=min(a.every, a.steps - tr.step)); cpu += time.process_time() - c0
        tau, acc = heldout_tau(tr.model, S['held'], S['emb'], S['head'], S['mask_id'], S['dcfg'])
        curve.append({'step': tr.step, 'cpu_s': round(cpu, 1), 'heldout_tau': round(tau, 4), 'heldout_acc': [round(x, 4) for x in acc[:6]]})
        print(a.recipe, a.seed, json.dumps(curve[-1]), flush=True)
    last = curve[-1]
    return {'steps': tr.step, 'cpu_s': last['cpu_s'], 'heldout_tau': last['heldout_tau'], 'heldout_acc': last['heldout_acc'],
            'curve': curve, 'settings': {**COMMON, **r, 'warmup_steps': math.ceil(r['warmup_ratio'] * a.steps),
                                         'batch': f'4 rows x {n} anchors', 'amp': 'bf16 autocast'}}


def cpu_to_reach(curve, tau):
    "CPU-seconds at which a curve first reaches `tau`, interpolated between its measurements (None: never)."
    prev = {'cpu_s': 0.0, 'heldout_tau': 1.0}
    for c in curve:
        if c['heldout_tau'] >= tau:
            f = (tau - prev['heldout_tau']) / max(c['heldout_tau'] - prev['heldout_tau'], 1e-9)
            return round(prev['cpu_s'] + f * (c['cpu_s'] - prev['cpu_s']), 1)
        prev = c
    return None


RUNS_HEADING = '## All runs (`--report`)'

def report(work: Path, a):
    "Gather the runs into bench/results/vs_speculators.json and a markdown table (vs_speculators.md)."
    from dflash_nb.core import read_json, write_json
    from statistics import mean
    runs = [read_json(p) for p in sorted(work.glob('result_*.json'))]
    res = {'rows': a.rows, 'heldout_rows': a.heldout, 'steps': a.steps, 'runs': runs, 'recipes': RECIPES, 'common': COMMON,
           'machine': f'{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the report (a shared machine inflates CPU-seconds)'}
    rows, summary = [], {}
    for rec in RECIPES:
        sp = [r for r in runs if r['recipe'] == rec and r['side'] == 'spec']; ou = [r for r in runs if r['recipe'] == rec and r['side'] == 'ours']
        rows += [(rec, r) for r in sp + ou]
        against = 'speculators' if not sp else rec      # a recipe speculators cannot run: against speculators' defaults
        sp = sp or [r for r in runs if r['recipe'] == 'speculators' and r['side'] == 'spec']
        if not sp or not ou: continue
        st = mean(r['heldout_tau'] for r in sp)
        reach = [cpu_to_reach(r['curve'], st) for r in ou]
        summary[rec] = {'spec_tau': round(st, 4), 'ours_tau': round(mean(r['heldout_tau'] for r in ou), 4),
                        'spec_cpu_s': round(mean(r['cpu_s'] for r in sp), 1), 'ours_cpu_s': round(mean(r['cpu_s'] for r in ou), 1),
                        'ours_cpu_s_to_spec_tau': reach, 'seeds': {'spec': [r['seed'] for r in sp], 'ours': [r['seed'] for r in ou]},
                        'speculators_recipe': against}
    res['summary'] = summary
    write_json(ROOT / 'bench' / 'results' / 'vs_speculators.json', res)
    name = lambda s: (f"{s['optimizer']}" + (f" (Muon wd {s['muon_weight_decay']}, {s['muon_adjust_lr']}; AdamW wd {s['weight_decay']})"
                      if s['optimizer'] == 'muon' else f" wd {s['weight_decay']}"))
    md = ['| recipe | trainer | seed | optimizer | schedule (warmup) | position weights | loss / | blocks a step | loss slots | steps | CPU-s | CPU-s a step | held-out tau | slot 1 | slot 2 | load at end |',
          '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
    for rec, r in rows:
        s = r['settings']
        pw = 'D-PACE a=0.5' if s['position_weights'] == 'dpace' else f"decay gamma {s['gamma']}"
        md.append(f"| {rec} | {'speculators 0.9.0' if r['side'] == 'spec' else 'ours'} | {r['seed']} | {name(s)} | "
                  f"{s['lr_schedule']} ({s['warmup_ratio']:.0%}) | {pw} | {s['loss_norm']} | {4 * s.get('num_anchors', 4)} | "
                  f"{s.get('loss_slots') or 15} | {r['steps']} | {r['cpu_s']:.0f} | "
                  f"{r['cpu_s'] / r['steps']:.3f} | {r['heldout_tau']:.3f} | {r['heldout_acc'][0]:.3f} | {r['heldout_acc'][1]:.3f} | "
                  f"{r.get('load_average_end', float('nan')):.1f} |")
    md += ['', '| ours at recipe | speculators at recipe | speculators tau (mean) | ours tau (mean) | speculators CPU-s | ours CPU-s | ours CPU-s to reach speculators\' tau |',
           '|---|---|---|---|---|---|---|']
    for rec, v in summary.items():
        md.append(f"| {rec} | {v['speculators_recipe']} | {v['spec_tau']:.3f} | {v['ours_tau']:.3f} | {v['spec_cpu_s']:.0f} | {v['ours_cpu_s']:.0f} | {v['ours_cpu_s_to_spec_tau']} |")
    md += ['', "All: lr 1e-3, clip 1.0, CE on the target's argmax, 3 layers, block 16, 4 rows a step (speculators: 16 blocks "
           "a step). CPU-s: one thread each on a 2-core machine; load at end: the 1-minute load average when the run ended "
           "(2: the two lanes of a pair alone, 3 and more: something else shared the cores and inflated the CPU-seconds)."]
    path = ROOT / 'bench' / 'results' / 'vs_speculators.md'   # the prose above RUNS_HEADING is kept
    prose = path.read_text().split(RUNS_HEADING)[0] if path.exists() else "# Beside speculators' trainer\n\n"
    path.write_text(prose + RUNS_HEADING + '\n\n' + '\n'.join(md) + '\n')
    print('\n'.join(md))


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--run', required=True); p.add_argument('--out', default=None)
    p.add_argument('--rows', type=int, default=360); p.add_argument('--heldout', type=int, default=40)
    p.add_argument('--steps', type=int, default=600); p.add_argument('--every', type=int, default=100)
    p.add_argument('--recipe', choices=list(RECIPES), default='speculators'); p.add_argument('--seed', type=int, default=0)
    p.add_argument('--side', choices=['spec', 'ours'], default=None)
    p.add_argument('--prepare', action='store_true'); p.add_argument('--report', action='store_true')
    a = p.parse_args()
    torch.set_num_threads(1)
    from dflash_nb.core import write_json
    S = setup(a)
    if a.report: return report(S['work'], a)
    if a.side is None: return
    out = (run_speculators if a.side == 'spec' else run_ours)(a, S)
    write_json(S['work'] / f'result_{a.side}_{a.recipe}_{a.seed}.json', {'side': a.side, 'recipe': a.recipe, 'seed': a.seed, **out,
               'load_average_end': os.getloadavg()[0]})
    print(a.side, a.recipe, a.seed, json.dumps({k: out[k] for k in ('steps', 'cpu_s', 'heldout_tau')}))


if __name__ == '__main__':
    main()
