#!/usr/bin/env python
"""What raises tau per CPU-minute, measured cheaply: train one drafter recipe on stored features (one or more runs'
`60_hidden_states/features`) and, every `--every` steps, measure the *held-out teacher-forced tau*: on held-out rows
the target wrote itself (regenerated, greedy; never trained on, and their prompts left out of every training set),
64 anchors each, the mean of 1 + the number of leading slots whose argmax equals the row's next tokens. On such rows
the text is the target's own greedy continuation, so this is what speculative decoding would accept with those
features, without running the target. `bench/bench_quality.py` and `dflash-nb evaluate` decode for real.

    python bench/search_heldout.py --name NAME --train RUN [RUN ...] --heldout RUN [--n_heldout 64]
        [--labels text|target] [--loss ce|kl] [--kl_topk 8] [--layers 3] [--lr 1e-3] [--anchors 16] [--bs 1]
        [--gamma 2] [--loss_slots 6] [--amp bf16|none] [--max_grad_norm 1.0] [--minutes 20] [--cpu_minutes M]
        [--every 200] [--threads 1] [--sched_steps N] [--max_rows N] [--head_bf16]
        [--optimizer adamw|muon] [--lr_schedule cosine|linear] [--position_weights decay|dpace] [--loss_norm weights|count]
        [--weight_decay 0.01] [--muon_lr LR] [--muon_adjust_lr match_rms_adamw|original]

The held-out rows are the last `--n_heldout` rows of the `--heldout` run's features; rows with the same ids are left
out of every `--train` run. Costs are CPU-seconds of this process (`time.process_time`; training and held-out
measurement counted apart), so two runs at a time with `--threads 1` on a shared machine compare fairly. The data's
own cost (regeneration, features) is measured by `bench/bench_label_costs.py` and added when the curves are plotted
(`bench/plot_labels.py`). Prints one JSON line per measurement; writes bench/results/search_heldout/NAME.json.
"""
import argparse, json, sys, time
from pathlib import Path
import torch
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from transformers import AutoConfig
from dflash_nb.core import seed_everything
from dflash_nb.drafter import DFlashDrafter, build_config, resolve_mask_token_id, build_masks, sample_anchors, pad_anchors
from dflash_nb.loss import block_labels
from dflash_nb.features import FeatureStore
from dflash_nb.models import load_tokenizer, resolve_target
from dflash_nb.train import Trainer, TrainConfig, eligible_rows, collate
from dflash_nb.target_weights import load_target_head, init_drafter_from_target


class Rows:
    "Several feature stores as one indexable of rows (`(store, id)` pairs)."
    def __init__(self, stores, keys): self.stores, self.keys = stores, keys
    def __len__(self): return len(self.keys)
    def __getitem__(self, i):
        s, sid = self.keys[i]
        return self.stores[s][sid]
    meta = None


def load_rows(train_runs, heldout_run, n_heldout, max_rows=None):
    "`(train Rows, held-out rows [dict])`: the held-out ids (last rows of `heldout_run`) are left out of every run."
    held_store = FeatureStore(Path(heldout_run) / '60_hidden_states' / 'features')
    held_ids = held_store.ids[-n_heldout:]
    held = [held_store[i] for i in held_ids]
    stores, keys = [], []
    for r in train_runs:
        st = FeatureStore(Path(r) / '60_hidden_states' / 'features')
        stores.append(st)
        keys += [(len(stores) - 1, sid) for sid in st.ids if sid not in set(held_ids)]
    if max_rows: keys = [keys[i] for i in torch.randperm(len(keys), generator=torch.Generator().manual_seed(0))[:max_rows].tolist()]
    return Rows(stores, keys), held


