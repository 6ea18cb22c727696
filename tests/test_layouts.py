"""Public fine-tuning layouts (issue 46): `tests/fixtures/layouts` holds small files written for these tests in the
shapes of public repos (ChatGLM3's fine-tuning demo, ShareGPT/Vicuna, BELLE, OpenAI chat and function-calling
fine-tuning, Alpaca, LLaMA-Factory tools, Firefly, OpenAssistant-like speaker/text, UltraChat raw and 200k, Dolly,
dialog/chat lists). Each is detected by a named normalizer and read whole: every record is a row or a quarantined
record whose reason names the row (its index) and the key."""
import contextlib, io, json, re
from pathlib import Path
import pytest

from dflash_nb.formats import NORMALIZERS, detect_format, normalize_record
from dflash_nb.schema import validate_row
from dflash_nb.sources import normalize_file

LAYOUTS = Path(__file__).parent / 'fixtures' / 'layouts'

# file -> (normalizer, records, rows written, {quarantined record index: a key path its reason names})
EXPECTED = {
    'chatglm3_finetune.jsonl': ('chat', 4, 4, {}),
    'sharegpt.jsonl': ('sharegpt', 3, 3, {}),
    'vicuna.json': ('sharegpt', 2, 2, {}),
    'belle.jsonl': ('sharegpt', 2, 2, {}),
    'openai_messages.jsonl': ('messages', 3, 3, {}),
    'openai_functions.jsonl': ('messages', 2, 2, {}),
    'alpaca.json': ('alpaca', 3, 3, {}),
    'llamafactory_tools.json': ('llamafactory_tools', 2, 2, {}),
    'firefly.jsonl': ('chat', 3, 3, {}),
    'speaker_text.jsonl': ('chat', 2, 2, {}),
    'ultrachat.jsonl': ('ultrachat', 2, 2, {}),
    'ultrachat_200k.jsonl': ('messages', 2, 2, {}),
    'dolly.jsonl': ('dolly', 3, 3, {}),
    'dialog_role_text.jsonl': ('chat', 2, 2, {}),
    'author_message.jsonl': ('chat', 3, 2, {1: 'chat[1].author'}),
}

def cli(*args):
    from dflash_nb.cli import main
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e): code = main([str(a) for a in args])
    return code, o.getvalue(), e.getvalue()

def test_the_corpus_has_ten_layouts_or_more():
    files = sorted(p.name for p in LAYOUTS.iterdir())
    assert files == sorted(EXPECTED) and len(files) >= 10
    assert len({v[0] for v in EXPECTED.values()}) >= 7

@pytest.mark.parametrize('name', sorted(EXPECTED))
def test_each_layout_is_detected_and_read_whole(name, tmp_path):
    norm, n, written, quarantined = EXPECTED[name]
    p = LAYOUTS / name
    d = detect_format(p)
    assert d['best'] == norm, (name, [(m['normalizer'], m['normalized']) for m in d['matches']], d['expected'][:3])
    c = normalize_file('auto', p, tmp_path / 'o.jsonl', tmp_path / 'q.jsonl')
    assert c['normalizer'] == norm and c['read'] == n
    assert c['read'] == c['written'] + c['quarantined'], c                      # rows in = rows out + quarantined
    assert (c['written'], c['quarantined']) == (written, len(quarantined)), c
    rows = [json.loads(l) for l in (tmp_path / 'o.jsonl').read_text().splitlines()]
    assert len(rows) == written and all(validate_row(r) == [] for r in rows), [validate_row(r) for r in rows]
    q = [json.loads(l) for l in (tmp_path / 'q.jsonl').read_text().splitlines()]
    assert {e['index']: e['reason'] for e in q}.keys() == quarantined.keys()
    for e in q:   # the row is its index, the reason names the key
        assert quarantined[e['index']] in e['reason'] and re.search(r'\w+\[\d+\]', e['reason']), e

@pytest.mark.parametrize('name', sorted(EXPECTED))
def test_sources_detect_names_the_normalizer_and_ends_with_a_newline(name):
    code, out, err = cli('sources', 'detect', LAYOUTS / name)
    assert code == 0 and out.endswith('\n') and not err, (out, err)
    best = out.splitlines()[1].split()
    assert best[:2] == ['best', EXPECTED[name][0]], out

