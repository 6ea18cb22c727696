#!/usr/bin/env python
"""Benchmark of hidden-state extraction (stage 60).

CPU (default): SmolLM2-135M-Instruct on chat samples; tokens/s of (a) this stage (`extract_to_disk`: length-sorted
batches under a token budget, decoder only with an early stop, validation and safetensors shards written) against
(b) a naive loop (one sample at a time, the full causal LM with `output_hidden_states=True` and logits), and the ratio.

CUDA (`--device cuda`): a random-weight Qwen3 of ~1.5B parameters at realistic width (hidden 2048, 24 layers, vocab
151936), bf16; tokens/s of the feature function alone, of the whole stage (to disk), and of the naive loop; achieved
TFLOP/s (matmuls + causal attention, up to the deepest layer used) against the device's dense bf16 matrix rate.

    python bench/bench_hidden_states.py [--device cuda] [--samples N]

Prints a table and writes bench/results/hidden_states[_cuda].json.
"""
import argparse, json, math, os, random, shutil, sys, tempfile, time
from pathlib import Path

import torch

from dflash_nb import hidden_states as H
from dflash_nb.core import fixtures_dir, versions

PEAK_BF16_TFLOPS = {'H200': 989.0, 'H100': 989.0, 'A100': 312.0, 'L40S': 362.0, 'A10G': 125.0, 'L4': 121.0}

def chat_dataset(tok, n, max_len, seed=0):
    "Tokenized chat samples: the alpaca fixture when present, else the built-in synthetic set."
    from datasets import Dataset
    fx = fixtures_dir()
    src = fx / 'data' / 'general' / 'alpaca_en_demo.json' if fx else None
    if not (src and src.exists()): return H.synthetic_dataset(tok, n=n, seed=seed)
    rows = json.loads(src.read_text())
    random.Random(seed).shuffle(rows)
    out = []
    for i, r in enumerate(rows[:n]):
        q = r['instruction'] + ('\n' + r['input'] if r.get('input') else '')
        p = tok(f'<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n', add_special_tokens=False)['input_ids']
        a = tok(f"{r['output']}<|im_end|>\n", add_special_tokens=False)['input_ids']
        ids, mask = (p + a)[:max_len], ([0] * len(p) + [1] * len(a))[:max_len]
        out.append({'id': f'alpaca-{i}', 'source': 'alpaca', 'input_ids': ids, 'loss_mask': mask, 'seq_len': len(ids)})
    return Dataset.from_list(out)

def random_dataset(n, vocab, lo, hi, seed=0):
    from datasets import Dataset
    g = random.Random(seed)
    rows = []
    for i in range(n):
        L = g.randint(lo, hi)
        rows.append({'id': f'r{i}', 'source': 'random', 'input_ids': [g.randrange(10, vocab) for _ in range(L)],
                     'loss_mask': [1] * L, 'seq_len': L})
    return Dataset.from_list(rows)

def sync(dev):
    if str(dev).startswith('cuda'): torch.cuda.synchronize()

def naive_loop(model, ds, layer_ids, dev):
    "One sample at a time, full model with logits and output_hidden_states, features taken as hidden_states[L+1]."
    n_tok = 0
    sync(dev); t = time.time()
    with torch.inference_mode():
        for r in ds:
            ids = torch.tensor([r['input_ids']], device=dev)
            out = model(ids, output_hidden_states=True)
            f = torch.stack([out.hidden_states[L + 1] for L in layer_ids], 2).to(torch.bfloat16).cpu()
            n_tok += ids.shape[1]
    sync(dev)
    return n_tok, time.time() - t

def features_only(model, ds, layer_ids, dev, max_batch_tokens, max_batch_size):
    "The stage's feature function over length-sorted batches, results kept on the device (no validation, no disk)."
    rows = list(ds)
    lens = [len(r['input_ids']) for r in rows]
    batches = H.make_batches(lens, max_batch_tokens, max_batch_size)
    n_tok = 0
    sync(dev); t = time.time()
    for b in batches:
        x, am, l = H.collate([rows[i] for i in b])
        f = H.extract_features(model, x.to(dev), layer_ids, attention_mask=am.to(dev)).to(torch.bfloat16)
        n_tok += sum(l)
    sync(dev)
    return n_tok, time.time() - t

def flops_per_sample(cfg, T, deepest):
    "Forward FLOPs of layers 0..deepest for one sequence of T tokens: 2 x matmul params x T + causal attention."
    D, I, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    per_layer_params = D * (q + 2 * kv) + q * D + 3 * D * I
    attn = 2 * 2 * cfg.num_attention_heads * hd * T * (T + 1) / 2     # QK^T and PV, causal
    return (deepest + 1) * (2 * per_layer_params * T + attn)