@torch.no_grad()
def block_leads(model, r, an, emb, head, mask_id, dcfg, full_slots=2, acc=None, cnt=None):
    """Teacher-forced, per anchor position `an` of row `r`: how many leading slots' argmax equal the row's next tokens
    (an unsupervised slot neither counts nor stops the run). The accuracy of slots 1..`full_slots` is added into
    `acc` and `cnt`. Past `full_slots` the LM head runs only on blocks still correct so far."""
    B = dcfg.block_size; b = collate([r], None); T = b['input_ids'].shape[1]
    anchors, valid = pad_anchors([an])
    pos, labels, sup = block_labels(b['input_ids'], b['loss_mask'], anchors, valid, B, b['lengths'])
    ids = torch.full_like(labels, mask_id); ids[..., 0] = b['input_ids'].gather(1, anchors)
    n = anchors.shape[1]
    h = model(emb(ids.view(1, n * B)), b['features'], torch.arange(T)[None], pos.view(1, n * B),
              build_masks(dcfg, anchors, T, None, 'sdpa')).view(n, B, -1)[:, 1:]
    s, lab = sup[0, :, 1:], labels[0, :, 1:]
    alive, lead = torch.ones(n, dtype=torch.bool), torch.zeros(n)
    for k in range(B - 1):
        need = s[:, k] & (alive | (k < full_slots))
        hit = torch.zeros(n, dtype=torch.bool)
        if need.any(): hit[need] = head(h[need, k].to(head.weight.dtype)).argmax(-1) == lab[need, k]
        if k < full_slots and acc is not None: acc[k] += hit.sum().float(); cnt[k] += s[:, k].sum().float()
        alive = alive & (hit | ~s[:, k]); lead += (alive & s[:, k]).float()
        if not alive.any() and k + 1 >= full_slots: break
    return lead

@torch.no_grad()
def heldout_tau(model, held, emb, head, mask_id, dcfg, n_anchors=64, full_slots=2):
    """Teacher-forced tau and the accuracy of slots 1..`full_slots` on the held-out rows (labels: the rows' own next
    tokens). tau = the mean of 1 + the leading correct slots of each block (`block_leads`) over `n_anchors` random
    anchors a row."""
    model.eval(); lens = []; acc = torch.zeros(full_slots); cnt = torch.zeros(full_slots)
    for i, r in enumerate(held):
        b = collate([r], None)
        an = sample_anchors(b['loss_mask'][0, :b['lengths'][0]], n_anchors, dcfg.block_size, 123, 0, i, True)
        if len(an) == 0: continue
        lens += (1 + block_leads(model, r, an, emb, head, mask_id, dcfg, full_slots, acc, cnt)).tolist()
    model.train()
    return sum(lens) / len(lens), (acc / cnt.clamp(min=1)).tolist()

