#!/usr/bin/env python
"""One-GPU check of the numbers `dflash-nb plan` assumes, in at most ~8 minutes; run it through `bench/gpu_check.sh`.

    bash bench/gpu_check.sh                          # GPU: production drafter shapes, SmolLM2 regeneration/extraction
    bash bench/gpu_check.sh --device cpu --tiny      # CPU smoke test (seconds): tiny shapes, the same code paths

Sections (each time-boxed; an error or a timeout is recorded in its section and the next one runs; the JSON is
rewritten after every section, so it exists even when the whole script is killed):

- `matmul`: an 8192³ bf16 matrix product, the achieved ceiling next to the datasheet peak;
- `train_step`: forward + backward + AdamW of `loss.dflash_loss` at the production drafter's shapes (1 and 5
  layers at width 5120, Qwen3.6-27B heads 24/4 × 256, FFN 17408, vocabulary 248,320, sequence 3072, 512 anchors,
  block 16), fp32 master weights under bf16 autocast as `train.Trainer` runs it: tokens/s, achieved TFLOP/s against
  the GPU's bf16 peak, peak memory, and the number of torch.compile graphs (flex attention);
- `regenerate`: SmolLM2-135M greedy generation at batch 64 (`model.generate`, as `regenerate.HFBackend` calls it,
  every row forced to `max_new_tokens`): generated tokens/s;
- `extract`: `features.extract_features` at the DFlash layers of SmolLM2: tokens/s;
- `lossless`: `evaluate.speculative_generate` with a freshly initialised drafter against `evaluate.plain_generate`
  in bf16 (GPU) or fp32 (CPU): the outputs must be identical, or first differ at a numeric tie
  (`evaluate.check_lossless`: the target's two tokens there within its own rounding); tau does not matter here;
- `benchmark_step`: `train.benchmark_step` (the Trainer's own path: batching, compilation buckets) at the production
  shapes with the most layers, when the checkout has it (recorded as skipped otherwise).

SmolLM2: the converted weights in the dflash_nb cache when present (`--model PATH` to point elsewhere), else random
weights of SmolLM2-135M's architecture (throughput and the lossless identity do not need trained weights; the JSON
says which). Nothing is downloaded. Results: `bench/results/gpu_check.json` (or `--out`).
"""
import argparse, contextlib, inspect, json, math, os, platform, signal, sys, time, traceback
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))                        # bench_train's FLOP count
sys.path.insert(0, str(HERE.parent))                 # the repo's dflash_nb

PEAK_BF16_TFLOPS = {'H100': 989.0, 'H200': 989.0, 'B200': 2250.0, 'A100': 312.0, 'L40S': 362.0}

QWEN36_DRAFTER = dict(hidden_size=5120, intermediate_size=17408, num_attention_heads=24, num_key_value_heads=4, head_dim=256,
                      vocab_size=248320, num_target_layers=64, target_layer_ids=[1, 16, 31, 46, 61], mask_token_id=248070,
                      block_size=16, rope_theta=1e7)
TINY_DRAFTER = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    vocab_size=1000, num_target_layers=4, target_layer_ids=[0, 2], mask_token_id=999, block_size=16, rope_theta=1e4)
SMOLLM2 = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
               head_dim=64, vocab_size=49152, max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0,
               tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2)
TINY_LLAMA = dict(SMOLLM2, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, vocab_size=1000)


class SectionTimeout(Exception): pass


@contextlib.contextmanager
def time_box(seconds: float):
    "Raise SectionTimeout in the main thread after `seconds` (SIGALRM; checked between Python bytecodes)."
    def handler(sig, frame): raise SectionTimeout(f'section exceeded its {seconds:.0f} s time box')
    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, max(1.0, seconds))
    try: yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def sync(dev):
    if dev.type == 'cuda': torch.cuda.synchronize(dev)


def free(dev):
    import gc
    gc.collect()
    if dev.type == 'cuda':
        torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats(dev)


def peak_gb(dev):
    return round(torch.cuda.max_memory_allocated(dev) / 1e9, 2) if dev.type == 'cuda' else None


def compile_count() -> int:
    "Graphs torch.compile has produced so far (dynamo's unique_graphs counter)."
    try:
        from torch._dynamo.utils import counters
        return int(counters['stats']['unique_graphs'])
    except Exception: return -1


def gpu_peak(dev, override=None):
    if override: return float(override)
    if dev.type != 'cuda': return None
    name = torch.cuda.get_device_name(dev)
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