def qwen3_1p5b(device):
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.for_model('qwen3', hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
                               num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                               max_position_embeddings=8192, tie_word_embeddings=False, rms_norm_eps=1e-6)
    torch.manual_seed(0)
    with torch.device(device): model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    for p in model.parameters():
        if p.ndim >= 2: torch.nn.init.normal_(p, 0, 0.02)
    return model.eval(), cfg

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--device', default='cpu'); ap.add_argument('--samples', type=int, default=None)
    ap.add_argument('--naive-samples', type=int, default=None)
    ap.add_argument('--out', default=str(Path(__file__).parent / 'results'))
    ap.add_argument('--peak-tflops', type=float, default=None, help='dense bf16 rate of the device (default: by name)')
    a = ap.parse_args()
    dev = a.device
    res = {'device': dev, 'versions': versions(), 'rows': []}
    tmp = Path(tempfile.mkdtemp(prefix='bench_hs_'))
    try:
        if dev == 'cpu':
            from dflash_nb.models import load_target
            model, tok = load_target('smollm2', device='cpu')
            cfg = model.config
            ids = H.resolve_layer_ids(cfg.num_hidden_layers)
            ds = chat_dataset(tok, a.samples or 32, 1024)
            naive_ds = ds.select(range(min(a.naive_samples or len(ds), len(ds))))
            res.update(model='SmolLM2-135M-Instruct', layer_ids=ids, samples=len(ds), threads=torch.get_num_threads())
            H.extract_features(model, torch.tensor([ds[0]['input_ids']]), ids)   # warm-up
            n1, t1 = naive_loop(model, naive_ds, ids, dev)
            n2, t2 = features_only(model, ds, ids, dev, 4096, 32)
            t = time.time()
            opts = H.ExtractOptions(layer_ids=ids, max_batch_tokens=4096, max_batch_size=32, shard_mb=16, label_topk=0)
            r = H.extract_to_disk(ds, 'smollm2', tmp / 'f', opts, model=model, ranks=(0, 1), progress=False)
            t3, n3 = time.time() - t, r['index']['n_tokens']
            rows = [('naive loop (1 sample, logits, output_hidden_states)', n1, t1),
                    ('feature function, batched (no disk)', n2, t2),
                    ('stage: extract_to_disk (validate + shards + index)', n3, t3)]
        else:
            assert torch.cuda.is_available(), 'CUDA is not available'
            name = torch.cuda.get_device_name(0)
            peak = a.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
            model, cfg = qwen3_1p5b(dev)
            ids = H.resolve_layer_ids(cfg.num_hidden_layers)
            n_params = sum(p.numel() for p in model.parameters())
            ds = random_dataset(a.samples or 256, cfg.vocab_size, 256, 3072)
            naive_ds = ds.select(range(a.naive_samples or 32))
            res.update(model=f'random Qwen3 {n_params / 1e9:.2f}B (hidden 2048, 24 layers)', gpu=name, peak_bf16_tflops=peak,
                       layer_ids=ids, samples=len(ds))
            features_only(model, ds.select(range(8)), ids, dev, 65536, 64)   # warm-up
            n1, t1 = naive_loop(model, naive_ds, ids, dev)
            n2, t2 = features_only(model, ds, ids, dev, 65536, 64)
            t = time.time()
            opts = H.ExtractOptions(layer_ids=ids, max_batch_tokens=65536, max_batch_size=64, shard_mb=1024, label_topk=0)
            r = H.extract_to_disk(ds, 'random-qwen3-1.5b', tmp / 'f', opts, model=model, ranks=(0, 1), progress=False)
            t3, n3 = time.time() - t, r['index']['n_tokens']
            fl = lambda d: sum(flops_per_sample(cfg, len(x), max(ids)) for x in d['input_ids'])
            fl_naive = sum(flops_per_sample(cfg, len(x), cfg.num_hidden_layers - 1) + 2 * cfg.hidden_size * cfg.vocab_size * len(x)
                           for x in naive_ds['input_ids'])
            rows = [('naive loop (1 sample, logits, output_hidden_states)', n1, t1, fl_naive),
                    ('feature function, batched (no disk)', n2, t2, fl(ds)),
                    ('stage: extract_to_disk (validate + shards + index)', n3, t3, fl(ds))]
        print(f"\nhidden-state extraction, {res['model']} on {res.get('gpu', dev)} (layers {ids})")
        print(f"{'method':<55} {'tokens':>9} {'s':>8} {'tok/s':>10} {'x naive':>8}" + (f" {'TFLOP/s':>8} {'% peak':>7}" if dev != 'cpu' else ''))
        base = rows[0][1] / rows[0][2]
        for row in rows:
            name, n, t = row[:3]
            d = {'method': name, 'tokens': n, 'seconds': round(t, 3), 'tokens_per_s': round(n / t, 1),
                 'speedup_vs_naive': round(n / t / base, 2)}
            line = f"{name:<55} {n:>9} {t:>8.2f} {n / t:>10.0f} {n / t / base:>8.2f}"
            if len(row) > 3:
                tf = row[3] / t / 1e12
                d.update(tflops=round(tf, 1), pct_peak=round(100 * tf / res['peak_bf16_tflops'], 1) if res.get('peak_bf16_tflops') else None)
                line += f" {tf:>8.1f} {d['pct_peak'] if d['pct_peak'] is not None else '-':>7}"
            res['rows'].append(d); print(line)
        Path(a.out).mkdir(parents=True, exist_ok=True)
        out = Path(a.out) / ('hidden_states.json' if dev == 'cpu' else 'hidden_states_cuda.json')
        out.write_text(json.dumps(res, indent=2) + '\n'); print(f'wrote {out}')
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

if __name__ == '__main__':
    main()
