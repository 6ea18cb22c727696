#!/usr/bin/env python
"""Peak memory (and time) of the DFlash loss head: the chunked CE (`loss.linear_cross_entropy_stats`) against the
full logits (`F.linear` + `F.cross_entropy` + argmax), forward + backward, at the production vocabulary.

    python bench/bench_loss_memory.py                         # V = 248,320, 8,192 block slots, hidden 128 (CPU)
    python bench/bench_loss_memory.py --slots 2048 --hidden 64 --vocab 49152
    python bench/bench_loss_memory.py --device cuda --hidden 5120   # GPU: torch.cuda.max_memory_allocated

Each measurement runs in a fresh subprocess; on CPU the number is the growth of the peak resident set (ru_maxrss)
over the process's state just before the loss (inputs and head already allocated), on CUDA the peak allocated
memory above the inputs. The full computation at 8,192 slots x 248,320 needs ~16 GB (fp32 logits and their
gradient): when the machine has less memory available than that (with a 1.5x margin), the full computation is
measured at smaller slot counts and extrapolated linearly to the requested one (its memory is linear in the
slots; the JSON says `full_extrapolated: true`). Prints a table, writes bench/results/loss_memory_<device>.json.
"""
import argparse, json, os, platform, resource, subprocess, sys, time
from pathlib import Path

CHILD = r'''
import json, resource, sys, time, torch, torch.nn.functional as F
from dflash_nb.loss import linear_cross_entropy_stats, ce_chunks
mode, n, H, V, dev = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
dt = torch.bfloat16 if dev == 'cuda' else torch.float32
g = torch.Generator().manual_seed(0)
W = torch.randn(V, H, generator=g).mul_(0.02).to(dev, dt)     # in place: no freed temporary below the baseline
x = torch.randn(n, H, generator=g).to(dev, dt).requires_grad_()
y = torch.randint(0, V, (n,), generator=g).to(dev)
w = torch.rand(n, generator=g).to(dev)
def rss(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
if dev == 'cuda': torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
else: base = rss()
t = time.time()
if mode == 'full':
    z = F.linear(x, W).float(); ce = F.cross_entropy(z, y, reduction='none'); pred = z.detach().argmax(-1)
else:
    ce, pred = linear_cross_entropy_stats(x, W, y)
loss = (ce * w).sum() / w.sum()
loss.backward()
if dev == 'cuda': torch.cuda.synchronize(); peak = torch.cuda.max_memory_allocated() - base
else: peak = rss() - base
print(json.dumps({'peak_bytes': peak, 'seconds': time.time() - t, 'loss': loss.item(),
                  'grad_norm': x.grad.float().norm().item(), 'chunks': list(ce_chunks(n, V))}))
'''


def measure(mode, n, H, V, dev, threads):
    env = {**os.environ, 'OMP_NUM_THREADS': str(threads)}
    r = subprocess.run([sys.executable, '-c', CHILD, mode, str(n), str(H), str(V), dev], capture_output=True, text=True, env=env)
    if r.returncode != 0: raise RuntimeError(f'{mode} at {n} slots failed:\n{r.stderr[-2000:]}')
    return json.loads(r.stdout.strip().splitlines()[-1])


def available_bytes(dev):
    if dev == 'cuda':
        import torch
        free, _ = torch.cuda.mem_get_info(); return free
    for line in Path('/proc/meminfo').read_text().splitlines():
        if line.startswith('MemAvailable:'): return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--device', default='cpu')
    ap.add_argument('--slots', type=int, default=8192, help='supervised block slots (512 anchors x 16 = 8,192)')
    ap.add_argument('--hidden', type=int, default=128, help='hidden size (5120 in production; smaller keeps the CPU run short)')
    ap.add_argument('--vocab', type=int, default=248_320)
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--out', default=None)
    a = ap.parse_args()
    n, H, V, dev = a.slots, a.hidden, a.vocab, a.device
    chunked = measure('chunked', n, H, V, dev, a.threads)
    full_need = 2 * n * V * 4 * 1.5
    if available_bytes(dev) > full_need:
        full, extrapolated, points = measure('full', n, H, V, dev, a.threads), False, None
    else:   # too big for this machine: two smaller slot counts, extrapolated linearly
        n1, n2 = max(n // 8, 1), max(n // 4, 2)
        f1, f2 = measure('full', n1, H, V, dev, a.threads), measure('full', n2, H, V, dev, a.threads)
        slope = (f2['peak_bytes'] - f1['peak_bytes']) / (n2 - n1)
        full = {'peak_bytes': int(f2['peak_bytes'] + slope * (n - n2)), 'seconds': f2['seconds'] * n / n2}
        extrapolated, points = True, {n1: f1['peak_bytes'], n2: f2['peak_bytes']}
        check = measure('chunked', n2, H, V, dev, a.threads)
        if abs(check['loss'] - f2['loss']) > 1e-4 * max(abs(f2['loss']), 1):
            raise AssertionError(f"chunked loss {check['loss']} != full loss {f2['loss']} at {n2} slots")
    if not extrapolated and abs(chunked['loss'] - full['loss']) > 1e-4 * max(abs(full['loss']), 1):
        raise AssertionError(f"chunked loss {chunked['loss']} != full loss {full['loss']}")
    gb = lambda b: round(b / 2**30, 3)
    res = {'device': dev, 'device_name': platform.processor() or platform.machine(), 'threads': a.threads,
           'slots': n, 'hidden': H, 'vocab': V, 'dtype': 'bfloat16' if dev == 'cuda' else 'float32',
           'chunks_rows_vocab': chunked['chunks'],
           'full_logits_gb': gb(n * V * 4), 'full_peak_gb': gb(full['peak_bytes']), 'chunked_peak_gb': gb(chunked['peak_bytes']),
           'reduction_x': round(full['peak_bytes'] / max(chunked['peak_bytes'], 1), 1),
           'full_s': round(full['seconds'], 2), 'chunked_s': round(chunked['seconds'], 2),
           'full_extrapolated': extrapolated, **({'full_points_bytes': points} if points else {})}
    w = max(len(k) for k in res)
    for k, v in res.items(): print(f'{k:<{w}}  {v}')
    out = Path(a.out or Path(__file__).resolve().parent / 'results' / f'loss_memory_{dev}.json')
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + '\n')
    print(f'-> {out}')


if __name__ == '__main__':
    main()
