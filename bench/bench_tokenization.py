#!/usr/bin/env python
"""Benchmark of the tokenization stage (dflash_nb.tokenization) on a generated corpus of multi-turn conversations.

Measures rows/s and tokens/s of
  (a) the full stage: `tokenize_conversations` (render + exact masks + truncation + Arrow shards + token_freq + d2t/t2d),
  (b) the raw floor: batched `tokenizer(texts)` on the already-rendered text (best of in-process batched and a
      pool of `--workers` processes),
  (c) speculators 0.7.0.1's `load_and_preprocess_dataset` on the same rows, same tokenizer, same worker count, in a
      separate virtual environment this script creates (speculators --no-deps + the packages its preprocessing
      imports; torch is taken from this environment through a .pth file placed *after* the venv's own packages,
      because PyPI's CPU-less torch wheel would pull GBs of CUDA libraries and PyPI's torchvision breaks the import),
and compares speculators' loss masks with ours row by row (matched by identical input_ids).

    python bench/bench_tokenization.py [--rows 20000] [--workers 2] [--no-speculators]

Prints a table and writes bench/results/tokenization.json. The stage's CPU seconds (this process and its finished
workers, `resource.getrusage`) are reported beside the wall-clock seconds, since the machine may be shared.
"""

def cpu_seconds() -> float:
    "User + system CPU seconds of this process and of its waited-for children (the worker pool)."
    return sum(getattr(resource.getrusage(w), k) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for k in ('ru_utime', 'ru_stime'))
import argparse, hashlib, json, os, platform, random, resource, shutil, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = ('the a of to and in is it that for on with as this be by are from or at an was which can use data model '
         'value list function return number string python code example result file system user time first each '
         'when how more will other make should because between into through about while where under over simple '
         'error memory thread process network server request response cache layer token vector matrix compute '
         'training inference speed latency throughput sample batch query index table column row key update create '
         'delete select filter sort merge split join parse format print read write open close test check assert '
         'Paris London Tokyo weather rain sunny cloud river mountain history science music art poem story garden').split()

CODE = ['```python\ndef add(a, b):\n    return a + b\n\nprint(add(2, 3))\n```',
        '```js\nconst xs = [1, 2, 3].map(x => x * 2);\nconsole.log(xs);\n```',
        '```sql\nSELECT name, COUNT(*) FROM users GROUP BY name ORDER BY 2 DESC;\n```']

TOOLS = [{'type': 'function', 'function': {'name': 'get_weather', 'description': 'Current weather for a city.',
          'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}, 'days': {'type': 'integer'}},
                         'required': ['city']}}}]


def sentence(rng, lo, hi):
    n = rng.randint(lo, hi)
    w = [rng.choice(WORDS) for _ in range(n)]
    out, i = [], 0
    while i < n:
        k = rng.randint(6, 16); s = ' '.join(w[i:i + k]); out.append(s[:1].upper() + s[1:] + rng.choice('..?!,'))
        i += k
    text = ' '.join(out)
    if rng.random() < 0.15: text += '\n\n' + rng.choice(CODE)
    return text


def make_corpus(n: int, seed: int = 0) -> list[dict]:
    "`n` canonical multi-turn conversations: plain (1-4 turns), with a system prompt, with reasoning, with tool calls."
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind = rng.random()
        msgs = []
        if 0.60 <= kind < 0.75: msgs.append({'role': 'system', 'content': sentence(rng, 8, 30)})
        turns = rng.randint(1, 4)
        tools = None
        for t in range(turns):
            msgs.append({'role': 'user', 'content': sentence(rng, 5, 60)})
            if kind >= 0.90 and t == turns - 1:
                tools = TOOLS
                msgs.append({'role': 'assistant', 'content': '', 'tool_calls': [
                    {'id': f'call_{i}', 'type': 'function',
                     'function': {'name': 'get_weather', 'arguments': {'city': rng.choice(['Paris', 'Tokyo', 'Lima']), 'days': rng.randint(1, 5)}}}]})
                msgs.append({'role': 'tool', 'tool_call_id': f'call_{i}', 'content': json.dumps({'temp_c': rng.randint(-5, 35), 'sky': rng.choice(['rain', 'sun'])})})
            a = {'role': 'assistant', 'content': sentence(rng, 20, 160)}
            if 0.75 <= kind < 0.90 and t == turns - 1: a['reasoning_content'] = sentence(rng, 10, 60)
            msgs.append(a)
        r = {'id': f'gen-{i:06d}', 'source': 'generated', 'messages': msgs}
        if tools: r['tools'] = tools
        rows.append(r)
    return rows


