#!/usr/bin/env python
"""Our trainer beside speculators 0.9.0's DFlash trainer, on the same exported rows, the same drafter (3 layers,
block 16, SmolLM2's layers [1, 8, 14, 20, 27]), the same lr, schedule, loss (CE on the target's argmax, decay
gamma 2, all 15 slots) and the same number of optimizer steps; then both drafters measured by the same code:
held-out teacher-forced tau and slot accuracies on rows neither saw (`search_heldout.heldout_tau`), and CPU-seconds
per optimizer step.

    python bench/bench_vs_speculators.py --run RUN [--rows 360] [--heldout 40] [--steps 600] [--out WORK]

RUN holds self-distilled rows (the target's own greedy answers) with stored features that include the last layer
(`include_last`: speculators computes its labels from it) and at least the top-1 target labels (ours reads them):
`RUN/50_tokenization/dataset` and `RUN/60_hidden_states/features`. The first `--rows` rows train both; the last
`--heldout` rows measure both. Writes bench/results/vs_speculators.json and prints a table.

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


def spec_args(work: Path, a, mask_id: int, layer_ids, epochs: int, total_steps: int, dry: bool = False) -> list:
    from dflash_nb.core import to_aux_layer_ids
    from dflash_nb.targets import resolve_target
    args = ['--speculator-type', 'dflash', '--verifier-name-or-path', resolve_target('smollm2'),
            '--data-path', work / 'export', '--save-path', work / ('spec_dry' if dry else 'spec_ckpt'),
            '--num-layers', 3, '--full-attention-indices', 0, 1, 2, '--block-size', 16, '--target-layer-ids', *to_aux_layer_ids(layer_ids),
            '--mask-token-id', mask_id, '--draft-vocab-size', 49152, '--max-anchors', 16, '--total-seq-len', 1024,
            '--lr', a.lr, '--scheduler-type', 'cosine', '--scheduler-warmup-ratio', 0.04,
            '--scheduler-total-steps', total_steps, '--epochs', epochs, '--loss-fn', 'ce', '--loss-implementation', 'eager',
            '--dflash-decay-gamma', 2.0, '--per-position-loss-weight', 'fixed-exp-decay', '--draft-attn-impl', 'sdpa',
            '--num-workers', 0, '--hidden-states-dtype', 'bfloat16', '--train-data-ratio', (a.rows + 0.5) / (a.rows + 1), '--seed', 0,
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--run', required=True); p.add_argument('--out', default=None)
    p.add_argument('--rows', type=int, default=360); p.add_argument('--heldout', type=int, default=40)
    p.add_argument('--steps', type=int, default=600); p.add_argument('--lr', type=float, default=1e-3)
    p.add_argument('--skip_spec', action='store_true', help='reuse the speculators checkpoint and timing of an earlier run')
    p.add_argument('--amp', default='bf16', help="ours: 'bf16' autocast on the CPU or 'none' (fp32, as speculators runs here)")
    p.add_argument('--max_grad_norm', type=float, default=1.0, help='ours: gradient clipping norm (1e9: none)')
    p.add_argument('--ours_steps', type=int, default=None, help="ours: optimizer steps (default: speculators' steps)")
    p.add_argument('--tag', default='', help='results go to bench/results/vs_speculators[_TAG].json')
    a = p.parse_args()
    torch.set_num_threads(1)
    from transformers import AutoConfig
    from dflash_nb.core import seed_everything, write_json, read_json
    from dflash_nb.drafter import DFlashDrafter, build_config, resolve_mask_token_id, load_drafter
    from dflash_nb.targets import load_tokenizer, resolve_target
    from dflash_nb.train import Trainer, TrainConfig, load_target_head
    from search_heldout import heldout_tau, Rows
    run = Path(a.run).resolve(); work = Path(a.out or ROOT / 'runs' / 'vs_speculators').resolve(); work.mkdir(parents=True, exist_ok=True)
    store, train_ids, held_ids = prepare(run, work, a.rows, a.heldout)
    tok = load_tokenizer('smollm2'); tcfg = AutoConfig.from_pretrained(resolve_target('smollm2'))
    mask_id = resolve_mask_token_id(tok, tcfg.vocab_size, '<empty_output>')
    emb, head = load_target_head('smollm2')
    held = [store[i] for i in held_ids]
    # 1. speculators: its steps per epoch, a dry run (start-up cost), then the training
    res = {'rows': len(train_ids), 'heldout_rows': len(held_ids), 'run': str(run)}
    if not a.skip_spec:
        from interop_venvs import run_in
        spe = json.loads(run_in(VENV, SPEC_STEPS, *spec_args(work, a, mask_id, store.layer_ids, 1, 1)).split('JSON', 1)[1])['steps_per_epoch']
        epochs = max(1, math.ceil(a.steps / spe)); steps = epochs * spe
        dry = run_spec(SPEC_TRAIN, spec_args(work, a, mask_id, store.layer_ids, epochs, steps, dry=True), work / 'spec_dry.log')
        t0 = time.time()
        cpu = run_spec(SPEC_TRAIN, spec_args(work, a, mask_id, store.layer_ids, epochs, steps), work / 'spec_train.log')
        write_json(work / 'spec_timing.json', {'steps_per_epoch': spe, 'epochs': epochs, 'steps': steps, 'cpu_s': cpu,
                                               'startup_cpu_s': dry, 'wall_s': time.time() - t0})
    st = read_json(work / 'spec_timing.json')
    ck = sorted((p.parent for p in (work / 'spec_ckpt').rglob('config.json') if 'speculators_model_type' in p.read_text()),
                key=lambda p: p.stat().st_mtime)[-1]
    spec = load_drafter(ck)
    # 2. ours: the same rows, the same number of steps, 4 rows x 4 anchors a step
    seed_everything(0)
    data = Rows([store], [(0, i) for i in train_ids])
    dcfg = build_config(tcfg, mask_id, num_hidden_layers=3, block_size=16, target_layer_ids=store.layer_ids)
    cfg = TrainConfig(epochs=1000, max_steps=a.ours_steps or st['steps'], lr=a.lr, warmup_ratio=0.04, num_anchors=4,
                      batch_size=4, gamma=2.0, amp=a.amp, max_grad_norm=a.max_grad_norm,
                      labels='target', loss='ce', log_every=50, ckpt_every=0, seed=0, tensorboard=False)
    tr = Trainer(DFlashDrafter(dcfg).init_weights(0), emb, head, data, cfg, log=lambda m: None)
    c0 = time.process_time(); tr.fit(); ours_cpu = time.process_time() - c0
    # 3. both measured by the same code
    out = {}
    for name, model, cpu, steps in (('speculators', spec, st['cpu_s'] - st['startup_cpu_s'], st['steps']),
                                    ('ours', tr.model, ours_cpu, tr.step)):
        tau, acc = heldout_tau(model.float(), held, emb, head, mask_id, dcfg)
        out[name] = {'steps': steps, 'cpu_s': round(cpu, 1), 'cpu_s_per_step': round(cpu / steps, 4),
                     'heldout_tau': round(tau, 4), 'heldout_acc': [round(x, 4) for x in acc[:6]]}
    res.update(out, speculators_timing=st, ratio_cpu_per_step=round(out['speculators']['cpu_s_per_step'] / out['ours']['cpu_s_per_step'], 2),
               machine=f'{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end (a shared machine inflates CPU-seconds)')
    res['ours_settings'] = {'amp': a.amp, 'max_grad_norm': a.max_grad_norm, 'steps': a.ours_steps or st['steps'],
                            'batch_size': 4, 'num_anchors': 4}
    write_json(ROOT / 'bench' / 'results' / f"vs_speculators{'_' + a.tag if a.tag else ''}.json", res)
    print(f"{'trainer':<14}{'steps':>7}{'CPU s/step':>12}{'held-out tau':>14}{'slot 1':>8}{'slot 2':>8}")
    for k, v in out.items():
        print(f"{k:<14}{v['steps']:>7}{v['cpu_s_per_step']:>12.3f}{v['heldout_tau']:>14.3f}{v['heldout_acc'][0]:>8.3f}{v['heldout_acc'][1]:>8.3f}")
    print(f"speculators / ours CPU-seconds per step: {res['ratio_cpu_per_step']}x")


if __name__ == '__main__':
    main()
