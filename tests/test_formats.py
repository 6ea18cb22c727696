"""The shared formats module: every normalizer on good and malformed records, detection, and the layouts met in
users' own files (content parts, JSON lines named .json, one-object JSON, nested prompt sets with functions,
preference pairs without an answer). Every file a test reads is written by the test."""
import gzip, json
from collections import Counter
from pathlib import Path
import pytest

from dflash_nb.formats import (NORMALIZERS, SIGNATURES, detect_format, normalize_record, read_file)
from dflash_nb.normalizers import norm_messages
from dflash_nb.schema import validate_row

def write_jsonl(p, recs):
    p.write_text(''.join(json.dumps(r) + '\n' for r in recs)); return p

def normalize_all(path, name=None):
    "(rows, rejections) of every record of `path` through normalizer `name` (default: the detected one)."
    name = name or detect_format(path)['best']
    rows, rej = [], []
    for i, raw in enumerate(read_file(path)):
        r, j = normalize_record('mine', NORMALIZERS[name], raw, i)
        rows += r; rej += j
    return rows, rej

# malformed native records per normalizer: each must be rejected with a reason, never raise
MALFORMED = {
    'openorca': [{'question': 'q'}, {'system_prompt': None, 'question': 5, 'response': 'r'}],
    'evol_codealpaca': [{'instruction': 'x'}, {'instruction': ['x'], 'output': 'y'}],
    'magicoder_oss': [{'problem': 'p'}, {'problem': '', 'solution': 's'}],
    'alpaca': [{'output': 'o'}, {'instruction': '   ', 'input': '', 'output': 'o'}],
    'oasst_tree': [{'prompt': 'text'}, {'prompt': {'text': 'hi', 'role': 'robot', 'replies': []}}],
    'oasst_messages': [{'message_tree_id': 't', 'rows': []}, {'message_tree_id': 't', 'rows': [{'message_id': 'a', 'parent_id': None, 'deleted': True, 'text': 'x', 'role': 'prompter'}]}],
    'lima': [{'conversations': 'q'}, {'conversations': []}],
    'nemotron_v2': [{'messages': 'x'}, {'messages': [{'role': 'user', 'content': {'a': 1}}]}],
    'coderforge': [{'messages': '[{"role": "user", '}, {'messages': '[{"role": "assistant", "content": "a", "tool_calls": [{"function": {"name": "f", "arguments": "{x"}}]}]'}],
    'agentic_trajectories': [{'messages': []}, {'messages_json': '{}'}],
    'glaive_v2': [{'system': '', 'chat': 'no markers here'}, {'system': 'SYSTEM: x', 'chat': 'USER: a\n\nASSISTANT: <functioncall> nonsense'}],
    'qwen35_toolcalling': [{'messages': [{'role': 'robot', 'content': 'x'}]}, {'messages': [{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'content': '<functioncall> {"name": "f", "arguments": "{bad"}'}]}],
    'hermes_fc': [{'conversations': [{'from': 'human', 'value': 'q'}, {'from': 'gpt', 'value': '<tool_call>\n{oops}\n</tool_call>'}]}, {'conversations': [{'from': 'alien', 'value': 'x'}]}],
    'xlam': [{'query': 'q', 'tools': '[]', 'answers': '[{"arguments": {}}]'}, {'query': 'q', 'tools': 'not json', 'answers': '[]'}],
    # (an answer without a question is repaired now: prepend_user, see test_structural_repairs_are_applied_and_recorded)
    'sharegpt': [{'conversations': {'from': 'human'}}, {'conversations': [{'from': 'gpt', 'value': '  '}]}],
    'llamafactory_tools': [{'conversations': [{'from': 'human', 'value': 'q'}, {'from': 'function_call', 'value': '[1]'}]}, {'conversations': [{'from': 'observation', 'value': 'r'}]}],
    'swe_agent': [{'history': [{'role': 'user', 'content': 'x'}, {'role': 'tool', 'content': 'orphan'}]}, {'trajectory': 't'}],
    'mt_bench': [{'turns': []}, {'turns': [1, 2]}],
    'humaneval': [{'task_id': 'x'}, {'prompt': None}],
    'messages': [{'messages': 'x'}, {'messages': [{'role': 'user', 'content': {'a': 1}}]}],
    'sharegpt_preference': [{'conversations': [{'from': 'human', 'value': 'q'}]}, {'conversations': 'q', 'chosen': 'a'}],
    'hh_rlhf': [{'rejected': 'x'}, {'chosen': 'no markers at all'}],
    'openai_preference': [{'prompt': 'q'}, {'input': 'q', 'preferred_output': 'a'}],
    'bfcl': [{'question': 'q'}, {'question': [[{'role': 'user', 'content': 'q'}]], 'function': [{'nameless': 1}]}],
    'anthropic': [{'system': 'x'}, {'messages': [{'role': 'user', 'content': 'q'}, {'role': 'assistant', 'content': [{'type': 'tool_use', 'input': {}}]}]}],
    'openai_responses': [{'instructions': 'x'}, {'input': [{'type': 'function_call', 'call_id': 'c', 'name': 'f', 'arguments': '{oops'}]}],
    'chat': [{'dialog': [{'speaker': 'narrator', 'text': 'x'}]}, {'conversations': [{'role': 'user', 'content': 'q'}, {'role': 'observation', 'content': 'orphan'}]}],
    'dolly': [{'instruction': 'x'}, {'instruction': 'x', 'response': 5}],
    'ultrachat': [{'data': 'q'}, {'data': [1, 2]}],
}

