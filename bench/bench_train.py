#!/usr/bin/env python
"""Training throughput of the DFlash drafter (forward + backward + AdamW step of `loss.dflash_loss`).

    python bench/bench_train.py                      # CPU: the demo drafter (1 layer on SmolLM2-135M's width/vocab)
    python bench/bench_train.py --device cuda        # GPU: one Qwen3-8B-sized drafter layer (width 4096) + TFLOP/s
    python bench/bench_train.py --ce both            # chunked CE against the full logits, interleaved (median step time)

Self-contained: random weights and random features of the right shapes (no target download). Prints a table and
writes JSON to bench/results/train_<device>.json. TFLOP/s counts the matmul FLOPs of the drafter forward+backward,
the frozen LM head (forward + input-gradient) and attention (dense count over the visible keys of the mask).
"""
import argparse, json, math, platform, time
from pathlib import Path
import torch
import torch.nn as nn

try: from dflash_nb import loss as D      # the loss (70a_loss); older checkouts kept it in the drafter
except ImportError: from dflash_nb import drafter as D
from dflash_nb.drafter import DFlashConfig, DFlashDrafter, pad_anchors, sample_anchors


def call_loss(m, emb, head, ids, lm, feats, anchors, valid, **kw):
    "`loss.dflash_loss` of these tensors in either signature: `(batch, LossOptions)`, or the positional one of older checkouts."
    if hasattr(D, 'LossOptions'):
        return D.dflash_loss(m, emb, head, dict(input_ids=ids, loss_mask=lm, features=feats, anchors=anchors, valid=valid), D.LossOptions(**kw))
    return D.dflash_loss(m, emb, head, ids, lm, feats, anchors, valid, **kw)


def loss_has_ce() -> bool:
    "Whether the installed loss offers `ce` (the chunked loss)."
    import inspect
    return hasattr(D, 'LossOptions') or 'ce' in inspect.signature(D.dflash_loss).parameters

SHAPES = {   # name: drafter config + data shape
    'demo-smollm2': dict(hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                         vocab_size=49152, num_target_layers=30, target_layer_ids=[1, 8, 14, 20, 27], num_hidden_layers=1,
                         seq_len=256, num_anchors=8, batch=1),
    'qwen3-8b-layer': dict(hidden_size=4096, intermediate_size=12288, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                           vocab_size=151936, num_target_layers=36, target_layer_ids=[1, 9, 17, 25, 33], num_hidden_layers=1,
                           seq_len=3072, num_anchors=512, batch=1),
}


