"""Response regeneration (stage 40): both backends on the real SmolLM2 (in-process, and over HTTP against a real
`transformers serve` started on loopback), resume after a kill, per-row failure accounting, multi-turn order and
tool-result preservation. Small on purpose: a few rows, a few new tokens, one CPU thread."""
import json, os, shutil, signal, socket, subprocess, sys, time, urllib.request
from pathlib import Path
import pytest

from dflash_nb.core import iter_jsonl
from dflash_nb.backends import BackendOptions, GenConfig, GenRequest, HFBackend, HTTPBackend
from dflash_nb.regenerate import RegenOptions, regenerate_file

GEN = GenConfig(max_new_tokens=6)
TOOLS = [{'type': 'function', 'function': {'name': 'get_weather', 'description': 'current weather',
                                           'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}}}}}]
TOOL_ROW = {'id': 'tool', 'source': 't', 'tools': TOOLS, 'messages': [
    {'role': 'user', 'content': 'Weather in Paris?'},
    {'role': 'assistant', 'content': '', 'tool_calls': [{'id': 'c0', 'type': 'function',
                                                           'function': {'name': 'get_weather', 'arguments': {'city': 'Paris'}}}]},
    {'role': 'tool', 'tool_call_id': 'c0', 'content': '{"temp": 21}'},
    {'role': 'assistant', 'content': 'It is 21 degrees.'}]}
ROWS = [
    {'id': 'mt', 'source': 'mtbench', 'messages': [{'role': 'user', 'content': 'Name a fruit.'},
                                                    {'role': 'user', 'content': 'Now name a vegetable.'}]},
    TOOL_ROW,
    {'id': 'bad', 'source': 'x', 'messages': [{'role': 'bot', 'content': 'hi'}]},
    {'id': 'mt', 'source': 'dup', 'messages': [{'role': 'user', 'content': 'dup id'}]},
]

def write_rows(path, rows):
    with open(path, 'w') as f:
        for r in rows: f.write(json.dumps(r) + '\n')
    return path

class Recorder:
    "Wraps a real backend and records every request it was sent (to check the order of multi-turn generation)."
    def __init__(self, inner): self.inner, self.name, self.seen = inner, inner.name, []
    def info(self): return self.inner.info()
    def generate(self, reqs, gen, progress=None):
        self.seen += [(r.key, [dict(m) for m in r.messages]) for r in reqs]
        return self.inner.generate(reqs, gen, progress)

def check_regenerated(out, fails, rec):
    rows = {r['id']: r for r in iter_jsonl(out)}
    failed = list(iter_jsonl(fails))
    assert set(rows) == {'mt', 'tool'} and len(failed) == 2
    assert sorted(f['reason'].split(':')[0] for f in failed) == ['duplicate id', 'invalid']
    # multi-turn: an answer inserted after each user turn, in order
    mt = rows['mt']['messages']
    assert [m['role'] for m in mt] == ['user', 'assistant', 'user', 'assistant']
    assert all(m['content'] for m in mt if m['role'] == 'assistant')
    assert rows['mt']['meta']['regenerated']['turns'] == [1, 3]
    # the second request of the row saw the *regenerated* first answer
    mt_reqs = [msgs for key, msgs in rec.seen if key == 'mt']
    assert len(mt_reqs) == 2 and len(mt_reqs[0]) == 1 and mt_reqs[1][1] == mt[1]
    # tool results stay in place; the recorded tool-calling turn is kept, the final answer is the target's
    tm = rows['tool']['messages']
    assert tm[:3] == TOOL_ROW['messages'][:3]
    assert tm[3]['role'] == 'assistant' and tm[3]['content'] != TOOL_ROW['messages'][3]['content']
    assert rows['tool']['meta']['regenerated']['turns'] == [3]
    for r in rows.values():
        reg = r['meta']['regenerated']
        assert len(reg['finish_reasons']) == len(reg['new_tokens']) == len(reg['turns'])
        assert all(0 < n <= GEN.max_new_tokens + 1 for n in reg['new_tokens'])
        assert reg['truncated'] == ('length' in reg['finish_reasons'])

@pytest.fixture(scope='module')
def model_dir():
    from dflash_nb.models import resolve_target
    return resolve_target('smollm2')

@pytest.fixture(scope='module')
def hf_backend(model_dir):
    import torch
    n = torch.get_num_threads()
    be = HFBackend('smollm2', opts=BackendOptions(device='cpu', batch_size=8, threads=1))
    yield be
    torch.set_num_threads(n)

def test_hf_backend(tmp_path, hf_backend):
    inp = write_rows(tmp_path / 'in.jsonl', ROWS)
    rec = Recorder(hf_backend)
    s = regenerate_file(inp, tmp_path / 'out.jsonl', rec, GEN, RegenOptions(mode='all', select='all', chunk_size=8), progress=False)
    assert (s['rows_in'], s['rows_out'], s['failed'], s['regenerated']) == (4, 2, 2, 2)
    assert s['failure_reasons'] == {'invalid': 1, 'duplicate id': 1}
    check_regenerated(tmp_path / 'out.jsonl', tmp_path / 'out.failures.jsonl', rec)
    assert not (tmp_path / '.out.jsonl.parts').exists()

PROMPTS = ['Say hi.', 'Name a color.', 'Write a haiku about the sea.', 'What is 2 + 2? Answer with a number.',
           'Explain in detail how a bicycle gear system works, step by step, for a ten-year-old.', 'Translate "cat" to French.',
           'List three prime numbers.', 'Describe the water cycle.']

def _smollm2_backend(dtype: str):
    import torch
    n = torch.get_num_threads()
    yield HFBackend('smollm2', opts=BackendOptions(device='cpu', dtype=dtype, batch_size=8, threads=1))
    torch.set_num_threads(n)

@pytest.fixture(scope='module')
def bf16_backend(model_dir):
    "SmolLM2 in bfloat16 (one thread), whatever this CPU does natively: emulated bf16 is slow, so only one test uses it."
    yield from _smollm2_backend('bfloat16')

@pytest.fixture(scope='module')
def quality_backend(model_dir):
    "The quality run's setting: SmolLM2 with `dtype: auto` (bfloat16 where this CPU has it natively, else float32)."
    yield from _smollm2_backend('auto')

@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
def test_decoding_loop_matches_generate(dtype, hf_backend, request):
    """The in-place decoding loop gives exactly `generate`'s tokens on the same batch, in the same dtype: prompts of
    different lengths (padding, masks, positions), rows that stop early next to rows that hit the limit."""
    fast = hf_backend if dtype == 'float32' else request.getfixturevalue('bf16_backend')
    ref = HFBackend(fast.model, fast.tok, BackendOptions(batch_size=8), decoder='generate')
    assert (fast.no_loop, ref.no_loop) == (None, 'turned off')
    reqs, g = [GenRequest([{'role': 'user', 'content': p}]) for p in PROMPTS], GenConfig(max_new_tokens=24)
    got, want = fast.generate(reqs, g), ref.generate(reqs, g)
    assert got == want
    assert {r.finish_reason for r in got} == {'stop', 'length'}

def _user(text): return {'role': 'user', 'content': text}

MULTI = [  # the quality run's shapes: multi-turn rows regenerated turn by turn, short prompts and one long outlier
    {'id': 'two', 'source': 's', 'messages': [_user('Name a fruit.'), {'role': 'assistant', 'content': 'old'},
                                              _user('Now a vegetable.'), {'role': 'assistant', 'content': 'old'}]},
    {'id': 'three', 'source': 's', 'messages': [_user('Say hi.'), _user('Say bye.'), _user('Count to three.')]},
    {'id': 'long', 'source': 's', 'messages': [_user('Summarize: ' + 'the river runs to the sea and back. ' * 60)]},
    *[{'id': f'one{i}', 'source': 's', 'messages': [_user(p)]} for i, p in enumerate(PROMPTS[:5])]]

def test_multi_turn_all_mode_matches_generate(quality_backend):
    """`mode: all` over multi-turn rows, the quality run's dtype, batches cut around a long prompt: every turn of every
    row is `generate`'s, turn by turn (later turns see the earlier regenerated answers)."""
    from dflash_nb.regenerate import regenerate_chunk
    be = HFBackend(quality_backend.model, quality_backend.tok, BackendOptions(batch_size=8, reuse_gb=0))   # every turn prefilled
    ref = HFBackend(be.model, be.tok, BackendOptions(batch_size=8), decoder='generate')
    g = GenConfig(max_new_tokens=12)
    got, want = (regenerate_chunk(MULTI, b, g, RegenOptions(mode='all', select='all')) for b in (be, ref))
    assert [r['row']['messages'] for r in got] == [r['row']['messages'] for r in want]
    assert [len(r['row']['meta']['regenerated']['turns']) for r in got] == [2, 3, 1, 1, 1, 1, 1, 1]

def test_a_rows_next_turn_starts_from_its_last(hf_backend):
    """Issue 46: with the prefix store each turn of a row prefills only what came since its last turn, and the answers
    are the tokens of prefilling every turn's whole conversation (float32); the summary counts both."""
    from dflash_nb.regenerate import regenerate_chunk, _prompt_tokens
    rows = [*MULTI[:2], {'id': 'four', 'source': 's', 'messages': [_user(f'Question {k}: name a colour.') for k in range(4)]}]
    whole = HFBackend(hf_backend.model, hf_backend.tok, BackendOptions(batch_size=8, reuse_gb=0))
    kept = HFBackend(hf_backend.model, hf_backend.tok, BackendOptions(batch_size=8, reuse_gb=1))
    g, o = GenConfig(max_new_tokens=16), RegenOptions(mode='all', select='all')
    got, want = (regenerate_chunk(rows, b, g, o) for b in (kept, whole))
    assert [r['row']['messages'] for r in got] == [r['row']['messages'] for r in want]
    a, b = _prompt_tokens(kept), _prompt_tokens(whole)
    assert b['reused'] == 0 and a['reused'] > 0 and a['prefilled'] + a['reused'] == b['prefilled'], (a, b)
    assert a['prefilled'] < b['prefilled'] / 2, (a, b)
    assert len(kept.store) == 1   # the rows that ended were forgotten; the last round's row is kept until the next call

def test_a_long_prompt_gets_its_own_batch():
    """The quality run's chunk: one 744-token prompt among 127 of about 50 tokens, batch 128. Padding all of them
    to 744 made the prefill 7x the real positions; the outlier goes alone."""
    from dflash_nb.backends import length_buckets
    lengths = [50 + i % 20 for i in range(127)] + [744]
    batches = length_buckets(lengths, 128, max_batch_tokens=None, max_new_tokens=128)
    assert [len(b) for b in batches] == [1, 127] and batches[0] == [127]
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    assert padded < 1.5 * sum(lengths)
    assert [len(b) for b in length_buckets([60] * 256, 128, max_batch_tokens=None, max_new_tokens=128)] == [128, 128]   # no needless cut

def test_hf_final_mode_and_drop_truncated(tmp_path, hf_backend):
    rows = [{'id': 'a', 'source': 's', 'messages': [{'role': 'user', 'content': 'Tell me a long story about a dragon.'},
                                                   {'role': 'assistant', 'content': 'OK.'}]},
            {'id': 'b', 'source': 's', 'messages': [{'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': 'Hello'}]}]
    inp = write_rows(tmp_path / 'in.jsonl', rows)
    s = regenerate_file(inp, tmp_path / 'o.jsonl', hf_backend, GenConfig(max_new_tokens=3),
                        RegenOptions(mode='final', select='all', keep_truncated=False), progress=False)
    assert s['rows_in'] == s['rows_out'] + s['failed'] == 2
    fails = list(iter_jsonl(tmp_path / 'o.failures.jsonl'))
    assert s['failed'] == len(fails) >= 1 and all(f['reason'].startswith('truncated') for f in fails)
    # select=prompt_only: rows with answers pass through untouched
    s = regenerate_file(inp, tmp_path / 'p.jsonl', hf_backend, GEN, RegenOptions(mode='final', select='prompt_only'), progress=False)
    assert s['passed'] == 2 and list(iter_jsonl(tmp_path / 'p.jsonl')) == rows

def _free_port():
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]

@pytest.fixture(scope='module')
def server(model_dir, tmp_path_factory):
    "A real `transformers serve` on 127.0.0.1 serving the SmolLM2 folder."
    exe = shutil.which('transformers') or str(Path(sys.executable).parent / 'transformers')
    pytest.importorskip('fastapi'); pytest.importorskip('uvicorn'); pytest.importorskip('openai')
    port = _free_port()
    log = tmp_path_factory.mktemp('serve') / 'serve.log'
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}
    with open(log, 'w') as lf:
        proc = subprocess.Popen([exe, 'serve', model_dir, '--host', '127.0.0.1', '--port', str(port), '--device', 'cpu'],
                                stdout=lf, stderr=subprocess.STDOUT, env=env)
    try:
        t = time.time()
        while True:
            try:
                with urllib.request.urlopen(f'http://127.0.0.1:{port}/health', timeout=2) as r:
                    if r.status == 200: break
            except OSError: pass
            if proc.poll() is not None or time.time() - t > 180:
                raise RuntimeError(f'transformers serve did not come up:\n{log.read_text()[-3000:]}')
            time.sleep(0.5)
        yield f'http://127.0.0.1:{port}/v1'
    finally:
        proc.send_signal(signal.SIGTERM)
        try: proc.wait(20)
        except subprocess.TimeoutExpired: proc.kill(); proc.wait()

def test_http_backend_real_server(tmp_path, server, model_dir):
    inp = write_rows(tmp_path / 'in.jsonl', ROWS)
    be = HTTPBackend(server, concurrency=2, timeout_s=120, max_retries=1)
    assert be.model == model_dir                      # taken from GET /v1/models
    rec = Recorder(be)
    s = regenerate_file(inp, tmp_path / 'out.jsonl', rec, GEN, RegenOptions(mode='all', select='all', chunk_size=8), progress=False)
    assert (s['rows_in'], s['rows_out'], s['failed'], s['backend']) == (4, 2, 2, 'http')
    check_regenerated(tmp_path / 'out.jsonl', tmp_path / 'out.failures.jsonl', rec)

def test_http_failures_are_per_row(tmp_path):
    "A server that is not there: every selected row fails with an `http` reason after its retries; nothing is lost."
    rows = [{'id': f'r{i}', 'source': 's', 'messages': [{'role': 'user', 'content': f'q{i}'}]} for i in range(3)]
    rows.append({'id': 'keep', 'source': 's', 'messages': [{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'content': 'a'}]})
    inp = write_rows(tmp_path / 'in.jsonl', rows)
    be = HTTPBackend(f'http://127.0.0.1:{_free_port()}/v1', model='m', concurrency=2, max_retries=2, backoff_s=0.01, timeout_s=5)
    s = regenerate_file(inp, tmp_path / 'out.jsonl', be, GEN, RegenOptions(mode='final', select='prompt_only', chunk_size=2), progress=False)
    assert (s['rows_in'], s['rows_out'], s['passed'], s['failed']) == (4, 1, 1, 3)
    fails = list(iter_jsonl(tmp_path / 'out.failures.jsonl'))
    assert [f['id'] for f in fails] == ['r0', 'r1', 'r2']
    assert all(f['reason'].startswith('http: ') and '3 attempts' in f['reason'] for f in fails)
    assert fails[0]['row'] == rows[0]

def test_resume_after_kill(tmp_path, model_dir):
    rows = [{'id': f'r{i}', 'source': 's', 'messages': [{'role': 'user', 'content': f'Say the number {i}.'}]} for i in range(6)]
    inp = write_rows(tmp_path / 'in.jsonl', rows)
    out = tmp_path / 'out.jsonl'
    parts = tmp_path / '.out.jsonl.parts'
    exe = shutil.which('dflash-nb') or str(Path(sys.executable).parent / 'dflash-nb')
    cmd = [exe, 'regenerate', '--input', inp, '--output', out, '--model', 'smollm2', '--max-new-tokens', '4',
           '--chunk-size', '1', '--batch-size', '1', '--threads', '1', '--quiet']
    p = subprocess.Popen(list(map(str, cmd)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t = time.time()
    while len(list(parts.glob('part-*.jsonl'))) < 2:
        assert p.poll() is None, 'the run ended before it could be killed'
        assert time.time() - t < 240, 'no part written in time'
        time.sleep(0.2)
    p.send_signal(signal.SIGKILL); p.wait()
    done = sorted(parts.glob('part-*.jsonl'))
    assert not out.exists() and 2 <= len(done) < 6
    r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout[r.stdout.index('{'):])
    assert s['chunks_resumed'] == len(done) and s['chunks_run'] == 6 - len(done)
    ids = [x['id'] for x in iter_jsonl(out)]
    assert ids == [f'r{i}' for i in range(6)]                  # all rows, once, in input order
    assert not parts.exists()
    assert all(x['meta']['regenerated']['new_tokens'] for x in iter_jsonl(out))

def test_workers_match_one_process(tmp_path, hf_backend):
    "workers=2 (two spawned processes, one model each): the same rows and failures as one process, duplicates found across chunks."
    inp = write_rows(tmp_path / 'in.jsonl', ROWS)
    one = regenerate_file(inp, tmp_path / 'one.jsonl', hf_backend, GEN, RegenOptions(mode='all', select='all', chunk_size=1), progress=False)
    two = regenerate_file(inp, tmp_path / 'two.jsonl', hf_backend, GEN, RegenOptions(mode='all', select='all', chunk_size=1, workers=2),
                          progress=False)
    assert (two['rows_in'], two['rows_out'], two['failed'], two['workers']) == (4, 2, 2, 2)
    assert two['failure_reasons'] == one['failure_reasons'] == {'invalid': 1, 'duplicate id': 1}   # 'mt' again in chunk 3
    assert list(iter_jsonl(tmp_path / 'two.jsonl')) == list(iter_jsonl(tmp_path / 'one.jsonl'))
    assert list(iter_jsonl(tmp_path / 'two.failures.jsonl')) == list(iter_jsonl(tmp_path / 'one.failures.jsonl'))

def test_samples_are_rows_of_their_own(tmp_path, quality_backend):
    "samples=2 on the real SmolLM2 (the quality run's dtype): every prompt answered greedily as with samples=1,"
    " then once more sampled, as a row `<id>#s1`; the counts add up; the same seed draws the same answers."
    rows = [{'id': f'r{i}', 'source': 's', 'messages': [{'role': 'user', 'content': p}]} for i, p in enumerate(PROMPTS[:4])]
    inp = write_rows(tmp_path / 'in.jsonl', rows + [{'id': 'bad', 'source': 'x', 'messages': []}])
    gen = GenConfig(max_new_tokens=16, top_p=0.95)
    opts = lambda n: RegenOptions(mode='all', select='all', chunk_size=2, samples=n, sample_temperature=0.8)
    one = regenerate_file(inp, tmp_path / 'one.jsonl', quality_backend, gen, opts(1), progress=False)
    two = regenerate_file(inp, tmp_path / 'two.jsonl', quality_backend, gen, opts(2), progress=False)
    again = regenerate_file(inp, tmp_path / 'again.jsonl', quality_backend, gen, opts(2), progress=False)
    assert (one['rows_in'], one['sampled'], one['rows_out'], one['failed']) == (5, 0, 4, 1)
    assert (two['rows_in'], two['sampled'], two['rows_out'], two['failed']) == (5, 4, 8, 1)
    out = list(iter_jsonl(tmp_path / 'two.jsonl'))
    assert [r['id'] for r in out] == [x for i in range(4) for x in (f'r{i}', f'r{i}#s1')]
    assert [r for r in out if '#' not in r['id']] == list(iter_jsonl(tmp_path / 'one.jsonl'))   # the greedy answers unchanged
    drawn = [r for r in out if '#' in r['id']]
    assert all(r['meta']['sample'] == {'of': r['id'][:2], 'k': 1, 'temperature': 0.8, 'top_p': 0.95, 'seed': 0} for r in drawn)
    greedy = {r['id']: r['messages'][-1]['content'] for r in out if '#' not in r['id']}
    assert any(r['messages'][-1]['content'] != greedy[r['id'][:2]] for r in drawn)   # sampling answered otherwise
    assert list(iter_jsonl(tmp_path / 'again.jsonl')) == out                             # seeded: reproducible

def test_synthesized_prompts_are_answered_rows(tmp_path):
    "`--synthesize 6` on the real SmolLM2 (`--dtype auto`, the CLI): the target writes user prompts from its template's user header,"
    " they become rows of source `synthesized` answered like the input's; the counts add up; a rerun draws the same prompts."
    rows = [{'id': f'r{i}', 'source': 's', 'messages': [{'role': 'user', 'content': p}]} for i, p in enumerate(PROMPTS[:2])]
    inp = write_rows(tmp_path / 'in.jsonl', rows + [{'id': 'bad', 'source': 'x', 'messages': []}])
    exe = shutil.which('dflash-nb') or str(Path(sys.executable).parent / 'dflash-nb')
    def run(out):
        cmd = [exe, 'regenerate', '--input', inp, '--output', tmp_path / out, '--model', 'smollm2', '--dtype', 'auto',
               '--select', 'all', '--max-new-tokens', '8', '--synthesize', '6', '--synthesize-max-tokens', '64',
               '--batch-size', '16', '--threads', '1', '--quiet']
        r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads(r.stdout[r.stdout.index('{'):])
    s = run('out.jsonl')
    syn = s['synthesis']
    assert 3 <= syn['kept'] == s['synthesized'] <= 6 and syn['drawn'] == syn['kept'] + sum(syn['dropped'].values())
    assert syn['eval_sets'] == ['humaneval', 'mt_bench']          # checked against 30_convert's declared evaluation sets
    assert (s['rows_in'], s['failed']) == (3, 1) and s['rows_out'] == 2 + s['synthesized']
    out = list(iter_jsonl(tmp_path / 'out.jsonl'))
    made = [r for r in out if r['source'] == 'synthesized']
    assert [r['id'] for r in out[:2]] == ['r0', 'r1'] and len(made) == s['synthesized']
    assert all([m['role'] for m in r['messages']] == ['user', 'assistant'] and r['messages'][0]['content'].strip()
               and r['meta']['synthesized']['temperature'] == 1.0 for r in made)
    assert len({r['messages'][0]['content'] for r in made}) == len(made)
    dropped = list(iter_jsonl(tmp_path / 'out.synthesized.dropped.jsonl'))
    assert len(dropped) == syn['drawn'] - syn['kept'] and all(d['reason'] for d in dropped)
    again = run('again.jsonl')
    assert [r['messages'][0] for r in iter_jsonl(tmp_path / 'again.synthesized.jsonl')] == [r['messages'][0] for r in made]
    assert again['synthesis']['dropped'] == syn['dropped']


class _Echo:
    "A backend without a model: every turn is answered `Sure.` (the row accounting, not the answers, is under test)."
    name = 'echo'
    def info(self): return {'backend': self.name}
    def generate(self, reqs, gen, progress=None):
        from dflash_nb.backends import GenResult
        return [GenResult(text='Sure.', finish_reason='stop', new_tokens=2) for _ in reqs]

ANSWERED = [{'id': f'r{i}', 'source': 's', 'messages': [{'role': 'user', 'content': f'Question {i}?'},
                                                        {'role': 'assistant', 'content': 'An answer from elsewhere.'}]}
            for i in range(33)]

def test_the_target_writes_every_answer_by_default(tmp_path):
    """Issue 46.1: by default (`select: all`) every assistant turn of a fully answered file is the target's; keeping the
    file's answers is the explicit `prompt_only`."""
    inp = write_rows(tmp_path / 'in.jsonl', ANSWERED)
    s = regenerate_file(inp, tmp_path / 'out.jsonl', _Echo(), GEN, RegenOptions(chunk_size=8), progress=False)
    assert (s['rows_in'], s['regenerated'], s['passed']) == (33, 33, 0), s
    assert all(r['messages'][1]['content'] == 'Sure.' for r in iter_jsonl(tmp_path / 'out.jsonl'))
    s = regenerate_file(inp, tmp_path / 'kept.jsonl', _Echo(), GEN, RegenOptions(chunk_size=8, select='prompt_only'), progress=False)
    assert (s['regenerated'], s['passed']) == (0, 33), s

def test_limit_counts_the_rows_it_leaves_out(tmp_path):
    """Issue 46.2: `regenerate.limit` left rows out that no count mentioned (33 converted, 6 in `rows_in`, the rest gone);
    now rows in = rows out + failed + limited, and the stage's line says so."""
    from dflash_nb.regenerate import regen_line
    inp = write_rows(tmp_path / 'in.jsonl', ANSWERED)
    s = regenerate_file(inp, tmp_path / 'out.jsonl', _Echo(), GEN, RegenOptions(chunk_size=4, limit=6), progress=False)
    assert (s['rows_in'], s['rows_out'], s['failed'], s['limited'], s['regenerated']) == (33, 6, 0, 27, 6), s
    assert s['rows_in'] == s['rows_out'] + s['failed'] + s['limited']
    line = regen_line(s, RegenOptions(limit=6), GEN)
    assert line.startswith('40_regenerate: 33 rows in = 6 out + 0 failed + 27 left out by regenerate.limit 6; out: 6 regenerated'), line
    assert '0 passed through with answers the target did not write (select all)' in line, line
