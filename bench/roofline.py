#!/usr/bin/env python
"""Each CPU stage against this machine's matmul roofline, measured in one run.

For regeneration (the in-process HF backend: `transformers.generate` as before, the in-place decoding loop after),
the features pass (`features.extract_features`) and a training step (`train.benchmark_step` on the quality
run's drafter), all on SmolLM2-135M-Instruct in bfloat16 as the stages run it:

  * achieved GFLOP/s: the stage's FLOPs over its wall time. Regeneration counts only useful work, analytically:
    2 x (matmul parameters) per prompt and generated token, the LM head once per generated token, and causal
    attention over each token's real context (4 x heads x head_dim x context per layer); padding and the tokens a
    row computes after its stop are not counted. The features pass and the training step count what runs: every
    matmul (a dispatch-mode census of `mm`/`addmm`/`bmm`/`baddbmm`, forward and backward) plus fused attention
    (4 x b x h x q x k x d, halved when causal; x2.5 for its backward). The analytic count is checked against the
    census on one forward.
  * matmul roofline at its shapes: every matmul the stage ran (the census: shapes, dtype, threads), replayed alone
    as one pass in which each call has its own operands, so the pass reads as many weights as the stage does
    (a decoding step streams all ~270 MB of SmolLM2's bf16 weights; one shape replayed in a hot cache never does:
    that figure is reported too); roofline GFLOP/s = their FLOPs / the pass's best time. `fraction` = achieved /
    roofline: the share of the stage's time its matmuls alone would take. The same pass in float32 gives the fp32
    roofline. Shapes whose operands, as the stage laid them out (strides, frozen weights), run over 3x slower than
    dense ones are listed.

    python bench/roofline.py                             # 1 thread, CPU-seconds, 128 rows x 64 new tokens
    python bench/roofline.py --threads 2 --clock wall --max-new-tokens 128   # an idle machine: wall-clock rates

Prints a table and writes bench/results/roofline.json. The load average (1 min) is printed at the start and the end:
on a shared machine every rate falls, so the fractions are the comparable part.
"""
import argparse, collections, json, os, platform, resource, statistics, sys, time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'bench'))
aten = torch.ops.aten
MM = {aten.mm.default: 'mm', aten.addmm.default: 'addmm', aten.bmm.default: 'bmm', aten.baddbmm.default: 'baddbmm',
      aten.linear.default: 'linear', aten.matmul.default: 'matmul'}   # inference mode dispatches linear/matmul undecomposed
CLOCK = 'cpu'   # set by --clock: cpu (seconds of CPU this process used: robust on a shared machine) or wall
OPS = {'mm': torch.mm, 'addmm': torch.addmm, 'bmm': torch.bmm, 'baddbmm': torch.baddbmm,
       'linear': torch.nn.functional.linear, 'matmul': torch.matmul}


def cpu_seconds() -> float:
    "CPU seconds of this process, all threads."
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def mm_flops(name, shapes) -> int:
    "FLOPs of one matmul call from its operand shapes."
    prod = lambda xs: int(torch.tensor(xs, dtype=torch.float64).prod().item()) if xs else 1
    if name == 'linear':                          # x [..., K] @ weight [N, K]^T
        x, w = shapes[0][0], shapes[1][0]
        return 2 * prod(x[:-1]) * x[-1] * w[0]
    a, b = shapes[-2][0], shapes[-1][0]          # the two matrix operands (addmm/baddbmm: the first is the bias)
    batch = torch.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])) if len(a) > 2 or len(b) > 2 else ()
    return 2 * prod(batch) * a[-2] * a[-1] * b[-1]


def sdpa_flops(func, args, kwargs) -> int:
    "FLOPs of a fused attention call: 4 b h q k d (QK^T and PV), halved when causal; backward x2.5 (with recompute)."
    q, k = (args[1], args[2]) if 'backward' in str(func) else (args[0], args[1])   # backward: grad_out first
    b, h, sq, d = q.shape
    f = 4 * b * h * sq * k.shape[-2] * d
    causal = kwargs.get('is_causal', next((x for x in args[3:] if isinstance(x, bool)), False))
    f = f // 2 if causal and sq == k.shape[-2] else f
    return int(f * 2.5) if 'backward' in str(func) else f


