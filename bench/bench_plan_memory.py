#!/usr/bin/env python
"""How close `dflash-nb plan`'s training-memory model is to what a training step really holds, measured on CPU.

    python bench/bench_plan_memory.py            # a few small drafters, a few seconds each

A `TorchDispatchMode` counts the bytes of every live tensor storage (added when an op creates it, removed when it is
freed) through a full training step — `loss.dflash_loss` forward under bf16 autocast (as on a GPU), backward,
AdamW step — in steady state (the second step: the AdamW moments exist). The peak is compared with
`costs.train_memory` (the trainer's parts: drafter weights, gradients, AdamW states, frozen embedding + LM head,
activations, loss; the target is not in the loop here), for each loss the installed `loss.dflash_loss` offers
(`ce='full'` materializes the logits; `ce='chunked'` where the drafter has it). With `ce='full'` a second run at twice
the vocabulary measures the bytes each logit costs at the peak (the plan assumes `logit_bytes` = 14). CPU kernels (dense SDPA mask instead of flex,
CPU autocast) differ from the GPU's in their temporaries, so this checks the model's terms, not a GPU's allocator.
Prints a table; writes bench/results/plan_memory_cpu.json.
"""
import json, sys, time, weakref
from pathlib import Path

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dflash_nb.drafter import DFlashConfig, DFlashDrafter, pad_anchors, sample_anchors
from bench_train import call_loss, loss_has_ce
from dflash_nb.costs import train_memory


class LiveBytes(TorchDispatchMode):
    "Bytes of live tensor storages: current and peak."
    def __init__(self):
        super().__init__(); self.sizes, self.cur, self.peak = {}, 0, 0
    def add(self, t):
        if not isinstance(t, torch.Tensor): return
        s = t.untyped_storage(); k = id(s)
        if k in self.sizes: return
        self.sizes[k] = n = s.nbytes(); self.cur += n; self.peak = max(self.peak, self.cur)
        weakref.finalize(s, self._free, k)
    def _free(self, k): self.cur -= self.sizes.pop(k, 0)
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]: self.add(t)
        return out


SHAPES = [dict(H=256, I=768, nh=4, nkv=2, hd=64, V=8192, layers=2, feats=3, T=512, A=32, b=2),
          dict(H=256, I=768, nh=4, nkv=2, hd=64, V=8192, layers=4, feats=3, T=512, A=32, b=1),
          dict(H=384, I=1024, nh=6, nkv=2, hd=64, V=4096, layers=1, feats=5, T=1024, A=64, b=2),
          # 1,920 block positions × 65,536 logits = 126M > one chunk (2^26): the chunked loss only (full: ~1.8 GB of logits)
          dict(H=256, I=768, nh=4, nkv=2, hd=64, V=65536, layers=1, feats=3, T=512, A=64, b=2, only='chunked')]


CE_MODES = ['full'] + (['chunked'] if loss_has_ce() else [])