def test_conversations_of_role_and_content_are_all_read(tmp_path):
    "The ChatGLM3 layout: every row read, its tool turns as calls and results, the thought and the call one answer."
    p = LAYOUTS / 'chatglm3_finetune.jsonl'
    code, out, _ = cli('sources', 'detect', p)
    assert code == 0 and 'found conversations as [{role, content}]' in out and 'normalized 4/4' in out
    c = normalize_file('auto', p, tmp_path / 'o.jsonl')
    assert (c['read'], c['written'], c['quarantined']) == (4, 4, 0)
    rows = [json.loads(l) for l in (tmp_path / 'o.jsonl').read_text().splitlines()]
    assert len(rows[0]['messages']) == 9 and rows[0]['messages'][0] == {'role': 'system', 'content': '你是一个乐于助人的助手。'}
    thought, result = rows[1]['messages'][2], rows[1]['messages'][3]                     # {role: tool, name, parameters, observation}
    assert thought['content'] == '我来查一下北京的天气。'
    assert thought['tool_calls'][0]['function'] == {'name': 'get_weather', 'arguments': {'city': '北京'}}
    assert result == {'role': 'tool', 'name': 'get_weather', 'content': '{"temp": 21, "sky": "晴"}'}
    assert rows[1]['tools'][0]['function']['name'] == 'get_weather'
    call, obs = rows[2]['messages'][2], rows[2]['messages'][3]                          # metadata + tool_call(...), observation
    assert call['tool_calls'][0]['function'] == {'name': 'track_parcel', 'arguments': {'parcel_id': 'SF1234'}}
    assert obs == {'role': 'tool', 'name': 'track_parcel', 'content': '{"status": "in transit", "city": "杭州"}'}
    assert rows[2]['tools'][0]['function']['name'] == 'track_parcel'                    # the system turn's tools

def test_legacy_tool_shapes_without_a_clear_meaning_are_quarantined_with_the_key():
    chat = NORMALIZERS['chat']
    cases = [
        ({'conversations': [{'role': 'user', 'content': 'Plot y = x.'},
                            {'role': 'assistant', 'metadata': 'interpreter', 'content': '```python\nplot(x)\n```'}]},
         "code interpreter call: conversations[1]"),
        ({'conversations': [{'role': 'user', 'content': 'q'}, {'role': 'observation', 'content': '42'}]},
         'orphan tool result: conversations[1]'),
        ({'conversations': [{'role': 'user', 'content': 'q'}, {'role': 'tool', 'name': 'f', 'parameters': [1, 2]}]},
         'arguments not an object: conversations[1]'),
        ({'messages': [{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'metadata': 'f', 'content': 'f(*args)'}]},
         'bad tool call: messages[1]'),
        ({'dialog': [{'speaker': 'user', 'text': 'q'}, {'text': 'no speaker'}]}, "missing role: dialog[1]"),
    ]
    for i, (rec, reason) in enumerate(cases):
        rows, rej = normalize_record('t', chat, rec, i)
        assert not rows and len(rej) == 1 and rej[0]['index'] == i and rej[0]['reason'].startswith(reason), (rec, rej)

def test_openai_function_calls_and_function_results_are_mapped(tmp_path):
    c = normalize_file('auto', LAYOUTS / 'openai_functions.jsonl', tmp_path / 'o.jsonl')
    assert c['unmapped_fields'] == {}                                            # `functions` is read as the tools
    row = json.loads((tmp_path / 'o.jsonl').read_text().splitlines()[0])
    assert row['tools'][0]['function']['name'] == 'get_time'
    assert row['messages'][2]['tool_calls'][0]['function'] == {'name': 'get_time', 'arguments': {'tz': 'Asia/Tokyo'}}
    assert row['messages'][3] == {'role': 'tool', 'name': 'get_time', 'content': '{"time": "14:05"}'}

def test_pair_turns_and_any_role_keys(tmp_path):
    normalize_file('auto', LAYOUTS / 'firefly.jsonl', tmp_path / 'f.jsonl')
    f = [json.loads(l) for l in (tmp_path / 'f.jsonl').read_text().splitlines()]
    assert [m['role'] for m in f[0]['messages']] == ['user', 'assistant', 'user', 'assistant']
    assert f[0]['id'] == 'firefly/0' and f[0]['meta'] == {'conversation_id': 1, 'category': 'Brainstorming', 'dataset': 'moss'}
    normalize_file('auto', LAYOUTS / 'speaker_text.jsonl', tmp_path / 's.jsonl')
    s = [json.loads(l) for l in (tmp_path / 's.jsonl').read_text().splitlines()]
    assert [m['role'] for m in s[1]['messages']] == ['user', 'assistant'] and s[1]['meta'] == {'lang': 'en'}

def test_when_nothing_fits_detect_says_the_shape_expected_and_found(tmp_path):
    p = tmp_path / 'qa_pairs.jsonl'
    p.write_text(''.join(json.dumps({'conversations': [{'q': f'Question {i}?', 'a': 'Yes.'}]}) + '\n' for i in range(3)))
    code, out, err = cli('sources', 'detect', p)
    assert code == 1 and 'no match' in err and out.endswith('\n')
    lines = {l.split()[0]: ' '.join(l.split()) for l in out.splitlines() if l.startswith('  ')}
    assert lines['sharegpt'] == ('sharegpt expects conversations as [{from, value}]; found conversations as [{q, a}]; '
                                 'their shape fits 0 of the records')
    assert lines['chat'].startswith('chat expects conversations as [{role, content}] (any role and text keys)')
    assert lines['lima'].startswith('lima expects conversations as [str, ...]; found conversations as [{q, a}]')