class Census(TorchDispatchMode):
    """Every matmul (op; operand shapes, strides and whether they require grad; dtype; inference mode) and the FLOPs
    of every fused attention call run inside."""
    def __init__(self):
        super().__init__(); self.mm, self.attn = collections.Counter(), 0
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in MM:
            ts = [a for a in args if isinstance(a, torch.Tensor)][:3]
            ops = tuple((tuple(t.shape), tuple(t.stride()), t.requires_grad) for t in ts)
            self.mm[(MM[func], ops, ts[-1].dtype, torch.is_inference_mode_enabled())] += 1
        elif 'scaled_dot_product' in str(func) and isinstance(args[1], torch.Tensor) and args[1].dim() == 4:
            self.attn += sdpa_flops(func, args, kwargs)
        return out
    def mm_flops(self) -> int: return sum(n * mm_flops(k[0], k[1]) for k, n in self.mm.items())
    def __sub__(self, other):
        c = Census(); c.mm = self.mm - other.mm; c.attn = self.attn - other.attn; return c


def operands(ops, dtype, as_run: bool):
    "Random operands: as run (same strides, same requires_grad), or dense (row-major or transposed, no grad)."
    out = []
    for shape, stride, grad in ops:
        if as_run: t = torch.empty_strided(shape, stride, dtype=dtype).uniform_(-1, 1).requires_grad_(grad)
        elif len(shape) >= 2 and stride[-1] != 1 and stride[-2] == 1:      # a transposed matrix stays transposed
            t = torch.empty(*shape[:-2], shape[-1], shape[-2], dtype=dtype).uniform_(-1, 1).transpose(-1, -2)
        else: t = torch.empty(shape, dtype=dtype).uniform_(-1, 1)
        out.append(t)
    return out


def time_call(op, ts, min_s: float) -> float:
    "Best of 3 mean times of `op(*ts)`, on the clock chosen by `--clock` (CPU seconds of this process, or wall)."
    op(*ts)
    best = float('inf')
    for _ in range(3):
        reps, t0, c0 = 0, time.perf_counter(), cpu_seconds()
        while reps < 2 or time.perf_counter() - t0 < min_s / 3:
            op(*ts); reps += 1
        best = min(best, ((cpu_seconds() - c0) if CLOCK == 'cpu' else (time.perf_counter() - t0)) / reps)
    return max(best, 1e-9)


def replay(census: Census, dtype=None, as_run: bool = False, min_s: float = 0.3, slow: list | None = None) -> float:
    """Seconds the census's matmuls take alone, in their dtype or `dtype`: with dense operands (the roofline), or
    exactly as run (`as_run`: strides, requires_grad, inference mode). `slow` collects shapes whose as-run time is
    over 3x the dense time."""
    total = 0.0
    for (name, ops, dt, inference), n in census.mm.items():
        op = OPS[name]
        with torch.inference_mode(inference or not as_run):
            t = time_call(op, operands(ops, dtype or dt, as_run), min_s)
            if slow is not None:
                dense = time_call(op, operands(ops, dtype or dt, False), min_s)
                if t > 3 * dense: slow.append({'op': name, 'operands': ops, 'dtype': str(dt), 'as_run_ms': round(t * 1e3, 2),
                                               'dense_ms': round(dense * 1e3, 2), 'calls': n})
        total += n * t
    return total


