#!/usr/bin/env python
"""What raises tau per CPU-minute, measured cheaply: train one drafter variant on a run's offline features for a
wall-clock budget and, every 200 steps, measure the *held-out teacher-forced tau*: on the last `--holdout` rows
(never trained on), 64 anchors each, the mean of 1 + the number of leading slots whose argmax equals the row's
token. On self-distilled rows (the target's own greedy answers) this is what speculative decoding would accept
with those features, without running the target; bench/quality_search.py and `dflash-nb evaluate` decode for real.

    python bench/search_heldout.py --run runs/X --name NAME [--layers 3] [--init random|target] [--lr 1e-3]
        [--anchors 16] [--gamma G] [--loss_slots K] [--amp bf16|none] [--minutes 5] [--threads 1] [--sched_steps N]

Prints one JSON line per measurement and writes bench/results/search_heldout/NAME.json ({args, curve}).
Two variants at a time with --threads 1 share a 2-core machine fairly (the comparisons in the README ran so).
"""
import argparse, json, time, sys, math
from pathlib import Path
import torch
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from transformers import AutoConfig
from dflash_nb.core import seed_everything
from dflash_nb.drafter import DFlashDrafter, build_config, resolve_mask_token_id, block_labels, build_masks, sample_anchors, pad_anchors
from dflash_nb.hidden_states import FeatureStore
from dflash_nb.targets import load_tokenizer, resolve_target
from dflash_nb.train import Trainer, TrainConfig, load_target_head, init_drafter_from_target, eligible_rows, collate

p = argparse.ArgumentParser()
p.add_argument('--run', default=str(ROOT / 'runs' / 'smollm2_quality')); p.add_argument('--name', required=True)
p.add_argument('--layers', type=int, default=3); p.add_argument('--init', default='target')
p.add_argument('--lr', type=float, default=1e-3); p.add_argument('--anchors', type=int, default=16)
p.add_argument('--gamma', type=float, default=None); p.add_argument('--bs', type=int, default=1)
p.add_argument('--amp', default='none'); p.add_argument('--minutes', type=float, default=4)
p.add_argument('--threads', type=int, default=1); p.add_argument('--steps', type=int, default=100000)
p.add_argument('--holdout', type=int, default=48); p.add_argument('--warmup', type=float, default=0.04)
p.add_argument('--epochs', type=int, default=100); p.add_argument('--sched_steps', type=int, default=None)
p.add_argument('--wd', type=float, default=0.0); p.add_argument('--loss_slots', type=int, default=None)
a = p.parse_args()
torch.set_num_threads(a.threads); seed_everything(0)
data = FeatureStore(Path(a.run) / '60_hidden_states' / 'features')
tok = load_tokenizer('smollm2'); tcfg = AutoConfig.from_pretrained(resolve_target('smollm2'))
mask_id = resolve_mask_token_id(tok, tcfg.vocab_size, '<empty_output>')
dcfg = build_config(tcfg, mask_id, num_hidden_layers=a.layers, block_size=16, target_layer_ids=data.layer_ids)
dr = DFlashDrafter(dcfg).init_weights(0)
rows = eligible_rows(data, 16, True)[0]
train_rows, held = rows[:-a.holdout], rows[-a.holdout:]
if a.init == 'target': init_drafter_from_target(dr, 'smollm2', features=data[train_rows[0]]['hidden_states'], log=lambda m: None)
emb, head = load_target_head('smollm2')
cfg = TrainConfig(epochs=a.epochs, lr=a.lr, num_anchors=a.anchors, max_steps=a.sched_steps or a.steps, log_every=100, ckpt_every=0,
                  seed=0, warmup_ratio=a.warmup, gamma=a.gamma, batch_size=a.bs, amp=a.amp, max_minutes=a.minutes, weight_decay=a.wd, loss_slots=a.loss_slots)
tr = Trainer(dr, emb, head, data, cfg, out_dir=None, rows=train_rows, log=lambda m: None)

@torch.no_grad()
def heldout(model):
    model.eval(); B = 16; lens = []; acc = torch.zeros(15); cnt = torch.zeros(15)
    for i in held:
        b = collate([data[i]], None); T = b['input_ids'].shape[1]
        an = sample_anchors(b['loss_mask'][0, :b['lengths'][0]], 64, B, 123, 0, i, True)
        if len(an) == 0: continue
        anchors, valid = pad_anchors([an])
        pos, labels, sup = block_labels(b['input_ids'], b['loss_mask'], anchors, valid, B, b['lengths'])
        ids = torch.full_like(labels, mask_id); ids[..., 0] = b['input_ids'].gather(1, anchors)
        n = anchors.shape[1]
        masks = build_masks(dcfg, anchors, T, None, 'sdpa')
        h = model(emb(ids.view(1, n * B)), b['hidden_states'] if 'hidden_states' in b else b['features'], torch.arange(T)[None], pos.view(1, n * B), masks)
        pred = head(h.view(1, n, B, -1)[:, :, 1:]).argmax(-1)
        hit = (pred == labels[:, :, 1:]) & sup[:, :, 1:]
        s = sup[:, :, 1:]
        acc += hit.sum((0, 1)).float(); cnt += s.sum((0, 1)).float()
        lead = torch.cumprod((hit | ~s).int(), -1) * s.int()   # leading correct among supervised
        lens += (1 + lead.sum(-1)).flatten().tolist()
    model.train()
    return sum(lens) / len(lens), (acc / cnt.clamp(min=1)).tolist()
t0 = time.time(); curve = []
while True:
    r = tr.fit(resume=False, stop_after=200)
    tau, acc = heldout(tr.model)
    el = round(time.time() - t0, 1)
    train_acc = tr.history[-1]['acc'][:3] if tr.history else None
    curve.append({'step': tr.step, 'seconds': el, 'heldout_tau': round(tau, 4), 'heldout_acc': [round(x, 3) for x in acc[:5]],
                  'train_loss': tr.history[-1]['loss'] if tr.history else None, 'train_acc': train_acc})
    print(a.name, json.dumps(curve[-1]), flush=True)
    if r.get('stopped') != 'stop_after' or time.time() - t0 > a.minutes * 60 or tr.step >= a.steps: break
out = ROOT / 'bench' / 'results' / 'search_heldout' / f'{a.name}.json'; out.parent.mkdir(parents=True, exist_ok=True)
json.dump({'args': vars(a), 'curve': curve}, open(out, 'w'), indent=1)
