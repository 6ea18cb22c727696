"""Tests of the tokenization stage (dflash_nb.tokenization): exact masks, truncation, token_freq, vocabulary mapping,
kill-and-resume equality, and the saved dataset. Uses the Qwen3.6 fixture tokenizer when ../shared/fixtures is
present, SmolLM2 (and the tiny Qwen3 target) otherwise."""
import json, os, signal, subprocess, sys, time
from pathlib import Path

import numpy as np
import pytest

from dflash_nb.core import file_hash, fixtures_dir
from dflash_nb.tokenization import EmptyDatasetError, TokenizeJob, TokenizeOptions, encode_rows, tokenize_conversations
from dflash_nb.vocab import build_vocab_mapping, load_token_freq

BUILTIN = [
    {'id': 'b-single', 'source': 'builtin', 'messages': [
        {'role': 'user', 'content': 'What is the capital of France?'},
        {'role': 'assistant', 'content': 'The capital of France is Paris.'}]},
    {'id': 'b-multi', 'source': 'builtin', 'messages': [
        {'role': 'system', 'content': 'You are terse.'},
        {'role': 'user', 'content': 'Name a prime.'}, {'role': 'assistant', 'content': '7.'},
        {'role': 'user', 'content': 'Another one?'}, {'role': 'assistant', 'content': '11.'}]},
    {'id': 'b-reason', 'source': 'builtin', 'messages': [
        {'role': 'user', 'content': 'Is 91 prime?'},
        {'role': 'assistant', 'content': 'No: 91 = 7 x 13.', 'reasoning_content': 'Try small factors: 7 x 13 = 91.'}]},
    {'id': 'b-tool', 'source': 'builtin', 'tools': [{'type': 'function', 'function': {
        'name': 'get_weather', 'description': 'Weather for a city.',
        'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}}, 'required': ['city']}}}],
     'messages': [
        {'role': 'user', 'content': 'Weather in Lima?'},
        {'role': 'assistant', 'content': '', 'tool_calls': [{'id': 'c1', 'type': 'function', 'function': {
            'name': 'get_weather', 'arguments': {'city': 'Lima'}}}]},
        {'role': 'tool', 'tool_call_id': 'c1', 'content': '{"temp_c": 19}'},
        {'role': 'assistant', 'content': 'It is 19 C in Lima.'}]},
]


def fixture_rows(n_sharegpt=40, n_glaive=20):
    "Canonical rows from the fixture datasets (ShareGPT multi-turn, glaive tool calls) via the project's normalizers, plus the built-in ones."
    from dflash_nb.sources import NORMALIZERS
    rows = [dict(r) for r in BUILTIN]
    fx = fixtures_dir()
    if fx is None: return rows
    for tag, src, norm, n in (('sg', 'sharegpt', 'sharegpt', n_sharegpt), ('gl', 'glaive', 'llamafactory_tools', n_glaive)):
        path = fx / ('data/multiturn/sharegpt_dummy_conversation.json' if src == 'sharegpt' else 'data/toolcall/glaive_toolcall_en_demo.json')
        for i, r in enumerate(json.loads(path.read_text())[:n]):
            for j, c in enumerate(NORMALIZERS[norm](r)):
                rows.append({'id': f'{tag}-{i}-{j}', 'source': src, 'messages': c['messages'], **({'tools': c['tools']} if c.get('tools') else {})})
    return rows


@pytest.fixture(scope='module')
def tok_spec():
    "(target spec, tokenizer, end-of-turn text): Qwen3.6 fixture when present, else SmolLM2."
    from transformers import AutoTokenizer
    fx = fixtures_dir()
    if fx is not None and (fx / 'tokenizers/qwen3_6').is_dir():
        spec = str(fx / 'tokenizers/qwen3_6')
        return spec, AutoTokenizer.from_pretrained(spec), '<|im_end|>'
    from dflash_nb.models import load_tokenizer
    return 'smollm2', load_tokenizer('smollm2'), '<|im_end|>'


def _opts(**kw):
    "Options with the one-supervised-token minimum these tests were written with (the declaration's 16 is a real run's)."
    return TokenizeOptions(**{'min_supervised_tokens': 1, **kw})

def _job(**kw):
    "The work's settings these tests were written with: one process, 2000-row chunks, 500 MB shards, the full vocabulary."
    return TokenizeJob(**{'num_proc': 1, 'chunk_rows': 2000, 'shard_mb': 500, 'draft_vocab_size': 0, **kw})


def write_jsonl(path, rows, extra_lines=()):
    with open(path, 'w') as f:
        for r in rows: f.write(json.dumps(r) + '\n')
        for line in extra_lines: f.write(line + '\n')
    return path


def test_masks_equal_reference_and_definition(tok_spec):
    "Stage masks == templates.assistant_mask (prefix method) row by row; locate == prefix; supervised runs end in EOT."
    from dflash_nb.masks import assistant_mask
    spec, tok, eot = tok_spec
    rows = fixture_rows()
    for think in (None, False):
        out, rej, c = encode_rows(tok, rows, _opts(max_seq_len=0, enable_thinking=think, mask_method='locate'))
        outp, rejp, _ = encode_rows(tok, rows, _opts(max_seq_len=0, enable_thinking=think, mask_method='prefix'))
        assert [r['reason'] for r in rej] == [r['reason'] for r in rejp]
        assert not rej, [r['reason'] for r in rej]        # every one of these rows renders: no template error is tolerated
        assert len(out) == len(outp) == len(rows)
        byid = {r['id']: r for r in rows}
        for a, b in zip(out, outp):
            assert a == b
            r = byid[a['id']]
            ids, mask = assistant_mask(tok, r['messages'], tools=r.get('tools'), enable_thinking=think)
            assert a['input_ids'] == ids and a['loss_mask'] == mask, a['id']
            # independent check: every supervised run ends with the end-of-turn token, one run per assistant turn
            runs = np.split(np.nonzero(mask)[0], np.nonzero(np.diff(np.nonzero(mask)[0]) != 1)[0] + 1)
            assert len(runs) == sum(m['role'] == 'assistant' for m in r['messages'])
            assert all(tok.decode([ids[run[-1]]]) == eot for run in runs)
            assert a['seq_len'] == len(a['input_ids'])


def test_builtin_supervised_text(tok_spec):
    spec, tok, eot = tok_spec
    out, _, _ = encode_rows(tok, BUILTIN[:2], _opts(enable_thinking=False))
    sup = tok.decode([i for i, m in zip(out[1]['input_ids'], out[1]['loss_mask']) if m])
    assert sup == f'7.{eot}11.{eot}'


def test_tiny_model_and_per_turn():
    from dflash_nb.models import load_tokenizer
    tok = load_tokenizer('tiny-qwen3')
    out, rej, c = encode_rows(tok, BUILTIN, _opts(rows='turn'))
    n_turns = sum(m['role'] == 'assistant' for r in BUILTIN for m in r['messages'])
    assert not rej and len(out) == n_turns and c['conversations_out'] == len(BUILTIN)
    for r in out:
        m = np.asarray(r['loss_mask'])
        d = np.diff(np.concatenate([[0], m, [0]]))
        assert (d == 1).sum() == 1, r['id']              # exactly one supervised run: its own turn
    assert [r['id'] for r in out[:2]] == ['b-single#1', 'b-multi#2']


def test_truncation_policies(tok_spec):
    spec, tok, _ = tok_spec
    rows = fixture_rows(n_sharegpt=10, n_glaive=0)
    full, _, _ = encode_rows(tok, rows, _opts(max_seq_len=0))
    L = int(np.median([r['seq_len'] for r in full]))
    longer = sum(r['seq_len'] > L for r in full)
    tr, rej, c = encode_rows(tok, rows, _opts(max_seq_len=L, min_supervised_tokens=1))
    assert all(r['seq_len'] <= L for r in tr)
    assert c['truncated'] + sum(r['reason'].startswith('too few') for r in rej) == longer
    for r in tr:   # truncation is a prefix cut of ids and mask alike
        f = next(x for x in full if x['id'] == r['id'])
        assert r['input_ids'] == f['input_ids'][:L] and r['loss_mask'] == f['loss_mask'][:L]
    dr, rej, c = encode_rows(tok, rows, _opts(max_seq_len=L, truncation='drop'))
    assert c['truncated'] == 0 and sum(r['reason'].startswith('too long') for r in rej) == longer
    assert len(dr) + len(rej) == len(rows)
    hi, rej, _ = encode_rows(tok, rows, _opts(max_seq_len=0, min_supervised_tokens=10**6))
    assert not hi and all(r['reason'].startswith('too few supervised tokens') for r in rej)


def test_stage_outputs_token_freq_vocab(tok_spec, tmp_path):
    import torch
    from datasets import load_from_disk
    spec, tok, _ = tok_spec
    rows = fixture_rows()
    inp = write_jsonl(tmp_path / 'in.jsonl', rows + [{'id': 'p', 'source': 's', 'messages': [{'role': 'user', 'content': 'hi'}]}],
                      extra_lines=['{not json'])
    rep = tokenize_conversations(inp, tmp_path / 'out', spec, _opts(max_seq_len=4096),
                                 TokenizeJob(draft_vocab_size=64, num_proc=2, chunk_rows=16, shard_mb=0.05), tokenizer=tok)
    assert rep['rows_in'] == len(rows) + 2 == rep['rows_out'] + rep['quarantined']
    assert rep['quarantine_reasons'] == {'invalid JSON': 1, 'prompt-only': 1}
    q = [json.loads(l) for l in open(tmp_path / 'out/quarantine.jsonl')]
    assert [e['reason'].split(':')[0] for e in q] == ['prompt-only', 'invalid JSON']
    ds = load_from_disk(str(tmp_path / 'out/dataset'))
    assert len(ds) == rep['rows_out'] and len(rep['shards']) > 1
    assert set(ds.column_names) == {'id', 'source', 'input_ids', 'loss_mask', 'seq_len'}
    assert ds.features['input_ids'].feature.dtype == 'int32' and ds.features['loss_mask'].feature.dtype == 'int8'
    assert ds[0]['id'] == rows[0]['id']                                    # input order kept
    ref = {}
    for r in ds:
        assert r['seq_len'] == len(r['input_ids']) == len(r['loss_mask'])
        for i, m in zip(r['input_ids'], r['loss_mask']):
            if m: ref[i] = ref.get(i, 0) + 1
    freq = load_token_freq(tmp_path / 'out/token_freq.pt')
    assert freq == ref and all(type(k) is int and type(v) is int for k, v in freq.items())
    assert torch.load(tmp_path / 'out/token_freq.pt', weights_only=True) == ref
    d2t, t2d = np.load(tmp_path / 'out/d2t.npy'), np.load(tmp_path / 'out/t2d.npy')
    assert d2t.dtype == np.int64 and t2d.dtype == bool and len(d2t) == 64 and t2d.sum() == 64
    assert len(t2d) == rep['target_vocab_size'] >= len(tok)
    sel = np.arange(64) + d2t
    assert (np.diff(sel) > 0).all() and (np.nonzero(t2d)[0] == sel).all()
    top = sorted(ref.items(), key=lambda x: (-x[1], x[0]))[:64]
    assert set(t for t, _ in top) == set(sel.tolist())
    assert rep['supervised_tokens'] == sum(ref.values())


def test_vocab_mapping_full_and_padding():
    d2t, t2d = build_vocab_mapping({}, 4, 10)
    assert (np.arange(4) + d2t).tolist() == [0, 1, 2, 3]
    d2t, t2d = build_vocab_mapping({9: 5, 3: 5}, 2, 10)
    assert (np.arange(2) + d2t).tolist() == [3, 9] and t2d.sum() == 2


def test_empty_dataset_fails_clearly(tok_spec, tmp_path):
    spec, tok, _ = tok_spec
    inp = write_jsonl(tmp_path / 'in.jsonl', [{'id': 'p', 'source': 's', 'messages': [{'role': 'user', 'content': 'hi'}]}])
    with pytest.raises(EmptyDatasetError, match='prompt-only'):
        tokenize_conversations(inp, tmp_path / 'out', spec, job=_job(), tokenizer=tok)
    assert not (tmp_path / 'out/dataset').exists()


def test_resume_after_interruption_gives_same_dataset(tok_spec, tmp_path):
    "A run stopped after 2 chunks and resumed (and a second run on top) equals an uninterrupted run, byte for byte."
    spec, tok, _ = tok_spec
    inp = write_jsonl(tmp_path / 'in.jsonl', fixture_rows())
    kw = dict(tokenizer=tok)
    ref = tokenize_conversations(inp, tmp_path / 'ref', spec, job=_job(draft_vocab_size=32, chunk_rows=8, num_proc=2), **kw)
    part = tokenize_conversations(inp, tmp_path / 'res', spec, job=_job(draft_vocab_size=32, chunk_rows=8, max_chunks=2), **kw)
    assert part['complete'] is False and not (tmp_path / 'res/dataset').exists()
    res = tokenize_conversations(inp, tmp_path / 'res', spec, job=_job(draft_vocab_size=32, chunk_rows=8, num_proc=2), **kw)
    assert res['chunks_resumed'] == 2
    for f in ('dataset', 'token_freq.pt', 'd2t.npy', 't2d.npy', 'quarantine.jsonl'):
        assert file_hash(tmp_path / 'ref' / f) == file_hash(tmp_path / 'res' / f), f
    # changed options discard the old work instead of mixing it in
    other = tokenize_conversations(inp, tmp_path / 'res', spec, _opts(max_seq_len=64), _job(draft_vocab_size=32, chunk_rows=8, max_chunks=1),
                                   **kw)
    assert other['done_before'] == 0


def test_sigkill_and_resume(tok_spec, tmp_path):
    "A real SIGKILL in the middle of a run, then a restart: same dataset hash as an uninterrupted run."
    spec, tok, _ = tok_spec
    base = fixture_rows()
    rows = base * max(3, -(-160 // len(base)))               # >= 40 chunks of 4: the kill lands mid-run
    rows = [{**r, 'id': f'{r["id"]}-{i}'} for i, r in enumerate(rows)]
    inp = write_jsonl(tmp_path / 'in.jsonl', rows)
    ref = tokenize_conversations(inp, tmp_path / 'ref', spec, job=_job(chunk_rows=4), tokenizer=tok)
    code = ('import sys; from dflash_nb.tokenization import TokenizeJob, tokenize_conversations; '
            f'tokenize_conversations({str(inp)!r}, {str(tmp_path / "kill")!r}, {spec!r}, '
            'job=TokenizeJob(chunk_rows=4, num_proc=1, shard_mb=500, draft_vocab_size=0))')
    p = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    work = tmp_path / 'kill/work'
    t = time.time()
    while time.time() - t < 120 and p.poll() is None and len(list(work.glob('chunk-*.json'))) < 3: time.sleep(0.05)
    killed = p.poll() is None
    assert killed, 'the run finished (or died) before it could be killed: this test proves nothing then'
    os.kill(p.pid, signal.SIGKILL)
    assert p.wait() == -signal.SIGKILL
    assert not (tmp_path / 'kill/dataset').exists()
    res = tokenize_conversations(inp, tmp_path / 'kill', spec, job=_job(chunk_rows=4, num_proc=2), tokenizer=tok)
    assert 3 <= res['chunks_resumed'] < res['chunks']
    assert file_hash(tmp_path / 'ref/dataset') == file_hash(tmp_path / 'kill/dataset')
    assert file_hash(tmp_path / 'ref/token_freq.pt') == file_hash(tmp_path / 'kill/token_freq.pt')


# ---------- the command line: the stage's defaults, checks before any work, one-line errors ----------
def cli(*args):
    import contextlib, io
    from dflash_nb.cli import main
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e): code = main([str(a) for a in args])
    return code, o.getvalue(), e.getvalue()

def test_cli_options_are_the_stages_declarations():
    "`tokenization run --help` shows the declared defaults (tests/test_params_declared.py checks every option of every command)."
    from dflash_nb.cli import build_parser
    from dflash_nb.pipeline import discover_stages
    st = next(s for s in discover_stages() if s.short == 'tokenization')
    h = build_parser()._subparsers._group_actions[0].choices['tokenization']._subparsers._group_actions[0].choices['run'].format_help()
    for flag in ('max-seq-len', 'min-supervised-tokens', 'draft-vocab-size'):
        assert f"default: {st.defaults[flag.replace('-', '_')]!r})" in ' '.join(h.split(f'--{flag}', 2)[-1].split('--', 1)[0].split()), flag

def test_cli_checks_its_input_first(tok_spec, tmp_path):
    spec, tok, _ = tok_spec
    bad = write_jsonl(tmp_path / 'bad.jsonl', [BUILTIN[0], {'id': 'w', 'source': 's', 'messages': [{'role': 'wizard', 'content': 'hi'}]}])
    code, out, err = cli('tokenization', 'run', bad, tmp_path / 'o1', '--target', spec)
    assert code == 1 and err.count('\n') == 1 and "row 2 is not a canonical conversation (unknown role: 'wizard'" in err
    assert 'sources normalize' in err and not (tmp_path / 'o1').exists()
    empty = tmp_path / 'empty.jsonl'; empty.write_text('')
    code, out, err = cli('tokenization', 'run', empty, tmp_path / 'o2', '--target', spec)
    assert code == 1 and err == f'error: {empty} has no rows\n'
    # a tokenizer without a chat template: refused before rendering anything, naming the CLI flag
    tok.save_pretrained(tmp_path / 'notemplate')
    cfgp = tmp_path / 'notemplate/tokenizer_config.json'
    cfg = json.loads(cfgp.read_text()); cfg.pop('chat_template', None); cfgp.write_text(json.dumps(cfg))
    (tmp_path / 'notemplate/chat_template.jinja').unlink(missing_ok=True)
    good = write_jsonl(tmp_path / 'good.jsonl', BUILTIN[:2])
    code, out, err = cli('tokenization', 'run', good, tmp_path / 'o3', '--target', tmp_path / 'notemplate')
    assert code == 1 and err.count('\n') == 1 and '--chat-template' in err and 'chat_template=' not in err
    with pytest.raises(SystemExit) as ex: cli('tokenization', 'run', good, tmp_path / 'o4', '--target', spec, '--max-seq-len', '-1')
    assert ex.value.code == 2   # argparse: a value the declaration does not allow is a bad command line


def test_the_stage_line_names_truncation_and_its_cost(tmp_path):
    """Issue 46.2: the stage's one line said "33 in, 33 out, 0 quarantined" while 22 rows were cut at max_seq_len; it now names
    the samples truncated, the max_seq_len, the tokens cut (the supervised ones among them), and warns when most were cut."""
    from dflash_nb.core import Stage
    from dflash_nb.models import load_tokenizer
    from dflash_nb.params import stage_params
    from dflash_nb.tokenization import tokenization_stage
    tok = load_tokenizer('smollm2')
    rows = [{'id': f'r{i}', 'source': 's', 'messages': [{'role': 'user', 'content': f'Question {i}: count for me.'},
             {'role': 'assistant', 'content': ' '.join(str(k) for k in range(60 + 10 * i))}]} for i in range(3)]
    rows.append({'id': 'short', 'source': 's', 'messages': [{'role': 'user', 'content': 'Hi?'}, {'role': 'assistant', 'content': 'Hello there.'}]})
    (tmp_path / '30_convert').mkdir()
    write_jsonl(tmp_path / '30_convert' / 'conversations.jsonl', rows)
    st = Stage(tmp_path, '50_tokenization', params=stage_params('50_tokenization', {
        'run': {'target': 'smollm2'}, 'tokenization': {'max_seq_len': 64, 'num_proc': 1, 'min_supervised_tokens': 1}}))
    rep = tokenization_stage(st)
    full = encode_rows(tok, rows, _opts(max_seq_len=0))[0]          # the same rows, nothing cut
    cut = [r['seq_len'] - 64 for r in full if r['seq_len'] > 64]
    sup = sum(sum(r['loss_mask'][64:]) for r in full)
    assert len(cut) == 3 and (rep['truncated'], rep['tokens_cut'], rep['supervised_cut']) == (3, sum(cut), sup), rep
    log = st.path('log.txt').read_text()
    assert (f'50_tokenization: 4 rows in = 4 kept + 0 quarantined; 4 samples out, 3 of them truncated at max_seq_len 64 '
            f'({sum(cut):,} tokens cut, {sup:,} of them supervised)') in log, log
    assert 'WARNING dflash_nb: 50_tokenization: most samples were truncated: 3 of 4 at max_seq_len 64' in log, log
    m = json.loads(st.path('manifest.json').read_text())
    assert (m['counts']['tokens_cut'], m['counts']['supervised_cut']) == (sum(cut), sup)