def replay_pass(census: Census, dtype=None, budget_mb: int = 256, reps: int = 3) -> float:
    """Seconds of one pass over all the census's matmuls in a row, each call with its own operands (up to `budget_mb`
    per shape, then reused round-robin): the stage's matmuls alone with the stage's working set -- a decoding step
    reads each of its ~270 MB of weights once, which a hot-cache replay of one shape never does."""
    calls = []
    for (name, ops, dt, _), n in census.mm.items():
        t = dtype or dt
        nbytes = sum(torch.Size(shape).numel() for shape, _, _ in ops) * torch.empty(0, dtype=t).element_size()
        copies = [operands(ops, t, False) for _ in range(min(n, max(1, budget_mb * 2**20 // max(nbytes, 1))))]
        calls += [(OPS[name], copies[i % len(copies)]) for i in range(n)]
    def one():
        for op, ts in calls: op(*ts)
    with torch.inference_mode():
        one()
        best = float('inf')
        for _ in range(reps):
            t0, c0 = time.perf_counter(), cpu_seconds(); one()
            best = min(best, (cpu_seconds() - c0) if CLOCK == 'cpu' else (time.perf_counter() - t0))
    return max(best, 1e-9)


def roofline(census: Census) -> dict:
    """Matmul GFLOP/s of the census's shapes: a pass over all of them with the stage's working set (the roofline),
    each shape alone in a hot cache, as run (strides, requires_grad), and the pass in float32."""
    f, slow = census.mm_flops(), []
    as_run = replay(census, as_run=True, slow=slow)
    return {'mm_gflop': round(f / 1e9, 3), 'roofline_gflops': round(f / replay_pass(census) / 1e9, 1),
            'hot_cache_gflops': round(f / replay(census) / 1e9, 1), 'as_run_gflops': round(f / as_run / 1e9, 1),
            'roofline_fp32_gflops': round(f / replay_pass(census, torch.float32) / 1e9, 1), 'slow_layouts': slow}


# --- regeneration ---------------------------------------------------------------------------------------------

def model_dims(model) -> dict:
    c = model.config
    hd = getattr(c, 'head_dim', None) or c.hidden_size // c.num_attention_heads
    per_layer = c.hidden_size * hd * (2 * c.num_attention_heads + 2 * c.num_key_value_heads) + 3 * c.hidden_size * c.intermediate_size
    return dict(L=c.num_hidden_layers, H=c.hidden_size, V=c.vocab_size, heads=c.num_attention_heads, hd=hd,
                dense=per_layer * c.num_hidden_layers)


def useful_flops(dims, prompt_len: int, new_tokens: int) -> dict:
    "FLOPs of one row: prefill of its prompt and `new_tokens` generated (the first comes from the prefill's logits)."
    attn = lambda ctx: 4 * dims['L'] * dims['heads'] * dims['hd'] * ctx
    prefill = 2 * dims['dense'] * prompt_len + sum(attn(i + 1) for i in range(prompt_len)) + 2 * dims['H'] * dims['V']
    steps = max(new_tokens - 1, 0)
    decode = steps * (2 * dims['dense'] + 2 * dims['H'] * dims['V']) + sum(attn(prompt_len + j + 1) for j in range(steps))
    return {'prefill': prefill, 'decode': decode, 'prefill_dense': 2 * dims['dense'] * prompt_len + 2 * dims['H'] * dims['V'],
            'decode_dense': steps * (2 * dims['dense'] + 2 * dims['H'] * dims['V'])}


def check_count(model, dims):
    "The analytic count against the census on one unpadded prefill + one decode step (must agree within 2%)."
    from dflash_nb.decoding import greedy_decode
    p = list(range(100, 164))
    with Census() as one: greedy_decode(model, [p], 0, [], 1)
    with Census() as two: greedy_decode(model, [p], 0, [], 2)
    want = useful_flops(dims, len(p), 2)
    got = two.mm_flops() + two.attn
    assert abs(got / (want['prefill'] + want['decode']) - 1) < 0.02, (got, want)
    return {'analytic': want['prefill'] + want['decode'], 'census': got}


def regen(model, tok, dims, reqs, gen, setting) -> dict:
    from dflash_nb.backends import BackendOptions, HFBackend; from dflash_nb.decoding import greedy_decode
    be = HFBackend(model, tok, BackendOptions(batch_size=setting['batch']), decoder=setting['decoder'])
    c0, t0 = cpu_seconds(), time.perf_counter()
    res = be.generate(reqs, gen)
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    lens = [len(tok(be.render(r, gen), add_special_tokens=False)['input_ids']) for r in reqs]
    fl = [useful_flops(dims, p, r.new_tokens) for p, r in zip(lens, res)]
    tot = {k: sum(f[k] for f in fl) for k in fl[0]}
    # the matmul shapes of this setting: one prefill and one decode step of a batch of its size (prompts of median length)
    b, med = min(setting['batch'], len(reqs)), sorted(lens)[len(lens) // 2]
    ps = [[100 + (i % 50)] * med for i in range(b)]
    with Census() as pre: greedy_decode(model, ps, 0, [], 1)
    with Census() as both: greedy_decode(model, ps, 0, [], 2)
    rp, rd = roofline(pre), roofline(both - pre)
    took = cpu if CLOCK == 'cpu' else wall
    roof_s = tot['prefill_dense'] / (rp['roofline_gflops'] * 1e9) + tot['decode_dense'] / (rd['roofline_gflops'] * 1e9)
    roof32_s = tot['prefill_dense'] / (rp['roofline_fp32_gflops'] * 1e9) + tot['decode_dense'] / (rd['roofline_fp32_gflops'] * 1e9)
    flops, dense = tot['prefill'] + tot['decode'], tot['prefill_dense'] + tot['decode_dense']
    toks = sum(r.new_tokens for r in res)
    return {'stage': 'regenerate', 'setting': setting['label'], 'rows': len(reqs), 'new_tokens': toks,
            'prompt_tokens': sum(lens), 'seconds': round(wall, 2), 'cpu_seconds': round(cpu, 2),
            'tokens_per_s': round(toks / wall, 1), 'tokens_per_cpu_s': round(toks / cpu, 1), 'gflop': round(flops / 1e9, 2),
            'achieved_gflops': round(flops / took / 1e9, 1),
            'roofline_gflops': round(dense / roof_s / 1e9, 1), 'roofline_fp32_gflops': round(dense / roof32_s / 1e9, 1),
            'fraction': round(roof_s / took, 3), 'decode_step_roofline_gflops': rd['roofline_gflops'],
            'prefill_roofline_gflops': rp['roofline_gflops'], 'as_run_decode_gflops': rd['as_run_gflops'],
            'hot_cache_decode_gflops': rd['hot_cache_gflops'],
            'slow_layouts': rp['slow_layouts'] + rd['slow_layouts'], 'texts': [r.text for r in res]}


# --- features and training ------------------------------------------------------------------------------------

def features(model, rows: int, seq: int, layer_ids) -> dict:
    from dflash_nb.features import extract_features
    ids = torch.randint(100, model.config.vocab_size - 100, (rows, seq), generator=torch.Generator().manual_seed(0))
    extract_features(model, ids, layer_ids)
    with Census() as c: extract_features(model, ids, layer_ids)
    walls, cpus = [], []
    for _ in range(3):
        t0, c0 = time.perf_counter(), cpu_seconds(); extract_features(model, ids, layer_ids)
        walls.append(time.perf_counter() - t0); cpus.append(cpu_seconds() - c0)
    wall, cpu, flops = statistics.median(walls), statistics.median(cpus), c.mm_flops() + c.attn
    took = cpu if CLOCK == 'cpu' else wall
    r = roofline(c)
    return {'stage': 'hidden_states', 'setting': f'extract_features, {rows} x {seq} tokens, layers {layer_ids}',
            'tokens': rows * seq, 'seconds': round(wall, 3), 'cpu_seconds': round(cpu, 3),
            'tokens_per_s': round(rows * seq / wall, 1), 'tokens_per_cpu_s': round(rows * seq / cpu, 1),
            'gflop': round(flops / 1e9, 2), 'achieved_gflops': round(flops / took / 1e9, 1), **r,
            'fraction': round(flops / took / 1e9 / r['roofline_gflops'], 3)}


def train_step(seq: int, layers: int, anchors: int, amp: str) -> dict:
    from dflash_nb.train import benchmark_step, bench_drafter_config, TrainConfig
    cfg = bench_drafter_config(5, hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3,
                               head_dim=64, vocab_size=49152, num_hidden_layers=layers, block_size=16)
    kw = dict(cfg=cfg, tc=TrainConfig(num_anchors=anchors, batch_size=1, amp=amp), seq_len=seq, device='cpu')
    with Census() as c: benchmark_step(**kw, steps=0)
    c0, t0 = cpu_seconds(), time.perf_counter()
    out = benchmark_step(**kw, steps=5)         # a warm-up step and 5 timed ones: CPU seconds per step over all 6
    cpu = (cpu_seconds() - c0) / 6
    flops, r = c.mm_flops() + c.attn, roofline(c)
    took = cpu if CLOCK == 'cpu' else out['step_s']
    return {'stage': 'train', 'setting': f'benchmark_step: {layers} draft layers, 1 row x {seq} tokens, {anchors} anchors, '
            f'amp {amp}', 'tokens': out['tokens'], 'seconds': out['step_s'], 'cpu_seconds': round(cpu, 3),
            'tokens_per_s': out['tokens_per_s'], 'tokens_per_cpu_s': round(out['tokens'] / cpu, 1),
            'gflop': round(flops / 1e9, 2), 'achieved_gflops': round(flops / took / 1e9, 1), **r,
            'fraction': round(flops / took / 1e9 / r['roofline_gflops'], 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--clock', default='cpu', choices=('cpu', 'wall'),
                    help='cpu: GFLOP per CPU-second of this process (robust on a shared machine; use with 1 thread); '
                         'wall: per second (an idle machine)')
    ap.add_argument('--rows', type=int, default=128, help='regeneration: rows (built-in alpaca prompts)')
    ap.add_argument('--max-new-tokens', type=int, default=64)
    ap.add_argument('--batches', default='32,128', help='regeneration batch sizes of the in-place loop')
    ap.add_argument('--before-batch', type=int, default=32, help="regeneration with transformers' generate (the quality run's batch)")
    ap.add_argument('--feature-rows', type=int, default=8); ap.add_argument('--feature-seq', type=int, default=512)
    ap.add_argument('--train-seq', type=int, default=256); ap.add_argument('--train-layers', type=int, default=3)
    ap.add_argument('--train-anchors', type=int, default=16); ap.add_argument('--amp', default='bf16')
    ap.add_argument('--skip', default='', help='comma-separated: regenerate, features, train')
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'roofline.json'))
    a = ap.parse_args()
    global CLOCK
    CLOCK = a.clock
    torch.set_num_threads(a.threads)
    load0 = os.getloadavg()
    print(f'load average at start: {load0[0]:.2f} (1 min) on {os.cpu_count()} cores; torch threads {a.threads}', flush=True)
    from bench_regenerate import prompts
    from dflash_nb.regenerate import GenConfig, GenRequest
    from dflash_nb.models import load_target
    model, tok = load_target('smollm2', device='cpu', dtype='bfloat16')
    dims, rows, skip = model_dims(model), [], set(filter(None, a.skip.split(',')))
    count_check = check_count(model, dims)
    print('FLOP count check (analytic vs census, one prefill + one step):', count_check, flush=True)
    if 'regenerate' not in skip:
        reqs = [GenRequest([{'role': 'user', 'content': p}]) for p in prompts(a.rows)]
        gen = GenConfig(max_new_tokens=a.max_new_tokens)
        settings = [{'label': f'before: generate, batch {a.before_batch}', 'decoder': 'generate', 'batch': a.before_batch}]
        settings += [{'label': f'after: in-place loop, batch {b}', 'decoder': 'auto', 'batch': int(b)} for b in a.batches.split(',')]
        for s in settings:
            rows.append(regen(model, tok, dims, reqs, gen, s))
            print({k: v for k, v in rows[-1].items() if k != 'texts'}, flush=True)
        base = rows[0]['texts']
        for r in rows: r['same_text_as_before'] = round(sum(x == y for x, y in zip(r.pop('texts'), base)) / len(base), 3)
    if 'features' not in skip:
        rows.append(features(model, a.feature_rows, a.feature_seq, [1, 8, 14, 20, 27])); print(rows[-1], flush=True)
    if 'train' not in skip:
        rows.append(train_step(a.train_seq, a.train_layers, a.train_anchors, a.amp)); print(rows[-1], flush=True)
    load1 = os.getloadavg()
    print(f'\nload average (1 min): {load0[0]:.2f} at start, {load1[0]:.2f} at the end, {os.cpu_count()} cores'
          + ('' if max(load0[0], load1[0]) < 0.5 * (os.cpu_count() or 1) else ' -- NOT idle: every rate is depressed'))
    for r in rows:
        for x in r.get('slow_layouts') or []: print(f"slow layout in {r['stage']} ({r['setting']}): {x}")
    per = 'CPU-second' if CLOCK == 'cpu' else 'second'
    print(f'\nGFLOP/s below are GFLOP per {per} ({a.threads} thread(s))')
    print('| stage | setting | tokens/s (wall) | tokens per CPU-s | achieved GFLOP/s | bf16 matmul roofline at its shapes '
          '| fraction | fp32 roofline |')
    print('|---|---|---|---|---|---|---|---|')
    for r in rows:
        print(f"| {r['stage']} | {r['setting']} | {r['tokens_per_s']} | {r['tokens_per_cpu_s']} | {r['achieved_gflops']} | "
              f"{r['roofline_gflops']} | {r['fraction']:.2f} | {r['roofline_fp32_gflops']} |")
    info = {'threads': a.threads, 'clock': CLOCK, 'cpu_count': os.cpu_count(), 'load_avg_start': load0, 'load_avg_end': load1,
            'machine': platform.machine(), 'processor': platform.processor(), 'torch': torch.__version__,
            'args': vars(a), 'flop_count_check': count_check, 'results': rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(info, indent=2) + '\n')
    print(f'wrote {a.out}')


if __name__ == '__main__':
    main()