def _tok_worker(args):
    path, texts = args
    os.environ['TOKENIZERS_PARALLELISM'] = 'false'
    tok = _TOK['tok']
    n = 0
    for b in range(0, len(texts), 1000): n += sum(len(x) for x in tok(texts[b:b + 1000], add_special_tokens=False)['input_ids'])
    return n

_TOK = {}


def floor(tok, texts, workers: int) -> dict:
    "Batched tokenizer(texts): in-process (Rust threads) and in `workers` forked processes; the faster counts."
    import multiprocessing as mp
    t = time.time(); n_tok = 0
    for b in range(0, len(texts), 1000): n_tok += sum(len(x) for x in tok(texts[b:b + 1000], add_special_tokens=False)['input_ids'])
    t_in = time.time() - t
    _TOK['tok'] = tok
    parts = [texts[i::workers] for i in range(workers)]
    t = time.time()
    with mp.get_context('fork').Pool(workers) as pool: n2 = sum(pool.map(_tok_worker, [(None, p) for p in parts]))
    t_pool = time.time() - t
    assert n2 == n_tok
    best = min(t_in, t_pool)
    return {'seconds_in_process': round(t_in, 3), 'seconds_pool': round(t_pool, 3), 'seconds': round(best, 3),
            'tokens': n_tok, 'rows_per_s': round(len(texts) / best, 1), 'tokens_per_s': round(n_tok / best, 1)}


SPEC_PKGS = ['click', 'datasets>=4,<=5.0.0', 'huggingface-hub', 'numpy>=2,<=2.4.6', 'openai>=2', 'psutil', 'pydantic>=2',
             'rich', 'safetensors', 'tqdm>=4.66.3,<=4.70.0', 'transformers>=4.56.1,<5.15']


def ensure_spec_venv(path: Path, echo=print) -> Path:
    py = path / 'bin' / 'python'
    if py.exists() and subprocess.run([str(py), '-c', 'import speculators.data_generation.preprocessing'], capture_output=True).returncode == 0:
        return py
    echo(f'creating the speculators venv in {path} ...')
    subprocess.run([sys.executable, '-m', 'venv', '--clear', str(path)], check=True)
    pip = [str(py), '-m', 'pip', 'install', '-q', '--disable-pip-version-check']
    subprocess.run(pip + ['--no-deps', 'speculators==0.7.0.1'], check=True)
    subprocess.run(pip + SPEC_PKGS, check=True)
    import torch  # the CPU torch of this environment, appended after the venv's own site-packages
    site = subprocess.run([str(py), '-c', 'import site; print(site.getsitepackages()[0])'], capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / 'zz_dflash_nb_torch.pth').write_text(str(Path(torch.__file__).parents[1]) + '\n')
    r = subprocess.run([str(py), '-c', 'import speculators.data_generation.preprocessing'], capture_output=True, text=True)
    if r.returncode: raise RuntimeError(f'speculators does not import in {path}: {r.stderr[-2000:]}')
    return py


SPEC_SCRIPT = r'''
import json, sys, time
t0 = time.time()
from speculators.data_generation.preprocessing import load_and_preprocess_dataset
t1 = time.time()
tok_dir, data, out, seq, nproc = sys.argv[1:6]
ds, proc = load_and_preprocess_dataset(tok_dir, [data], seq_length=int(seq), build_dataset_num_proc=int(nproc),
                                       token_freq_path=out + '/token_freq.pt')
t2 = time.time()
ds = ds.with_format(None)
ds.select_columns(['input_ids', 'loss_mask']).save_to_disk(out + '/dataset')
json.dump({'import_s': t1 - t0, 'preprocess_s': t2 - t1, 'rows': len(ds)}, open(out + '/timing.json', 'w'))
'''