@pytest.mark.parametrize('name', sorted(NORMALIZERS))
def test_malformed_native_records_are_rejected_with_reasons(name):
    recs = MALFORMED[name] + ['not a dict', None]
    for i, raw in enumerate(recs):
        rows, rej = normalize_record('t', NORMALIZERS[name], raw, i)
        assert not rows and rej, (name, raw, rows)
        assert all(r['reason'] and ':' in r['reason'] for r in rej), rej

# one well-formed native record per normalizer: detection must name that normalizer first
U, A = {'role': 'user', 'content': 'How do I sort a list in Python?'}, {'role': 'assistant', 'content': 'Use sorted(xs).'}
GOOD = {
    'openorca': {'id': 'o1', 'system_prompt': 'Be brief.', 'question': 'What is 2+2?', 'response': '4'},
    'evol_codealpaca': {'instruction': 'Write a function that adds two numbers.', 'output': 'def add(a, b): return a + b'},
    'magicoder_oss': {'index': 3, 'lang': 'python', 'problem': 'Reverse a string.', 'solution': 's[::-1]'},
    'alpaca': {'instruction': 'Name a colour.', 'input': '', 'output': 'Blue.'},
    'oasst_tree': {'message_tree_id': 't1', 'prompt': {'text': 'Hello?', 'role': 'prompter', 'lang': 'en', 'replies': [
        {'text': 'Hi there.', 'role': 'assistant', 'rank': 0, 'replies': []}]}},
    'oasst_messages': [{'message_tree_id': 't2', 'message_id': 'm1', 'parent_id': None, 'role': 'prompter', 'text': 'Hello?', 'lang': 'en'},
                       {'message_tree_id': 't2', 'message_id': 'm2', 'parent_id': 'm1', 'role': 'assistant', 'text': 'Hi.', 'rank': 0, 'lang': 'en'}],
    'lima': {'conversations': ['What is a prime?', 'A number with exactly two divisors.'], 'source': 'stackexchange'},
    'sharegpt': {'id': 's1', 'conversations': [{'from': 'human', 'value': 'Hi'}, {'from': 'gpt', 'value': 'Hello!'}]},
    'sharegpt_preference': {'conversations': [{'from': 'human', 'value': 'Hi'}], 'chosen': {'from': 'gpt', 'value': 'Hello!'},
                            'rejected': {'from': 'gpt', 'value': 'Go away.'}},
    'hermes_fc': {'id': 'h1', 'conversations': [
        {'from': 'system', 'value': 'You may call tools. <tools> [{"name": "get_weather", "parameters": {"type": "object", "properties": {}}}] </tools>'},
        {'from': 'human', 'value': 'Weather in Paris?'},
        {'from': 'gpt', 'value': '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'}]},
    'llamafactory_tools': {'conversations': [{'from': 'human', 'value': 'Weather in Paris?'},
                                             {'from': 'function_call', 'value': '{"name": "get_weather", "arguments": {"city": "Paris"}}'},
                                             {'from': 'observation', 'value': '{"t": 20}'}, {'from': 'gpt', 'value': 'It is 20 degrees.'}],
                           'tools': '[{"name": "get_weather", "parameters": {"type": "object", "properties": {}}}]'},
    'messages': {'id': 'u1', 'messages': [U, A], 'tools': [{'type': 'function', 'function': {'name': 'f'}}]},
    'nemotron_v2': {'uuid': 'n1', 'category': 'chat', 'license': 'cc-by-4.0', 'generator': 'x', 'reasoning': 'off', 'messages': [U, A]},
    'coderforge': {'trajectory_id': 'c1', 'reward': 1, 'messages': json.dumps([U, A])},
    'agentic_trajectories': {'session_id': 'a1', 'agent_framework': 'x', 'messages_json': json.dumps([U, A])},
    'swe_agent': {'trajectory': 'sw1', 'history': [{'role': 'system', 'content': 'You are an agent.'}, U, A]},
    'glaive_v2': {'system': 'SYSTEM: You are helpful.', 'chat': 'USER: Hi\n\n\nASSISTANT: Hello! <|endoftext|>'},
    'qwen35_toolcalling': {'messages': [{'role': 'system', 'content': 'You can call {"name": "f", "parameters": {}}'}, U,
                                        {'role': 'assistant', 'content': '<functioncall> {"name": "f", "arguments": \'{}\'}'},
                                        {'role': 'user', 'content': 'FUNCTION RESPONSE: {"ok": 1}'}, A]},
    'xlam': {'id': 7, 'query': 'Weather?', 'tools': '[{"name": "w", "parameters": {"city": {"type": "str"}}}]',
             'answers': '[{"name": "w", "arguments": {"city": "Paris"}}]'},
    'mt_bench': {'question_id': 81, 'category': 'writing', 'turns': ['Write a poem.', 'Now shorter.']},
    'humaneval': {'task_id': 'HumanEval/0', 'prompt': 'def f(x):\n    """Return x."""\n', 'entry_point': 'f'},
    'hh_rlhf': {'chosen': '\n\nHuman: Hi\n\nAssistant: Hello!', 'rejected': '\n\nHuman: Hi\n\nAssistant: Go away.'},
    'openai_preference': {'prompt': [U], 'chosen': [A], 'rejected': [{'role': 'assistant', 'content': 'No.'}]},
    'bfcl': {'id': 'simple_1', 'question': [[U]], 'function': [{'name': 'sort', 'parameters': {'type': 'dict', 'properties': {}}}]},
    'anthropic': {'id': 'msg_1', 'system': 'Be brief.', 'messages': [U, {'role': 'assistant', 'content': [{'type': 'text', 'text': 'Use sorted(xs).'}]}]},
    'openai_responses': {'id': 'resp_1', 'input': [{'type': 'message', 'role': 'user', 'content': 'Sort?'}],
                         'output': [{'type': 'message', 'role': 'assistant', 'content': [{'type': 'output_text', 'text': 'Use sorted(xs).'}]}]},
    'chat': {'conversations': [{'role': 'system', 'content': '你是一个助手。'}, {'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': 'Hello!'}]},
    'dolly': {'instruction': 'Name a colour.', 'context': '', 'response': 'Blue.', 'category': 'brainstorming'},
    'ultrachat': {'id': '0', 'data': ['What is a prime?', 'A number with exactly two divisors.']},
}

