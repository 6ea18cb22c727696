"""Agentic and reasoning data without loss (issue 29): the three layouts of tests/fixtures/agentic (OpenAI content
parts, Anthropic Messages, OpenAI Responses items) are detected, read with nothing dropped, and rendered back with
every call, argument and reasoning text of the input; rows whose template drops earlier reasoning become one sample
per assistant turn with exact masks. Each check has a path without ../shared (the tiny tokenizer and templates built
here) and one with Qwen3's real template and tokenizer from the fixtures."""
import json
from pathlib import Path
import pytest

from dflash_nb.formats import NORMALIZERS, detect_format, normalize_record, read_file
from dflash_nb.masks import (Renderer, as_renderer, assistant_mask, fixture_template, fixture_tokenizer, locate_turns,
                             split_reason, supervised_pieces, turn_samples)
from dflash_nb.schema import validate_row
from dflash_nb.models import TINY_CHAT_TEMPLATE, build_tiny_tokenizer
from dflash_nb.tokenization import TokenizeJob, TokenizeOptions, encode_rows, tokenize_conversations

FIX = Path(__file__).parent / 'fixtures' / 'agentic'
LAYOUTS = {'openai_parts.jsonl': ('messages', 5, {'image-5'}),          # file: (normalizer, records, ids rejected)
           'anthropic_messages.jsonl': ('anthropic', 3, set()),
           'openai_responses.jsonl': ('openai_responses', 3, set())}

def normalize_file(name):
    "(rows, rejections, records) of a fixture through the normalizer `detect_format` picks."
    best = detect_format(FIX / name)['best']
    rows, rej, recs = [], [], list(read_file(FIX / name))
    for i, raw in enumerate(recs):
        r, j = normalize_record('agentic', NORMALIZERS[best], raw, i); rows += r; rej += j
    return best, rows, rej, recs

# --- what the native records say, read independently of the normalizers ---

def _leaves(x):
    if isinstance(x, dict):
        for k, v in x.items(): yield k; yield from _leaves(v)
    elif isinstance(x, list):
        for v in x: yield from _leaves(v)
    else: yield x

def _args(a):
    return json.loads(a) if isinstance(a, str) and a.strip() else (a if isinstance(a, dict) else {})

def native_facts(x, said=None, results=None):
    "(what the assistant said: reasoning, refusals, call names, argument keys and values; the tool outputs) of a native record."
    said, results = (set(), []) if said is None else (said, results)
    if isinstance(x, list):
        for v in x: native_facts(v, said, results)
        return said, results
    if not isinstance(x, dict): return said, results
    t = x.get('type')
    for k in ('thinking', 'reasoning_content', 'refusal'):
        if isinstance(x.get(k), str): said.add(x[k])
    if t in ('reasoning', 'summary_text') and isinstance(x.get('text'), str): said.add(x['text'])
    if t == 'tool_call' and isinstance(x.get('text'), str): native_facts(json.loads(x['text']), said, results)
    if isinstance(x.get('name'), str) and ('arguments' in x or 'input' in x):   # a call (tool specs have neither)
        said.add(x['name']); said.update(str(v) for v in _leaves(_args(x.get('arguments', x.get('input')))))
    if t in ('tool_result', 'function_call_output'): results.append(x.get('content', x.get('output')))
    elif x.get('role') in ('tool', 'function') and isinstance(x.get('content'), str): results.append(x['content'])
    for k, v in x.items():
        if isinstance(v, (dict, list)) and k not in ('tools', 'function') and not (k == 'content' and t in ('tool_result',)):
            native_facts(v, said, results)
    return said, results

def shown(v: str, text: str) -> bool:
    "`v` in `text` as written or JSON-escaped (how templates write arguments)."
    return any(f in text for f in (v, json.dumps(v, ensure_ascii=False)[1:-1], json.dumps(v)[1:-1]))

def _result_texts(res):
    if isinstance(res, str): return [res]
    return [p['text'] for p in res if isinstance(p, dict) and 'text' in p] if isinstance(res, list) else [json.dumps(res)]

def spans_and_renders(r: Renderer, row) -> tuple[str, str]:
    "(every assistant turn's supervised span, each rendered as the last turn; all the renders) of a canonical row."
    spans, renders = [], []
    for s in turn_samples(row['messages'], row.get('tools')):
        text, (t,) = locate_turns(r, s['messages'], s['tools'], supervise='last')
        spans.append(text[t.start:t.end]); renders.append(text)
    return '\n'.join(spans), '\n'.join(renders)

def check_round_trip(r: Renderer, name: str):
    best, rows, rej, recs = normalize_file(name)
    by_id = {row['id'].split('/', 1)[1]: row for row in rows}
    for rec in recs:
        if rec['id'] not in by_id: continue
        said, results = native_facts(rec)
        assert said, rec['id']
        spans, renders = spans_and_renders(r, by_id[rec['id']])
        lost = [v for v in said if not shown(v, spans)]
        assert not lost, (name, rec['id'], lost)
        gone = [t for res in results for t in _result_texts(res) if not shown(t, renders)]
        assert not gone, (name, rec['id'], gone)

