"""Compare the stage outputs of two run folders, timing fields aside: what a change that should not change results
changed. Each stage's manifest names its outputs and their sha256; an output whose hash differs is compared again as
JSON (or its lines, for JSONL and the Markdown report) with the timing fields dropped and each run folder's path
replaced by `RUN`. Prints one line per output that differs and exits 1 when any differs beyond timing.

    python tools/compare_runs.py runs/demo_before runs/demo_after
"""
import json, re, sys
from pathlib import Path

# keys of measured times, rates and speedups (and the plan's machine-measured fits): they differ run to run
TIMING = re.compile(r'(^|_)(seconds|secs|s|time|elapsed|wall|load_s|tok_per_s|tokens_per_s|per_s|rate|started|finished|'
                    r'when|date|tpot_ms|ms|duration|timings?|speed)($|_)|per_s$|_s$|tok/s|throughput|gflops|speedup|'
                    r'forward_cost|fits|timing', re.I)
TIMED_LINE = re.compile(r'x \[|tokens/s|cost|speedup|\d+(\.\d+)?x\b')   # report lines that show timings

def strip(x):
    "`x` without its timing fields, recursively."
    if isinstance(x, dict): return {k: strip(v) for k, v in x.items() if not TIMING.search(str(k))}
    if isinstance(x, list): return [strip(v) for v in x]
    return x

def load(p: Path, roots) -> object:
    "An output's content without timing fields, its run folder named `RUN`."
    t = p.read_text()
    for r in roots: t = t.replace(str(r), 'RUN')
    if p.suffix == '.md': return [l for l in t.splitlines() if not TIMED_LINE.search(l)]
    if p.suffix == '.jsonl': return [strip(json.loads(l)) for l in t.splitlines() if l.strip()]
    return strip(json.loads(t))

def compare(a: Path, b: Path) -> list[str]:
    "Lines naming each output of `a`'s stages that differs in `b`, and how."
    out = []
    for m in sorted(a.glob('*/manifest.json')):
        other = b / m.parent.name / 'manifest.json'
        if not other.exists():
            out.append(f'{m.parent.name}: not in {b}')
            continue
        hb = {o['path']: o['sha256'] for o in json.loads(other.read_text())['outputs']}
        for o in json.loads(m.read_text())['outputs']:
            if o['sha256'] == hb.get(o['path']): continue
            fa, fb = a / o['path'], b / o['path']
            same = fa.suffix in ('.json', '.jsonl', '.md') and fb.exists() and load(fa, (a, b)) == load(fb, (a, b))
            out.append(f"{o['path']}: {'same but for timing fields' if same else 'DIFFERS'}")
    return out

if __name__ == '__main__':
    lines = compare(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve())
    print('\n'.join(lines) or 'every output byte-identical')
    sys.exit(1 if any(l.endswith('DIFFERS') or 'not in' in l for l in lines) else 0)