def compare_masks(ours, theirs, tok, max_examples: int = 2) -> dict:
    "Match rows by identical input_ids; classify every differing run of positions by direction and text."
    import numpy as np
    key = lambda ids: hashlib.sha1(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()
    ours_by = {}
    for r in ours: ours_by.setdefault(key(r['input_ids']), r)
    kinds, n_match, n_diff, n_unmatched = {}, 0, 0, 0
    for r in theirs:
        o = ours_by.get(key(r['input_ids']))
        if o is None: n_unmatched += 1; continue
        n_match += 1
        a, b = np.asarray(o['loss_mask'], bool), np.asarray(r['loss_mask'], bool)
        if (a == b).all(): continue
        n_diff += 1
        d = np.nonzero(a != b)[0]
        runs = np.split(d, np.nonzero(np.diff(d) != 1)[0] + 1)
        seen = set()
        for run in runs:
            who = 'ours only' if a[run[0]] else 'speculators only'
            text = tok.decode(np.asarray(o['input_ids'])[run].tolist())
            label = f'{who}: {text!r}' if len(text) <= 24 else f'{who}: span of {len(run)} tokens'
            if label in seen: continue
            seen.add(label)
            k = kinds.setdefault(label, {'rows': 0, 'examples': []})
            k['rows'] += 1
            if len(k['examples']) < max_examples:
                lo, hi = max(0, run[0] - 8), min(len(a), run[-1] + 6)
                k['examples'].append({'id': o['id'], 'context': tok.decode(np.asarray(o['input_ids'])[lo:hi].tolist()),
                                      'differing': text[:300]})
    return {'rows_matched': n_match, 'rows_unmatched_input_ids': n_unmatched, 'rows_mask_differs': n_diff,
            'fraction_differs': round(n_diff / max(1, n_match), 4),
            'kinds': dict(sorted(kinds.items(), key=lambda kv: -kv[1]['rows']))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--rows', type=int, default=20000); ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--seq-len', type=int, default=8192); ap.add_argument('--tokenizer', default=None)
    ap.add_argument('--no-speculators', action='store_true'); ap.add_argument('--spec-venv', default=None)
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'tokenization.json'))
    ap.add_argument('--workdir', default=None)
    a = ap.parse_args()
    from dflash_nb.core import fixtures_dir, cache_dir, write_json
    from dflash_nb.tokenization import TokenizeJob, TokenizeOptions, tokenize_conversations
    from datasets import load_from_disk
    from transformers import AutoTokenizer
    fx = fixtures_dir()
    tok_dir = a.tokenizer or (str(fx / 'tokenizers' / 'qwen3_6') if fx and (fx / 'tokenizers' / 'qwen3_6').is_dir() else None)
    if tok_dir is None:
        from dflash_nb.models import resolve_target
        tok_dir = resolve_target('smollm2')
    work = Path(a.workdir or tempfile.mkdtemp(prefix='bench_tok_'))
    work.mkdir(parents=True, exist_ok=True)
    res = {'machine': {'platform': platform.platform(), 'cpus': os.cpu_count(), 'python': platform.python_version()},
           'command': ' '.join(['python', 'bench/bench_tokenization.py'] + sys.argv[1:]), 'rows': a.rows,
           'workers': a.workers, 'tokenizer': tok_dir, 'seq_len': a.seq_len}
    rows = make_corpus(a.rows)
    canon = work / 'conversations.jsonl'
    with open(canon, 'w') as f:
        for r in rows: f.write(json.dumps(r) + '\n')
    spec_in = work / 'speculators.jsonl'
    with open(spec_in, 'w') as f:
        for r in rows:
            s = {'conversations': r['messages']}
            if 'tools' in r: s['tools'] = json.dumps(r['tools'])
            f.write(json.dumps(s) + '\n')
    t = time.time(); tok = AutoTokenizer.from_pretrained(tok_dir); t_load = time.time() - t
    res['tokenizer_load_s'] = round(t_load, 2)
    texts = [tok.apply_chat_template(r['messages'], tools=r.get('tools'), tokenize=False) for r in rows]
    res['floor'] = floor(tok, texts, a.workers)
    del texts
    out = work / 'ours'; shutil.rmtree(out, ignore_errors=True)
    t, c0 = time.time(), cpu_seconds()
    rep = tokenize_conversations(canon, out, tok_dir, TokenizeOptions(max_seq_len=a.seq_len),
                                 TokenizeJob(num_proc=a.workers, chunk_rows=1000, shard_mb=500, draft_vocab_size=0),
                                 tokenizer=tok, echo=lambda *x: None)
    t_stage, cpu_stage = time.time() - t, cpu_seconds() - c0
    rep.pop('_lengths', None)
    res['stage'] = {'seconds': round(t_stage, 3), 'seconds_with_tokenizer_load': round(t_stage + t_load, 3),
                    'rows_out': rep['rows_out'], 'quarantined': rep['quarantined'], 'tokens': rep['tokens'],
                    'rows_per_s': round(a.rows / t_stage, 1), 'tokens_per_s': round(rep['tokens'] / t_stage, 1),
                    'cpu_seconds': round(cpu_stage, 3), 'rows_per_cpu_s': round(a.rows / cpu_stage, 1),
                    'content_lost': rep.get('content_lost'),
                    'timings': rep['seconds']}
    res['stage_vs_floor'] = round(res['stage']['rows_per_s'] / res['floor']['rows_per_s'], 3)
    if not a.no_speculators:
        try:
            py = ensure_spec_venv(Path(a.spec_venv or cache_dir() / 'bench' / 'speculators-0.7.0.1'))
            so = work / 'spec'; shutil.rmtree(so, ignore_errors=True); so.mkdir()
            (work / 'spec_run.py').write_text(SPEC_SCRIPT)
            t = time.time()
            env = {**os.environ, 'HF_DATASETS_CACHE': str(work / 'hf_cache'), 'PYTHONPATH': ''}
            p = subprocess.run([str(py), str(work / 'spec_run.py'), tok_dir, str(spec_in), str(so), str(a.seq_len), str(a.workers)],
                               capture_output=True, text=True, env=env)
            wall = time.time() - t
            if p.returncode: raise RuntimeError(f'speculators run failed (rc {p.returncode}): {p.stderr[-3000:]}')
            tm = json.loads((so / 'timing.json').read_text())
            res['speculators'] = {'seconds': round(tm['preprocess_s'], 3), 'seconds_process_wall': round(wall, 3),
                                  'rows_out': tm['rows'], 'rows_per_s': round(a.rows / tm['preprocess_s'], 1)}
            # end to end both ways: speculators' call loads its tokenizer itself, so count ours with the load too
            res['ours_vs_speculators'] = round(tm['preprocess_s'] / (t_stage + t_load), 2)
            ours = load_from_disk(str(out / 'dataset'))
            theirs = load_from_disk(str(so / 'dataset'))
            res['mask_comparison'] = compare_masks(ours, theirs, tok)
        except Exception as e:
            res['speculators'] = {'error': f'{type(e).__name__}: {e}'}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    write_json(a.out, res)
    f, s = res['floor'], res['stage']
    print(f"\n{'':28s} {'seconds':>9s} {'rows/s':>9s} {'tokens/s':>11s}")
    print(f"{'raw floor tokenizer(texts)':28s} {f['seconds']:9.2f} {f['rows_per_s']:9.0f} {f['tokens_per_s']:11.0f}")
    print(f"{'full stage (dflash_nb)':28s} {s['seconds']:9.2f} {s['rows_per_s']:9.0f} {s['tokens_per_s']:11.0f}"
          f"   ({s['cpu_seconds']:.2f} CPU s, {s['rows_per_cpu_s']:.0f} rows per CPU-second)")
    sp = res.get('speculators', {})
    if 'rows_per_s' in sp:
        print(f"{'speculators 0.7.0.1':28s} {sp['seconds']:9.2f} {sp['rows_per_s']:9.0f}")
        print(f"stage/floor = {res['stage_vs_floor']}, ours vs speculators (end to end) = {res['ours_vs_speculators']}x, "
              f"masks differ on {res['mask_comparison']['fraction_differs']:.1%} of matched rows")
        for k, v in list(res['mask_comparison']['kinds'].items())[:8]: print(f'  {v["rows"]:6d} rows  {k}')
    else: print(f"stage/floor = {res['stage_vs_floor']}; speculators: {sp.get('error', 'skipped')}")
    print(f'results: {a.out}')


if __name__ == '__main__':
    main()