def measure(s: dict, ce: str = 'full') -> int:
    "Peak live bytes of the second training step (everything: weights, states, inputs, activations, logits)."
    torch.manual_seed(0)
    cfg = DFlashConfig(hidden_size=s['H'], intermediate_size=s['I'], num_attention_heads=s['nh'], num_key_value_heads=s['nkv'],
                       head_dim=s['hd'], vocab_size=s['V'], num_target_layers=8, target_layer_ids=list(range(1, 1 + s['feats'])),
                       mask_token_id=s['V'] - 1, num_hidden_layers=s['layers'], block_size=16)
    tr = LiveBytes()
    with tr:
        m = DFlashDrafter(cfg).init_weights(0)
        emb, head = nn.Embedding(s['V'], s['H']).requires_grad_(False), nn.Linear(s['H'], s['V'], bias=False).requires_grad_(False)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        b, T, A = s['b'], s['T'], s['A']
        ids = torch.randint(0, s['V'] - 2, (b, T)); lm = torch.ones(b, T, dtype=torch.long); lm[:, :T // 8] = 0
        feats = torch.randn(b, T, s['feats'], s['H']).to(torch.bfloat16)
        anchors, valid = pad_anchors([sample_anchors(lm[i], A, 16, seed=i) for i in range(b)])
        def step():
            with torch.autocast('cpu', dtype=torch.bfloat16):
                kw = {'ce': ce} if loss_has_ce() else {}
                out = call_loss(m, emb, head, ids, lm, feats, anchors, valid, backend='sdpa', **kw)
            out['loss'].backward(); opt.step(); opt.zero_grad(set_to_none=True)
        step()
        tr.peak = tr.cur          # steady state: the second step's peak
        step()
    return tr.peak


def predicted(s: dict, ce: str = 'full', logit_bytes: float = 14) -> dict:
    dims = {'hidden_size': s['H'], 'intermediate_size': s['I'], 'num_attention_heads': s['nh'], 'num_key_value_heads': s['nkv'],
            'head_dim': s['hd'], 'vocab_size': s['V'], 'params_estimate': 0, 'tie_word_embeddings': False,
            'full_attention_layers': 0, 'linear_attention_layers': 0}
    train = {'num_hidden_layers': s['layers'], 'num_feature_layers': s['feats'], 'block_size': 16, 'num_anchors': s['A'],
             'attn_backend': 'sdpa'}
    m = train_memory(dims, train, seq=s['T'], batch=s['b'], ce=ce, P={'logit_bytes': logit_bytes})['trainer']
    m = {k: v for k, v in m.items() if not k.startswith('target')}
    m['inputs (features, ids, masks)'] = s['b'] * s['T'] * (s['feats'] * s['H'] * 2 + 16)
    return m


def main():
    rows = []
    for s in SHAPES:
        for ce in [c for c in CE_MODES if s.get('only', c) == c]:
            t = time.time(); peak = measure(s, ce); p = predicted(s, ce); per_logit = None
            if ce == 'full':
                s2 = dict(s, V=2 * s['V']); peak2 = measure(s2, ce); p2 = predicted(s2, ce)
                # bytes per logit at the peak: the vocabulary's extra bytes, less the plan's non-logit terms that grow with it
                non_logit = (sum(p2.values()) - p2['loss (logits)']) - (sum(p.values()) - p['loss (logits)'])
                per_logit = round((peak2 - peak - non_logit) / (s['b'] * s['A'] * 15 * s['V']), 2)
            rows.append({**s, 'ce': ce, 'measured_peak_mb': round(peak / 1e6, 2), 'planned_mb': round(sum(p.values()) / 1e6, 2),
                         'planned_over_measured': round(sum(p.values()) / peak, 3), 'measured_bytes_per_logit': per_logit,
                         'planned_parts_mb': {k: round(v / 1e6, 2) for k, v in p.items()}, 'seconds': round(time.time() - t, 1)})
    hdr = f"{'H':>5} {'I':>5} {'V':>6} {'layers':>6} {'seq':>5} {'anchors':>7} {'batch':>5} {'ce':>8} {'measured MB':>12} {'planned MB':>11} {'ratio':>6} {'B/logit':>8}"
    print(hdr)
    for r in rows:
        print(f"{r['H']:>5} {r['I']:>5} {r['V']:>6} {r['layers']:>6} {r['T']:>5} {r['A']:>7} {r['b']:>5} {r['ce']:>8} {r['measured_peak_mb']:>12} "
              f"{r['planned_mb']:>11} {r['planned_over_measured']:>6} {str(r['measured_bytes_per_logit']):>8}")
    out = Path(__file__).resolve().parent / 'results' / 'plan_memory_cpu.json'
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({'torch': torch.__version__, 'rows': rows}, indent=2) + '\n')
    print(f'-> {out}')


if __name__ == '__main__':
    main()