# --- 1. every layout read with nothing dropped ---

@pytest.mark.parametrize('name', sorted(LAYOUTS))
def test_layouts_are_detected_and_read_without_loss(name):
    want, n, rejected = LAYOUTS[name]
    d = detect_format(FIX / name)
    assert d['best'] == want, d['matches']
    best, rows, rej, recs = normalize_file(name)
    assert len(recs) == n == len(rows) + len(rej)                                       # rows in = written + quarantined
    assert {recs[e['index']]['id'] for e in rej} == rejected, [e['reason'] for e in rej]   # no tool or reasoning row lost
    assert all("type 'image_url'" in e['reason'] for e in rej)
    assert [validate_row(r) for r in rows] == [[]] * len(rows)
    calls = sum(len(m.get('tool_calls', [])) for r in rows for m in r['messages'])
    reasoning = sum('reasoning_content' in m for r in rows for m in r['messages'])
    assert calls >= 3 and reasoning >= 4, (calls, reasoning)

def test_calls_and_results_pair_up():
    "Every tool message answers a call of the assistant turn before it, by id where the layout gives one."
    for name in LAYOUTS:
        for row in normalize_file(name)[1]:
            pending = []
            for m in row['messages']:
                if m['role'] == 'assistant': pending = [tc.get('id') for tc in m.get('tool_calls', [])]
                if m['role'] == 'tool':
                    assert pending, (name, row['id'])
                    if m.get('tool_call_id'): assert m['tool_call_id'] in pending, (name, row['id'], m)

@pytest.mark.parametrize('name', sorted(LAYOUTS))
def test_round_trip_tiny_template(name):
    "Without ../shared: the tiny ChatML template (it shows every turn's reasoning) holds everything the input said."
    check_round_trip(Renderer(TINY_CHAT_TEMPLATE, None, 'tiny'), name)

@pytest.mark.parametrize('name', sorted(LAYOUTS))
def test_round_trip_qwen3(name):
    "With Qwen3's template: each assistant turn, rendered as the last one, holds its reasoning, calls and arguments."
    tok, tpl = fixture_tokenizer('qwen3'), fixture_template('qwen3')
    if tok is None: pytest.skip('needs ../shared/fixtures')
    check_round_trip(as_renderer(tok, tpl), name)

# --- 2. one sample per assistant turn when the template drops earlier reasoning ---

def _qwen_like(calls: str = 'all') -> str:
    "The tiny ChatML template, reasoning shown only after the last user turn as Qwen3's; tool calls on `all` turns, on `none`, or on all but the last."
    last = ("{%- set ns = namespace(last=0) %}{%- for m in messages %}{%- if m.role == 'user' %}"
            "{%- set ns.last = loop.index0 %}{%- endif %}{%- endfor %}")
    t = last + TINY_CHAT_TEMPLATE.replace('{%- if message.reasoning_content %}',
                                          '{%- if message.reasoning_content and loop.index0 > ns.last %}')
    assert t != last + TINY_CHAT_TEMPLATE
    loop = '{%- for tc in message.tool_calls or [] %}'
    return t.replace(loop, {'all': loop, 'none': '{%- for tc in [] %}',
                            'history': '{%- for tc in ([] if loop.last else message.tool_calls or []) %}'}[calls])

@pytest.fixture(scope='module')
def tiny_tok():
    return build_tiny_tokenizer()

def agentic_rows():
    return [r for name in sorted(LAYOUTS) for r in normalize_file(name)[1]]

def check_exact(tok, r: Renderer, rows, out, rej, c):
    "Every sample: ids as the template tokenizes its conversation, one supervised run equal to its last turn's span."
    by_id = {row['id']: row for row in rows}
    assert not rej and c['conversations_out'] == len(rows), [e['reason'] for e in rej]
    for o in out:
        rid, _, j = o['id'].partition('#')
        msgs = by_id[rid]['messages'][:int(j) + 1] if j else by_id[rid]['messages']
        text, turns = locate_turns(r, msgs, by_id[rid].get('tools'), supervise='last' if j else 'all')
        assert o['input_ids'] == tok(text, add_special_tokens=False)['input_ids']
        pieces, want = supervised_pieces(tok, o['input_ids'], o['loss_mask']), [text[t.start:t.end] for t in turns]
        assert len(pieces) == len(want) and all(p.endswith(w) and len(p) - len(w) <= 8 for p, w in zip(pieces, want)), (o['id'], pieces, want)