def main():
    p = argparse.ArgumentParser()
    p.add_argument('--name', required=True); p.add_argument('--train', nargs='+', required=True)
    p.add_argument('--heldout', required=True); p.add_argument('--n_heldout', type=int, default=64)
    p.add_argument('--labels', default='text'); p.add_argument('--loss', default='ce'); p.add_argument('--kl_topk', type=int, default=8)
    p.add_argument('--layers', type=int, default=3); p.add_argument('--init', default='random')
    p.add_argument('--lr', type=float, default=1e-3); p.add_argument('--anchors', type=int, default=16)
    p.add_argument('--gamma', type=float, default=2.0); p.add_argument('--bs', type=int, default=1)
    p.add_argument('--loss_slots', type=int, default=6); p.add_argument('--amp', default='bf16')
    p.add_argument('--max_grad_norm', type=float, default=1.0); p.add_argument('--minutes', type=float, default=20)
    p.add_argument('--cpu_minutes', type=float, default=None, help='stop when training has used this many CPU-minutes')
    p.add_argument('--every', type=int, default=200); p.add_argument('--threads', type=int, default=1)
    p.add_argument('--steps', type=int, default=100000); p.add_argument('--sched_steps', type=int, default=None)
    p.add_argument('--warmup', type=float, default=0.04); p.add_argument('--epochs', type=int, default=100)
    p.add_argument('--max_rows', type=int, default=None); p.add_argument('--head_bf16', action='store_true')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--optimizer', default='adamw'); p.add_argument('--lr_schedule', default='cosine')
    p.add_argument('--position_weights', default='decay'); p.add_argument('--loss_norm', default='weights')
    p.add_argument('--weight_decay', type=float, default=0.0); p.add_argument('--muon_lr', type=float, default=None)
    p.add_argument('--muon_adjust_lr', default='match_rms_adamw')
    a = p.parse_args()
    torch.set_num_threads(a.threads); seed_everything(a.seed)
    data, held = load_rows(a.train, a.heldout, a.n_heldout, a.max_rows)
    tok = load_tokenizer('smollm2'); tcfg = AutoConfig.from_pretrained(resolve_target('smollm2'))
    mask_id = resolve_mask_token_id(tok, tcfg.vocab_size, '<empty_output>')
    dcfg = build_config(tcfg, mask_id, num_hidden_layers=a.layers, block_size=16, target_layer_ids=data.stores[0].layer_ids)
    dr = DFlashDrafter(dcfg).init_weights(a.seed)
    rows = eligible_rows(data, 16, True)[0]
    if a.init == 'target': init_drafter_from_target(dr, 'smollm2', features=data[rows[0]]['hidden_states'], log=lambda m: None)
    emb, head = load_target_head('smollm2')
    if a.head_bf16: head = head.to(torch.bfloat16)      # the head in the autocast dtype: no per-step cast of 28M weights
    cfg = TrainConfig(epochs=a.epochs, lr=a.lr, num_anchors=a.anchors, max_steps=a.sched_steps or a.steps, log_every=50,
                      ckpt_every=0, seed=a.seed, warmup_ratio=a.warmup, gamma=a.gamma, batch_size=a.bs, amp=a.amp,
                      max_minutes=a.minutes, loss_slots=a.loss_slots, max_grad_norm=a.max_grad_norm, labels=a.labels,
                      loss=a.loss, kl_topk=a.kl_topk, tensorboard=False, optimizer=a.optimizer, lr_schedule=a.lr_schedule,
                      position_weights=a.position_weights, loss_norm=a.loss_norm, weight_decay=a.weight_decay,
                      muon_lr=a.muon_lr, muon_adjust_lr=a.muon_adjust_lr)
    tr = Trainer(dr, emb, head, data, cfg, out_dir=None, rows=rows, log=lambda m: None)
    out = ROOT / 'bench' / 'results' / 'search_heldout' / f'{a.name}.json'; out.parent.mkdir(parents=True, exist_ok=True)
    train_cpu = eval_cpu = 0.0; t0 = time.time(); curve = []
    tau, acc = heldout_tau(tr.model, held, emb, head, mask_id, dcfg)
    curve.append({'step': 0, 'train_cpu_s': 0.0, 'wall_s': 0.0, 'heldout_tau': round(tau, 4), 'heldout_acc': [round(x, 4) for x in acc[:6]]})
    print(a.name, json.dumps(curve[-1]), flush=True)
    while True:
        c0 = time.process_time(); r = tr.fit(resume=False, stop_after=a.every); train_cpu += time.process_time() - c0
        c0 = time.process_time(); tau, acc = heldout_tau(tr.model, held, emb, head, mask_id, dcfg); eval_cpu += time.process_time() - c0
        h = tr.history[-1] if tr.history else {}
        curve.append({'step': tr.step, 'train_cpu_s': round(train_cpu, 1), 'wall_s': round(time.time() - t0, 1),
                      'heldout_tau': round(tau, 4), 'heldout_acc': [round(x, 4) for x in acc[:6]],
                      'train_loss': h.get('loss'), 'train_acc': (h.get('acc') or [None])[:3], 'grad_norm': h.get('grad_norm'),
                      'epoch': tr.epoch})
        print(a.name, json.dumps(curve[-1]), flush=True)
        json.dump({'args': vars(a), 'rows': len(rows), 'train_tokens_per_row': None, 'eval_cpu_s': round(eval_cpu, 1),
                   'curve': curve}, open(out, 'w'), indent=1)
        if r.get('stopped') != 'stop_after' or tr.step >= a.steps: break
        if a.cpu_minutes and train_cpu > a.cpu_minutes * 60: break
        if time.time() - t0 > a.minutes * 60: break


if __name__ == '__main__':
    main()
