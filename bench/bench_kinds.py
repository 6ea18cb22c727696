#!/usr/bin/env python
"""Training step time of each drafter kind (DFlash, DFlash2, DSpark) at the demo's shapes, and what DFlash2's dense
codebook update costs.

    python bench/bench_kinds.py                 # CPU, 1 thread, 5 interleaved rounds of 3 steps each
    python bench/bench_kinds.py --rounds 3 --steps 2

The demo drafter: 1 layer at SmolLM2-135M's width and vocabulary (H 576, V 49,152), block 16, 16 anchors a row,
slots 1..6 supervised (`loss_slots 6`), AdamW, fp32, one row of 300 tokens with random features (and, for DSpark, a
random target last state). One step = the trainer's micro step (forward, backward) on a fixed batch, then clip and AdamW, timed apart. The variant
`dflash2-frozen-codebooks` freezes the selector's two `[V, r]` codebooks: its gap to `dflash2` is the cost of their
dense gradient, clip and AdamW update. Prints a table (the minimum over the rounds, a loaded machine's best estimate)
and writes JSON to bench/results/kinds_step_<device>.json.
"""
import argparse, json, os, platform, time
from pathlib import Path
import torch
import torch.nn as nn

from dflash_nb.drafter import DFlashConfig, DFlashDrafter
from dflash_nb.train import Trainer, TrainConfig

SHAPE = dict(hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
             vocab_size=49152, num_target_layers=30, target_layer_ids=[1, 8, 14, 20, 27], mask_token_id=0,
             num_hidden_layers=1)
VARIANTS = {'dflash': dict(kind='dflash'), 'dflash2': dict(kind='dflash2'),
            'dflash2-frozen-codebooks': dict(kind='dflash2', frozen='codebook'), 'dspark': dict(kind='dspark')}


def trainer(v: dict, block_size: int, T: int = 300, seed: int = 0):
    "A Trainer on one synthetic row for variant `v`, and its batch."
    cfg = DFlashConfig(**SHAPE, block_size=block_size, kind=v['kind'])
    g = torch.Generator().manual_seed(seed)
    m = DFlashDrafter(cfg).init_weights(seed)
    for n, p in m.named_parameters():
        if v.get('frozen') and v['frozen'] in n: p.requires_grad_(False)
    emb = nn.Embedding(cfg.vocab_size, cfg.hidden_size).requires_grad_(False)
    head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False).requires_grad_(False)
    lm = torch.ones(T, dtype=torch.long); lm[:T // 8] = 0
    rows = [{'input_ids': torch.randint(0, cfg.vocab_size, (T,), generator=g), 'loss_mask': lm,
             'hidden_states': torch.randn(T, cfg.n_features, cfg.hidden_size, generator=g),
             'target_last': torch.randn(T, cfg.hidden_size, generator=g)}]
    tc = TrainConfig(num_anchors=16, loss_slots=6, gamma=2.0, optimizer='adamw', amp='none', epochs=1000, max_steps=None,
                     max_minutes=None, log_every=10**6, ckpt_every=0, tensorboard=False)
    return Trainer(m, emb, head, rows, tc, log=lambda s: None)


def cpu_name() -> str:
    "The CPU's model name and which of the flags avx2, fma, f16c, avx512f, avx512_bf16, amx_bf16 it has (Linux)."
    try: info = Path('/proc/cpuinfo').read_text()
    except OSError: return platform.processor() or platform.machine()
    name = next((l.split(':', 1)[1].strip() for l in info.splitlines() if l.startswith('model name')), platform.machine())
    flags = set(next((l.split(':', 1)[1].split() for l in info.splitlines() if l.startswith('flags')), []))
    return f"{name}, {os.cpu_count()} cores, {' '.join(f for f in ('avx2', 'fma', 'f16c', 'avx512f', 'avx512_bf16', 'amx_bf16') if f in flags)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--rounds', type=int, default=5); ap.add_argument('--steps', type=int, default=3)
    ap.add_argument('--threads', type=int, default=1); ap.add_argument('--block-size', type=int, default=16)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    trs = {k: trainer(v, a.block_size) for k, v in VARIANTS.items()}
    batches = {k: t._batch(t.micro_batches()[0], 0) for k, t in trs.items()}
    def step(t, b) -> tuple:
        "One optimizer step on batch `b`: `(forward + backward seconds, clip + AdamW update seconds)`."
        t0 = time.perf_counter(); t.micro_step(b, 1, last=True); t1 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(t.model.parameters(), t.cfg.max_grad_norm)
        for o, sc in zip(t.opts, t.scheds): o.step(); sc.step(); o.zero_grad(set_to_none=True)
        return t1 - t0, time.perf_counter() - t1
    for k, t in trs.items(): step(t, batches[k])                        # warm-up step (allocations)
    times = {k: [] for k in trs}
    for _ in range(a.rounds):                                           # interleaved: load changes hit every variant alike
        for k, t in trs.items(): times[k] += [step(t, batches[k]) for _ in range(a.steps)]
    tot = {k: sorted(f + u for f, u in ts) for k, ts in times.items()}
    base = tot['dflash'][0]
    res = {k: {'step_s': round(tot[k][0], 4), 'median_s': round(tot[k][len(tot[k]) // 2], 4), 'vs_dflash': round(tot[k][0] / base, 2),
               'fwd_bwd_s': round(min(f for f, _ in ts), 4), 'update_s': round(min(u for _, u in ts), 4),
               'trainable_params': sum(p.numel() for p in trs[k].model.parameters() if p.requires_grad)} for k, ts in times.items()}
    print(f'{cpu_name()}, {a.threads} thread(s), load average {os.getloadavg()[0]:.1f}')
    print(f"{'variant':<26}{'step s (min)':>13}{'median':>8}{'x dflash':>9}{'fwd+bwd':>9}{'update':>8}{'trainable':>13}")
    for k, r in res.items():
        print(f"{k:<26}{r['step_s']:>13.3f}{r['median_s']:>8.3f}{r['vs_dflash']:>9.2f}{r['fwd_bwd_s']:>9.3f}{r['update_s']:>8.3f}{r['trainable_params']:>13,}")
    out = {'device': 'cpu', 'cpu': cpu_name(), 'threads': a.threads, 'block_size': a.block_size,
           'rounds': a.rounds, 'steps': a.steps, 'load_average': os.getloadavg(), 'results': res}
    path = Path(__file__).parent / 'results' / 'kinds_step_cpu.json'
    path.write_text(json.dumps(out, indent=1)); print(f'wrote {path}')


if __name__ == '__main__': main()