# -- sections ---------------------------------------------------------------------------------------------------------
def sec_env(a, dev):
    import transformers
    info = {'python': sys.version.split()[0], 'executable': sys.executable, 'torch': torch.__version__,
            'transformers': transformers.__version__, 'cuda': torch.version.cuda, 'device': str(dev),
            'platform': platform.platform(), 'threads': torch.get_num_threads()}
    if dev.type == 'cuda':
        p = torch.cuda.get_device_properties(dev)
        info.update(device_name=p.name, memory_gb=round(p.total_memory / 1e9, 1), sms=p.multi_processor_count,
                    capability=f'{p.major}.{p.minor}', bf16_peak_tflops=gpu_peak(dev, a.peak_tflops))
    return info


def sec_matmul(a, dev):
    n = 256 if a.tiny else 8192
    dt = torch.bfloat16 if dev.type == 'cuda' else torch.float32
    x, y = torch.randn(n, n, device=dev, dtype=dt), torch.randn(n, n, device=dev, dtype=dt)
    for _ in range(3): x @ y
    sync(dev); t = time.perf_counter(); reps = 10
    for _ in range(reps): x @ y
    sync(dev); s = (time.perf_counter() - t) / reps
    return {'n': n, 'dtype': str(dt).replace('torch.', ''), 'seconds': round(s, 6), 'tflops': round(2 * n ** 3 / s / 1e12, 2)}