def test_auto_splits_rows_the_template_drops_reasoning_of_tiny(tiny_tok, tmp_path):
    "Without ../shared: a Qwen-like toy template; multi-turn reasoning rows split, every sample exact, no row lost."
    tpl = tmp_path / 'qwen_like.jinja'; tpl.write_text(_qwen_like())
    rows = agentic_rows()
    r = as_renderer(tiny_tok, str(tpl))
    assert any(split_reason(r, row['messages'], row.get('tools')) for row in rows)
    out, rej, c = encode_rows(tiny_tok, rows, TokenizeOptions(chat_template=str(tpl), max_seq_len=0, min_supervised_tokens=1))
    assert c['rows_split'] >= 3 and c['split_samples'] > c['rows_split'], c
    check_exact(tiny_tok, r, rows, out, rej, c)
    conv = encode_rows(tiny_tok, rows, TokenizeOptions(chat_template=str(tpl), max_seq_len=0, min_supervised_tokens=1, rows='conversation'))[2]
    assert conv['rows_split'] == 0 and conv['rows_out'] == len(rows)   # the old behaviour: one sample per row

_CALL = {'id': 'call_1', 'type': 'function', 'function': {'name': 'get_weather', 'arguments': {'city': 'Oslo'}}}
_LOSSY = {'id': 'x', 'source': 's', 'messages': [
    {'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': 'Hello.', 'reasoning_content': 'Greet back.'},
    {'role': 'user', 'content': 'Weather in Oslo?'},
    {'role': 'assistant', 'content': '', 'reasoning_content': 'Call the tool.', 'tool_calls': [_CALL]},
    {'role': 'tool', 'tool_call_id': 'call_1', 'content': '4 C'},
    {'role': 'assistant', 'content': 'It is 4 C.', 'reasoning_content': 'Report.'}]}

@pytest.mark.parametrize('calls', ['none', 'history'])
def test_rows_losing_more_than_earlier_reasoning_are_quarantined(tiny_tok, tmp_path, calls):
    """A template that drops tool calls: the row is quarantined whole, as before, with the reason and counted as
    content lost. `none`: the whole render loses the call (not split); `history`: only a call rendered last is
    dropped (a bad template), so the row splits and its calling sample loses the call."""
    tpl = tmp_path / f'{calls}.jinja'; tpl.write_text(_qwen_like(calls))
    out, rej, c = encode_rows(tiny_tok, [_LOSSY], TokenizeOptions(chat_template=str(tpl), max_seq_len=0, min_supervised_tokens=1))
    assert out == [] and len(rej) == 1 and rej[0]['unit'] == 'conversation' and c['content_lost'] == 1
    assert rej[0]['reason'].startswith('the template drops tool calls'), rej[0]['reason']
    assert (c['rows_split'], 'split' in rej[0]) == ((0, False) if calls == 'none' else (1, True)), (c, rej[0])
    ok = encode_rows(tiny_tok, [_LOSSY], TokenizeOptions(chat_template=str(tmp_path / 'all.jinja'), max_seq_len=0, min_supervised_tokens=1)
                     ) if (tmp_path / 'all.jinja').write_text(_qwen_like()) else None
    assert [o['id'] for o in ok[0]] == ['x#1', 'x#3', 'x#5'] and ok[2]['rows_split'] == 1

def test_auto_splits_rows_qwen3(tmp_path):
    "Qwen3's template over the agentic fixtures: exact masks on every sample, no row lost, the manifest counts the splits."
    tok, tpl = fixture_tokenizer('qwen3'), fixture_template('qwen3')
    if tok is None: pytest.skip('needs ../shared/fixtures')
    rows = agentic_rows()
    out, rej, c = encode_rows(tok, rows, TokenizeOptions(chat_template=str(tpl), max_seq_len=0, min_supervised_tokens=1))
    assert c['rows_split'] >= 3, c
    check_exact(tok, as_renderer(tok, tpl), rows, out, rej, c)
    inp = tmp_path / 'rows.jsonl'; inp.write_text(''.join(json.dumps(r) + '\n' for r in rows))
    rep = tokenize_conversations(inp, tmp_path / 'out', 'qwen3', TokenizeOptions(chat_template=str(tpl), max_seq_len=0, min_supervised_tokens=1),
                                 TokenizeJob(num_proc=1, chunk_rows=4, shard_mb=500, draft_vocab_size=0),
                                 tokenizer=tok, vocab_size=len(tok), echo=lambda *a: None)
    assert (rep['rows_in'], rep['conversations_out'], rep['quarantined']) == (len(rows), len(rows), 0)
    assert (rep['rows_split'], rep['split_samples'], rep['rows_out']) == (c['rows_split'], c['split_samples'], len(out))
    saved = json.loads((tmp_path / 'out' / 'report.json').read_text())
    assert saved['rows_split'] == c['rows_split'] and saved['split_samples'] == c['split_samples']