@pytest.mark.parametrize('name', sorted(NORMALIZERS))
def test_detection_names_every_known_format(name, tmp_path):
    assert name in GOOD and name in SIGNATURES, f'normalizer {name} has no detection signature or test record'
    recs = GOOD[name] if isinstance(GOOD[name], list) else [GOOD[name]] * 3
    p = tmp_path / 'f.jsonl'; p.write_text(''.join(json.dumps(r) + '\n' for r in recs))
    d = detect_format(p)
    assert d['matches'] and d['matches'][0]['normalizer'] == name, (name, d['matches'])
    assert d['matches'][0]['normalized'] == f'{len(recs) if name != "oasst_messages" else 1}/{len(recs) if name != "oasst_messages" else 1}'


# ---- layouts met in users' own files (issue 23) ----

def test_content_parts_text_and_reasoning(tmp_path):
    "OpenAI text parts and {type: text|reasoning, value} parts: text joined, reasoning parts to reasoning_content."
    recs = [{'id': 'p1', 'messages': [
                {'role': 'system', 'content': [{'type': 'text', 'text': 'Be brief.'}]},
                {'role': 'user', 'content': [{'type': 'text', 'text': 'Sort '}, {'type': 'text', 'text': '[3, 1]'}]},
                {'role': 'assistant', 'content': [{'type': 'text', 'text': '[1, 3]'}]}]},
            {'id': 'p2', 'messages': [
                {'role': 'user', 'content': [{'type': 'text', 'value': 'What is 6 x 7?'}]},
                {'role': 'assistant', 'content': [{'type': 'reasoning', 'value': '6 x 7 = 42.'},
                                                  {'type': 'text', 'value': '42'}]}]}]
    p = write_jsonl(tmp_path / 'parts.jsonl', recs)
    d = detect_format(p)
    assert d['best'] == 'messages' and d['matches'][0]['normalized'] == '2/2', d['matches']
    rows, rej = normalize_all(p)
    assert not rej and [validate_row(r) for r in rows] == [[], []]
    assert rows[0]['messages'][1]['content'] == 'Sort [3, 1]' and rows[0]['messages'][0]['content'] == 'Be brief.'
    assert rows[1]['messages'][1] == {'role': 'assistant', 'content': '42', 'reasoning_content': '6 x 7 = 42.'}