def train_step_once(a, dev, layers: int) -> dict:
    import torch.nn as nn
    from dflash_nb.drafter import DFlashConfig, DFlashDrafter, pad_anchors, sample_anchors
    from bench_train import flops_per_step, call_loss, loss_has_ce
    shape = dict(TINY_DRAFTER if a.tiny else QWEN36_DRAFTER)
    T, A, b = (128, 8, 1) if a.tiny else (a.seq_len, a.num_anchors, a.batch)
    cfg = DFlashConfig(**shape, num_hidden_layers=layers)
    B = cfg.block_size
    backend = 'flex' if dev.type == 'cuda' else 'sdpa'
    amp = dev.type == 'cuda'
    hd = torch.bfloat16 if dev.type == 'cuda' else torch.float32
    torch.manual_seed(0)
    with torch.device(dev):                              # built on the device: no minutes of CPU init at 1.8B parameters
        m = DFlashDrafter(cfg)                           # fp32 master weights, as Trainer keeps them
        emb = nn.Embedding(cfg.vocab_size, cfg.hidden_size, dtype=hd).requires_grad_(False)
        head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False, dtype=hd).requires_grad_(False)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith('norm.weight'): p.fill_(1.0)
            else: p.normal_(0, 0.02)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size - 2, (b, T), device=dev)
    lm = torch.ones(b, T, dtype=torch.long, device=dev); lm[:, :T // 8] = 0
    feats = torch.randn(b, T, cfg.n_features, cfg.hidden_size, device=dev, dtype=hd)
    anchors, valid = pad_anchors([sample_anchors(lm[i].cpu(), A, B, seed=i) for i in range(b)])
    anchors, valid = anchors.to(dev), valid.to(dev)
    n_blocks = int(valid.sum())
    visible = sum(int(x) for x in anchors[valid].tolist()) * B + n_blocks * B * B
    c = dict(shape, num_hidden_layers=layers)
    flops = flops_per_step(c, T * b, n_blocks, B, visible)

    ce = 'chunked' if loss_has_ce() else 'full'
    def step():
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            out = call_loss(m, emb, head, ids, lm, feats, anchors, valid, backend=backend, **({'ce': ce} if ce == 'chunked' else {}))
        out['loss'].backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step(); opt.zero_grad(set_to_none=True)
        return float(out['loss'].detach())

    g0 = compile_count(); t0 = time.perf_counter()
    for _ in range(a.warmup): loss = step()
    sync(dev); warm_s = time.perf_counter() - t0
    t = time.perf_counter()
    for _ in range(a.steps): loss = step()
    sync(dev); s = (time.perf_counter() - t) / a.steps
    peak = gpu_peak(dev, a.peak_tflops)
    res = {'layers': layers, 'hidden_size': cfg.hidden_size, 'vocab_size': cfg.vocab_size, 'seq_len': T, 'num_anchors': A,
           'batch': b, 'blocks': n_blocks, 'backend': backend, 'drafter_params': sum(p.numel() for p in m.parameters()),
           'loss': round(loss, 4), 'warmup_s': round(warm_s, 2), 'step_s': round(s, 4), 'tokens_per_s': round(T * b / s, 1),
           'block_tokens_per_s': round(n_blocks * B / s, 1), 'flop_per_step': int(flops), 'tflop_per_step': round(flops / 1e12, 3),
           'achieved_tflops': round(flops / s / 1e12, 2), 'bf16_peak_tflops': peak,
           'mfu': round(flops / s / 1e12 / peak, 4) if peak else None, 'peak_memory_gb': peak_gb(dev),
           'compilations': compile_count() - g0 if g0 >= 0 else None, 'finite': math.isfinite(loss), 'ce': ce,
           'planned_peak_gb': planned_train_gb(shape, layers, T, A, b, ce, backend, hd)}
    del m, opt, emb, head, feats
    return res


def planned_train_gb(shape: dict, layers: int, T: int, A: int, b: int, ce: str, backend: str, head_dtype) -> float | None:
    "What `dflash-nb plan`'s memory model says this step holds (trainer only, no target): to compare with the peak."
    try:
        from dflash_nb.costs import train_memory
        dims = {'hidden_size': shape['hidden_size'], 'intermediate_size': shape['intermediate_size'], 'head_dim': shape['head_dim'],
                'num_attention_heads': shape['num_attention_heads'], 'num_key_value_heads': shape['num_key_value_heads'],
                'vocab_size': shape['vocab_size'], 'params_estimate': 0, 'tie_word_embeddings': False,
                'full_attention_layers': 0, 'linear_attention_layers': 0}
        tr = {'num_hidden_layers': layers, 'num_feature_layers': len(shape['target_layer_ids']), 'block_size': shape['block_size'],
              'num_anchors': A, 'attn_backend': backend}
        kw = {'ce': ce} if 'ce' in inspect.signature(train_memory).parameters else {}
        m = train_memory(dims, tr, seq=T, batch=b, P={'head_bytes': torch.finfo(head_dtype).bits // 8}, **kw)['trainer']
        inputs = b * T * (len(shape['target_layer_ids']) * shape['hidden_size'] * 2 + 16)
        return round((sum(v for k, v in m.items() if not k.startswith('target')) + inputs) / 1e9, 4)
    except Exception as e:
        return None


def sec_train_step(a, dev):
    out = []
    for L in ([1] if a.tiny else a.layers):
        free(dev)
        try: out.append(train_step_once(a, dev, L))
        except SectionTimeout: raise
        except Exception as e:   # e.g. out of memory at 5 layers: record it, keep the smaller result
            out.append({'layers': L, 'error': f'{type(e).__name__}: {str(e)[:400]}'})
        free(dev)
    return {'runs': out}


def sec_benchmark_step(a, dev):
    "The training colleague's `train.benchmark_step` (the real Trainer path) at the same shapes, when this checkout has it."
    from dflash_nb import train
    if not hasattr(train, 'benchmark_step'): return {'skipped': 'train.benchmark_step is not in this checkout'}
    sh = dict(TINY_DRAFTER if a.tiny else QWEN36_DRAFTER)
    T, A, b = (128, 8, 1) if a.tiny else (a.seq_len, a.num_anchors, a.batch)
    shape = dict(hidden_size=sh['hidden_size'], intermediate_size=sh['intermediate_size'], num_attention_heads=sh['num_attention_heads'],
                 num_key_value_heads=sh['num_key_value_heads'], head_dim=sh['head_dim'], vocab_size=sh['vocab_size'],
                 num_hidden_layers=1 if a.tiny else max(a.layers), block_size=sh['block_size'])
    args = dict(shape, n_features=len(sh['target_layer_ids']), seq_len=T, num_anchors=A, batch_size=b, device=str(dev), steps=a.steps)
    free(dev)
    if 'cfg' in inspect.signature(train.benchmark_step).parameters:   # the trainer's own step at a config (this checkout)
        res = train.benchmark_step(train.bench_drafter_config(len(sh['target_layer_ids']), **shape),
                                   train.TrainConfig(num_anchors=A, batch_size=b), seq_len=T, device=str(dev), steps=a.steps)
    else:                                                              # an older checkout: shapes as keywords
        params = inspect.signature(train.benchmark_step).parameters
        res = train.benchmark_step(**{k: v for k, v in args.items() if k in params})
    free(dev)
    return {'args': args, **res}


def load_llama(a, dev, dtype):
    "(model, how): SmolLM2 from --model / the dflash_nb cache, else random weights of its architecture (tiny: a tiny llama)."
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
    if not a.tiny:
        cands = [a.model] if a.model else []
        cache = Path(os.environ.get('DFLASH_NB_CACHE') or Path.home() / '.cache' / 'dflash_nb')
        cands.append(cache / 'models' / 'smollm2')
        for p in cands:
            if p and (Path(p) / 'config.json').exists() and any(Path(p).glob('*.safetensors')):
                return AutoModelForCausalLM.from_pretrained(str(p), dtype=dtype).to(dev).eval(), f'weights from {p}'
    torch.manual_seed(0)
    cfg = LlamaConfig(**(TINY_LLAMA if a.tiny else SMOLLM2))
    m = LlamaForCausalLM(cfg).to(dev, dtype).eval()
    return m, 'random weights, ' + ('a tiny llama' if a.tiny else "SmolLM2-135M's architecture (no weights found; nothing is downloaded)")


def sec_regenerate(a, dev):
    dt = torch.bfloat16 if dev.type == 'cuda' else torch.float32
    model, how = load_llama(a, dev, dt)
    b, P, N = (4, 16, 8) if a.tiny else (a.regen_batch, a.regen_prompt, a.regen_new)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model.config.vocab_size, (b, P), generator=g).to(dev)
    am = torch.ones_like(ids)
    kw = dict(max_new_tokens=N, min_new_tokens=N, do_sample=False, pad_token_id=2)
    with torch.no_grad():
        model.generate(input_ids=ids[:, :8], attention_mask=am[:, :8], **{**kw, 'max_new_tokens': 4, 'min_new_tokens': 4})
        sync(dev); t = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=am, **kw)
        sync(dev); s = time.perf_counter() - t
    new = int((out.shape[1] - P) * b)
    res = {'model': how, 'dtype': str(dt).replace('torch.', ''), 'batch': b, 'prompt_tokens': P, 'new_tokens_per_row': N,
           'generated_tokens': new, 'seconds': round(s, 3), 'generated_tokens_per_s': round(new / s, 1), 'peak_memory_gb': peak_gb(dev)}
    del model; free(dev)
    return res


def sec_extract(a, dev):
    from dflash_nb.features import extract_features
    from dflash_nb.core import default_target_layer_ids
    dt = torch.bfloat16 if dev.type == 'cuda' else torch.float32
    model, how = load_llama(a, dev, dt)
    N = model.config.num_hidden_layers
    ids_l = [1, 2] if a.tiny else default_target_layer_ids(N, 5)
    b, T = (2, 32) if a.tiny else (a.extract_batch, a.extract_len)
    ids = torch.randint(3, model.config.vocab_size, (b, T), generator=torch.Generator().manual_seed(1)).to(dev)
    f = extract_features(model, ids[:, :16], ids_l)
    sync(dev); reps = 2 if a.tiny else 5; t = time.perf_counter()
    for _ in range(reps): f = extract_features(model, ids, ids_l)
    sync(dev); s = (time.perf_counter() - t) / reps
    res = {'model': how, 'layer_ids': ids_l, 'batch': b, 'seq_len': T, 'features_shape': list(f.shape),
           'seconds_per_batch': round(s, 4), 'tokens_per_s': round(b * T / s, 1), 'peak_memory_gb': peak_gb(dev)}
    del model; free(dev)
    return res


def sec_lossless(a, dev):
    from dflash_nb.drafter import DFlashDrafter, build_config
    from dflash_nb.evaluate import DFlashDraftSession, check_lossless, plain_generate, speculative_generate
    dt = torch.bfloat16 if dev.type == 'cuda' else torch.float32
    model, how = load_llama(a, dev, dt)
    V = model.config.vocab_size
    cfg = build_config(model.config, mask_token_id=V - 1, num_hidden_layers=1, block_size=16,
                       target_layer_ids=[1, 2] if a.tiny else None, num_feature_layers=5)
    drafter = DFlashDrafter(cfg).init_weights(0).to(dev, dt).eval()
    sess = DFlashDraftSession(drafter, model.get_input_embeddings(), model.get_output_embeddings())
    n_prompts, P, N = (2, 12, 24) if a.tiny else (a.lossless_prompts, 64, a.lossless_new)
    g = torch.Generator().manual_seed(2)
    rows = []
    for i in range(n_prompts):
        prompt = torch.randint(3, V - 1, (P,), generator=g).tolist()
        ref = plain_generate(model, prompt, N)
        spec = speculative_generate(model, sess, prompt, N)
        d = check_lossless(spec, ref, P, f'prompt {i}', model, prompt, enforce=False)   # the difference, tie or not
        rows.append({'identical': d is None, 'first_difference': d and d['at'], 'tie': bool(d and d['tie']),
                     'logit_gap': d and d.get('gap'), 'gap_spread': d and d.get('spread'), 'tokens': len(ref.tokens), 'tau': round(spec.tau, 3),
                     'plain_tokens_per_s': round(len(ref.tokens) / max(ref.seconds, 1e-9), 1),
                     'speculative_tokens_per_s': round(len(spec.tokens) / max(spec.seconds, 1e-9), 1)})
    res = {'model': how, 'dtype': str(dt).replace('torch.', ''), 'prompts': n_prompts, 'new_tokens': N,
           'identical': all(r['identical'] for r in rows), 'lossless_up_to_ties': all(r['identical'] or r['tie'] for r in rows), 'runs': rows}
    del model, drafter; free(dev)
    return res


SECTIONS = [('env', sec_env, 30), ('matmul', sec_matmul, 30), ('train_step', sec_train_step, 240),
            ('regenerate', sec_regenerate, 60), ('extract', sec_extract, 45), ('lossless', sec_lossless, 60),
            ('benchmark_step', sec_benchmark_step, 90)]


def write(path, res):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + '.tmp')
    tmp.write_text(json.dumps(res, indent=2, default=str) + '\n'); os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--device', default='cuda')
    ap.add_argument('--tiny', action='store_true', help='tiny shapes (CPU smoke test)')
    ap.add_argument('--out', default=str(HERE / 'results' / 'gpu_check.json'))
    ap.add_argument('--budget-s', type=float, default=460.0, help='total time budget; each section also has its own box')
    ap.add_argument('--only', default=None, help='comma-separated sections to run (env always runs)')
    ap.add_argument('--layers', default='1,5', help='drafter layer counts of the train-step section')
    ap.add_argument('--seq-len', type=int, default=3072); ap.add_argument('--num-anchors', type=int, default=512)
    ap.add_argument('--batch', type=int, default=1); ap.add_argument('--steps', type=int, default=3)
    ap.add_argument('--warmup', type=int, default=2)
    ap.add_argument('--regen-batch', type=int, default=64); ap.add_argument('--regen-prompt', type=int, default=256)
    ap.add_argument('--regen-new', type=int, default=256)
    ap.add_argument('--extract-batch', type=int, default=16); ap.add_argument('--extract-len', type=int, default=2048)
    ap.add_argument('--lossless-prompts', type=int, default=4); ap.add_argument('--lossless-new', type=int, default=128)
    ap.add_argument('--model', default=None, help='a local SmolLM2 folder (default: the dflash_nb cache, else random weights)')
    ap.add_argument('--peak-tflops', type=float, default=None, help='bf16 dense peak (default: by GPU name)')
    a = ap.parse_args(argv)
    a.layers = [int(x) for x in str(a.layers).split(',') if x]
    if a.tiny: a.steps, a.warmup = 1, 1
    out = Path(a.out)
    res = {'started': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), 'args': vars(a), 'sections': {}, 'errors': {}}
    only = set(a.only.split(',')) if a.only else None

    def on_term(sig, frame):
        res['killed'] = f'signal {sig}'; write(out, res); sys.exit(128 + sig)
    signal.signal(signal.SIGTERM, on_term)
    t_start = time.perf_counter()
    dev = None
    try: dev = torch.device(a.device); torch.empty(1, device=dev)
    except Exception as e:
        res['errors']['device'] = f'{type(e).__name__}: {e}'; write(out, res); print(json.dumps(res, indent=2)); return 1
    if dev.type == 'cuda': torch.backends.cuda.matmul.allow_tf32 = True
    for name, fn, box in SECTIONS:
        if only and name not in only and name != 'env': continue
        left = a.budget_s - (time.perf_counter() - t_start)
        if left < 5: res['errors'][name] = 'skipped: the time budget is spent'; write(out, res); continue
        t = time.perf_counter()
        print(f'[gpu_check] {name} (time box {min(box, left):.0f} s) ...', flush=True)
        try:
            with time_box(min(box, left)): res['sections'][name] = fn(a, dev)
        except (SectionTimeout, Exception) as e:
            res['errors'][name] = f'{type(e).__name__}: {str(e)[:400]}'
            res.setdefault('tracebacks', {})[name] = traceback.format_exc()[-2000:]
            with contextlib.suppress(Exception): free(dev)
        res.setdefault('seconds', {})[name] = round(time.perf_counter() - t, 2)
        print(f'[gpu_check] {name}: ' + (json.dumps(res['sections'][name], default=str)[:600] if name in res['sections'] else 'ERROR ' + res['errors'][name]), flush=True)
        write(out, res)
    res['total_seconds'] = round(time.perf_counter() - t_start, 2)
    write(out, res)
    print(f'-> {out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