def flops_per_step(c, T, n_blocks, B, visible_keys):
    "Matmul FLOPs of one training step (fwd + bwd; the frozen head needs only the input gradient)."
    H, I, nh, nkv, hd, L, V = c['hidden_size'], c['intermediate_size'], c['num_attention_heads'], c['num_key_value_heads'], c['head_dim'], c['num_hidden_layers'], c['vocab_size']
    nf = len(c['target_layer_ids'])
    Q = n_blocks * B
    fc = 2 * T * nf * H * H
    per_layer = 2 * Q * H * (nh * hd + 2 * nkv * hd) + 2 * T * H * 2 * nkv * hd + 2 * Q * nh * hd * H + 2 * Q * 3 * H * I
    attn = 4 * nh * hd * visible_keys            # QK^T and PV over the visible (q, k) pairs
    train_fwd = fc + L * (per_layer + attn)
    head = 2 * n_blocks * (B - 1) * H * V
    return 3 * train_fwd + 2 * head


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--device', default='cpu')
    ap.add_argument('--shape', default=None, help=f'one of {list(SHAPES)} (default: demo on cpu, qwen3-8b-layer on cuda)')
    ap.add_argument('--steps', type=int, default=None)
    ap.add_argument('--warmup', type=int, default=None)
    ap.add_argument('--backend', default='auto', help='flex | sdpa | auto (flex on cuda)')
    ap.add_argument('--seq-len', type=int, default=None)
    ap.add_argument('--grad-checkpointing', action='store_true', help='recompute each draft layer in the backward')
    ap.add_argument('--ce', default='chunked', help='chunked (default: never the full logits) | full | both (interleaved steps; median per mode)')
    ap.add_argument('--num-anchors', type=int, default=None)
    ap.add_argument('--peak-tflops', type=float, default=989.0, help='bf16 dense peak of the GPU for MFU (H100/H200 SXM: 989)')
    ap.add_argument('--out', default=None)
    a = ap.parse_args()
    dev = torch.device(a.device)
    shape = a.shape or ('qwen3-8b-layer' if dev.type == 'cuda' else 'demo-smollm2')
    c = dict(SHAPES[shape])
    T, n_anchor, b = a.seq_len or c.pop('seq_len'), a.num_anchors or c.pop('num_anchors'), c.pop('batch')
    c.pop('seq_len', None); c.pop('num_anchors', None)
    steps = a.steps or (20 if dev.type == 'cuda' else 5)
    warm = a.warmup if a.warmup is not None else (3 if dev.type == 'cuda' else 1)
    backend = a.backend if a.backend != 'auto' else ('flex' if dev.type == 'cuda' else 'sdpa')
    cfg = DFlashConfig(**c, mask_token_id=c['vocab_size'] - 1, block_size=16, rope_theta=1e6)
    torch.manual_seed(0)
    m = DFlashDrafter(cfg).init_weights(0).to(dev)
    m.gradient_checkpointing = a.grad_checkpointing
    dt = torch.bfloat16 if dev.type == 'cuda' else torch.float32
    emb = nn.Embedding(cfg.vocab_size, cfg.hidden_size).to(dev, dt).requires_grad_(False)
    head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False).to(dev, dt).requires_grad_(False)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size - 2, (b, T), device=dev)
    lm = torch.ones(b, T, dtype=torch.long, device=dev); lm[:, :T // 8] = 0
    feats = torch.randn(b, T, cfg.n_features, cfg.hidden_size, device=dev, dtype=dt)
    anchors, valid = pad_anchors([sample_anchors(lm[i].cpu(), n_anchor, 16, seed=i) for i in range(b)])
    anchors, valid = anchors.to(dev), valid.to(dev)
    n_blocks = int(valid.sum())
    visible = sum(int(x) for x in anchors[valid].tolist()) * 16 + n_blocks * 16 * 16
    flops = flops_per_step(c, T * b, n_blocks, 16, visible)

    def step(ce):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == 'cuda'):
            out = call_loss(m, emb, head, ids, lm, feats, anchors, valid, backend=backend, ce=ce)
        out['loss'].backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step(); opt.zero_grad(set_to_none=True)
        return out['loss'].item()

    sync = torch.cuda.synchronize if dev.type == 'cuda' else (lambda: None)
    modes = ['full', 'chunked'] if a.ce == 'both' else [a.ce]
    times = {ce: [] for ce in modes}
    for i in range(warm + steps):          # modes interleaved, so load from other processes hits both alike
        for ce in modes:
            sync(); t = time.time(); step(ce); sync()
            if i >= warm: times[ce].append(time.time() - t)
    med = {ce: sorted(v)[len(v) // 2] for ce, v in times.items()}
    secs = med[modes[-1]]
    res = {'shape': shape, 'device': str(dev), 'device_name': torch.cuda.get_device_name(dev) if dev.type == 'cuda' else platform.processor() or platform.machine(),
           'threads': torch.get_num_threads(), 'backend': backend, 'grad_checkpointing': a.grad_checkpointing, 'ce': a.ce, 'timing': 'median step', 'dtype': str(dt).replace('torch.', ''),
           'seq_len': T, 'batch': b, 'blocks': n_blocks, 'block_size': 16, 'draft_layers': cfg.num_hidden_layers,
           'drafter_params': sum(p.numel() for p in m.parameters()), 'step_s': round(secs, 4),
           **({f'step_s_{ce}': round(v, 4) for ce, v in med.items()} if len(modes) > 1 else {}),
           'tokens_per_s': round(T * b / secs, 1), 'block_tokens_per_s': round(n_blocks * 16 / secs, 1),
           'tflops_per_step': round(flops / 1e12, 4), 'achieved_tflops': round(flops / secs / 1e12, 3)}
    if dev.type != 'cuda':
        import resource
        res['peak_rss_gb'] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)   # whole process, crude
    if dev.type == 'cuda':
        res['mfu_vs_peak'] = round(res['achieved_tflops'] / a.peak_tflops, 4)
        res['max_memory_gb'] = round(torch.cuda.max_memory_allocated(dev) / 2**30, 2)
    w = max(len(k) for k in res)
    for k, v in res.items(): print(f'{k:<{w}}  {v}')
    out = Path(a.out or Path(__file__).resolve().parent / 'results' / f'train_{dev.type}_{a.ce}.json')
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + '\n')
    print(f'-> {out}')


if __name__ == '__main__':
    main()