def test_non_text_parts_are_a_named_rejection(tmp_path):
    "An image part is a rejection that names the part's type, never a row with the picture cut out."
    img = {'role': 'user', 'content': [{'type': 'text', 'text': 'What is in this picture?'},
                                       {'type': 'image_url', 'image_url': {'url': 'data:image/png;base64,AAAA'}}]}
    p = write_jsonl(tmp_path / 'vision.jsonl', [{'messages': [img, {'role': 'assistant', 'content': 'A cat.'}]},
                                                {'messages': [{'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': 'Hello'}]}])
    rows, rej = normalize_all(p, 'messages')
    assert len(rows) == 1 and len(rej) == 1
    assert rej[0]['reason'] == ("non-text content: message 0 part 1 has type 'image_url'; "
                                "only text, reasoning, tool calls and tool results are read") and rej[0]['index'] == 0
    with pytest.raises(Exception, match='reasoning outside an answer'):
        norm_messages([{'role': 'user', 'content': [{'type': 'reasoning', 'value': 'x'}]}])

def test_json_lines_in_a_json_file(tmp_path):
    "A .json file written as JSON lines is read line by line (a broken line is one rejection, not the file)."
    recs = [{'instruction': f'Name colour number {i}.', 'input': '', 'output': 'Blue.'} for i in range(5)]
    p = tmp_path / 'alpaca_lines.json'
    p.write_text(''.join(json.dumps(r) + '\n' for r in recs[:3]) + '{"instruction": "broken\n' +
                 ''.join(json.dumps(r) + '\n' for r in recs[3:]))
    got = list(read_file(p))
    assert len(got) == 6 and got[3]['_line'] == 4 and got[3]['_error'].startswith('invalid JSON')
    d = detect_format(p)
    assert (d['best'], d['sampled'], d['unreadable']['count']) == ('alpaca', 5, 1), d
    rows, rej = normalize_all(p)
    assert len(rows) == 5 and len(rej) == 1 and rej[0]['line'] == 4

def test_a_json_file_holding_one_object(tmp_path):
    "One conversation pretty-printed, on one line, or a container object around the records: all read."
    row = {'id': 'c1', 'messages': [U, A]}
    for name, text in (('pretty.json', json.dumps(row, indent=2)), ('one_line.json', json.dumps(row))):
        p = tmp_path / name; p.write_text(text)
        assert list(read_file(p)) == [row], name
        assert detect_format(p)['best'] == 'messages'
        assert normalize_all(p)[0][0]['id'] == 'mine/c1'
    box = tmp_path / 'box.json'
    box.write_text(json.dumps({'version': '1.0', 'data': [row, {**row, 'id': 'c2'}]}, indent=1))
    assert [r['id'] for r in read_file(box)] == ['c1', 'c2']
    gz = tmp_path / 'rows.json.gz'; gz.write_bytes(gzip.compress(json.dumps([row]).encode()))
    assert list(read_file(gz)) == [row]

def test_nested_prompt_sets_with_functions(tmp_path):
    "BFCL-style: question as lists of turns, functions beside them; tools kept in the canonical layout."
    fn = {'name': 'triangle_area', 'description': 'Area of a triangle.',
          'parameters': {'type': 'dict', 'required': ['base'], 'properties': {
              'base': {'type': 'integer'}, 'height': {'type': 'float'},
              'units': {'type': 'tuple', 'items': {'type': 'string'}}, 'extra': {'type': 'any'}}}}
    recs = [{'id': 'simple_0', 'question': [[{'role': 'user', 'content': 'Area of a triangle, base 10, height 5?'}]],
             'function': [fn]},
            {'id': 'multi_turn_0', 'question': [[{'role': 'system', 'content': 'Answer with calls.'},
                                                 {'role': 'user', 'content': 'First turn.'}],
                                                [{'role': 'user', 'content': 'Second turn.'}]],
             'function': json.dumps([fn]), 'involved_classes': ['Geometry']}]
    p = write_jsonl(tmp_path / 'bfcl.json', recs)
    d = detect_format(p)
    assert d['best'] == 'bfcl' and d['matches'][0]['normalized'] == '2/2'
    assert d['matches'][0]['unmapped'] == {'involved_classes': 1}        # said, not dropped silently
    rows, rej = normalize_all(p)
    assert not rej and all(validate_row(r) == [] for r in rows)
    assert [m['content'] for m in rows[1]['messages']] == ['Answer with calls.', 'First turn.', 'Second turn.']
    t = rows[0]['tools'][0]
    assert t['type'] == 'function' and t['function']['name'] == 'triangle_area'
    assert t['function']['parameters'] == {'type': 'object', 'required': ['base'], 'properties': {
        'base': {'type': 'integer'}, 'height': {'type': 'number'}, 'units': {'type': 'array', 'items': {'type': 'string'}},
        'extra': {}}}
    assert rows[1]['tools'] == rows[0]['tools'] and rows[0]['id'] == 'mine/simple_0'

_PAIRS = [   # (normalizer, a pair whose chosen answer is empty, the same pair answered)
    ('sharegpt_preference', {'conversations': [{'from': 'human', 'value': 'q'}], 'chosen': {'from': 'gpt', 'value': ' '},
                             'rejected': {'from': 'gpt', 'value': 'bad'}}, {'chosen': {'from': 'gpt', 'value': 'good'}}),
    ('hh_rlhf', {'chosen': '\n\nHuman: hi', 'rejected': '\n\nHuman: hi\n\nAssistant: go away'},
     {'chosen': '\n\nHuman: hi\n\nAssistant: hello'}),
    ('openai_preference', {'prompt': 'q', 'chosen': '', 'rejected': 'bad'}, {'chosen': 'good'}),
    ('openai_preference', {'input': {'messages': [{'role': 'user', 'content': 'q'}]}, 'preferred_output': [],
                           'non_preferred_output': [{'role': 'assistant', 'content': 'bad'}]},
     {'preferred_output': [{'role': 'assistant', 'content': 'good'}]}),
]

@pytest.mark.parametrize('name,rec,answered', _PAIRS)
def test_a_preference_pair_without_an_answer_is_rejected(name, rec, answered):
    rows, rej = normalize_record('t', NORMALIZERS[name], rec, 0)
    assert rows == [] and len(rej) == 1, rows
    assert rej[0]['reason'].startswith('no answer: the preference pair') and 'no assistant turn' in rej[0]['reason']
    rows, rej = normalize_record('t', NORMALIZERS[name], {**rec, **answered}, 0)
    assert rej == [] and rows[0]['messages'][-1]['role'] == 'assistant'

def test_detection_says_what_each_normalizer_expected():
    d = detect_format([{'question': 'What is the capital of France?', 'answer': 'Paris'}] * 3)
    assert d['matches'] == [] and d['best'] is None and d['fields'] == {'question': 3, 'answer': 3}
    exp = {e['normalizer']: e for e in d['expected']}
    assert set(exp) == set(SIGNATURES)
    assert [e['normalizer'] for e in d['expected'][:2]] == ['bfcl', 'openorca']        # nearest first
    assert exp['openorca']['present'] == ['question'] and exp['openorca']['missing'] == ['system_prompt', 'response']
    assert exp['openai_preference']['missing'] == ['prompt', 'chosen']
    # fields all there but nothing normalizes: the first rejection says why
    d = detect_format([{'messages': [{'role': 'user', 'content': [{'type': 'input_audio', 'input_audio': {}}]}]}])
    m = {e['normalizer']: e for e in d['expected']}['messages']
    assert m['hits'] == 1 and m['first_rejection'].startswith('non-text content')
