"The source registry, normalizers on malformed native records, the mix builder and the `dflash-nb sources` CLI."
import json
from pathlib import Path
import pytest

from dflash_nb.sources import (REGISTRY, NORMALIZERS, CATEGORIES, SIGNATURES, build_mix, normalize_file, normalize_record,
                               survey_source, read_source, allocate, Source, detect_format)
from dflash_nb.core import fixtures_dir
from dflash_nb.schema import validate_row
from conftest import dflash

ISSUE_NORMALIZERS = ['openorca', 'evol_codealpaca', 'magicoder_oss', 'alpaca', 'oasst_tree', 'oasst_messages', 'lima',
                     'nemotron_v2', 'coderforge', 'agentic_trajectories', 'glaive_v2', 'qwen35_toolcalling', 'hermes_fc',
                     'xlam', 'sharegpt', 'llamafactory_tools', 'swe_agent']

def test_every_source_of_the_mix_has_a_normalizer_and_registry_entry():
    assert set(ISSUE_NORMALIZERS) <= set(NORMALIZERS)
    hub = {s.hf_id for s in REGISTRY.values() if s.hf_id}
    for hf in ('Open-Orca/OpenOrca', 'theblackcat102/evol-codealpaca-v1', 'ise-uiuc/Magicoder-OSS-Instruct-75K', 'sahil2801/CodeAlpaca-20k',
               'OpenAssistant/oasst1', 'OpenAssistant/oasst2', 'GAIR/lima', 'nvidia/Nemotron-Post-Training-Dataset-v2',
               'togethercomputer/CoderForge-Preview', 'glaiveai/glaive-function-calling-v2', 'Mustafaege/qwen3.5-toolcalling-v2',
               'NousResearch/hermes-function-calling-v1', 'Salesforce/xlam-function-calling-60k'):
        assert hf in hub, hf
    for s in REGISTRY.values():
        assert s.category in CATEGORIES and s.license and s.normalizer in NORMALIZERS

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
}

@pytest.mark.parametrize('name', sorted(NORMALIZERS))
def test_malformed_native_records_are_rejected_with_reasons(name):
    recs = MALFORMED[name] + ['not a dict', None]
    for i, raw in enumerate(recs):
        rows, rej = normalize_record('t', NORMALIZERS[name], raw, i)
        assert not rows and rej, (name, raw, rows)
        assert all(r['reason'] and ':' in r['reason'] for r in rej), rej

def test_demo_sample_covers_the_categories():
    demo = [s for s in REGISTRY.values() if s.path and s.path.startswith('pkg:')]
    rows = []
    for s in demo:
        info = survey_source(s)
        assert info['status'] == 'ok' and info['rejected'] == {} and info['normalized'] == info['rows'], info['name']
        rows += [r for r, e in __import__('dflash_nb.sources', fromlist=['x']).normalize_stream(s)]
    assert 300 <= len(rows) <= 600
    assert {s.category for s in demo} >= {'general', 'code', 'multi-turn', 'tool-calling', 'agentic'}
    assert sum(bool(r.get('tools')) for r in rows) >= 50
    assert sum(sum(m['role'] == 'user' for m in r['messages']) > 1 for r in rows) >= 50
    assert sum(r['messages'][-1]['role'] == 'user' for r in rows) >= 100

def test_mix_is_deterministic_deduplicated_and_respects_quotas():
    names = ['demo-alpaca', 'demo-glaive-toolcall', 'demo-glaive-v2', 'demo-qwen35-toolcalling', 'demo-mtbench']
    srcs = [REGISTRY[n] for n in names]
    a, ca = build_mix(srcs, total=40, seed=5, log=lambda m: None)
    b, _ = build_mix(srcs, total=40, seed=5, log=lambda m: None)
    c, _ = build_mix(srcs, total=40, seed=6, log=lambda m: None)
    assert a == b and a != c and len(a) == 40
    assert all(ca[n]['kept'] == ca[n]['quota'] for n in names)
    assert len({r['id'] for r in a}) == 40
    from dflash_nb.sources import dedup_keys
    assert len({dedup_keys(r)[1] for r in a}) == 40                  # no two rows share normalized user text
    full, cf = build_mix(srcs[1:4], total=200, quotas={'demo-glaive-toolcall': 100, 'demo-glaive-v2': 50, 'demo-qwen35-toolcalling': 50}, log=lambda m: None)
    assert cf['demo-glaive-v2']['kept'] == 0 and cf['demo-qwen35-toolcalling']['kept'] == 0   # both are Glaive again
    for n, c in cf.items():   # counts reconcile at every step
        assert c['normalized'] == c['too_short'] + c['too_long'] + c['dup_exact'] + c['dup_normalized'] + c['candidates']
    assert sum(allocate(57, srcs, category_weights={'general': 2}).values()) == 57

def test_filters_and_unavailable_sources(monkeypatch):
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    mix, c = build_mix([REGISTRY['glaive-v2'], REGISTRY['demo-alpaca']], total=20, min_user_chars=40, max_chars=600, log=lambda m: None)
    assert c['glaive-v2']['status'] == 'offline' and c['glaive-v2']['kept'] == 0
    assert c['demo-alpaca']['too_short'] > 0 and c['demo-alpaca']['too_long'] > 0
    assert all(len(r['messages'][0]['content']) >= 40 for r in mix)
    assert survey_source(REGISTRY['xlam'])['status'] == 'offline'
    missing = Source('gone', 'alpaca', 'general', 'x', path='/nonexistent/file.jsonl')
    assert survey_source(missing)['status'] == 'missing'

def test_mix_reads_a_bounded_prefix_of_large_sources(tmp_path):
    p = tmp_path / 'big.jsonl'
    with open(p, 'w') as f:
        for i in range(5000): f.write(json.dumps({'instruction': f'question number {i} about things', 'output': 'x'}) + '\n')
    src = Source('big', 'alpaca', 'general', 'x', path=str(p))
    mix, c = build_mix([src], total=10, scan_factor=20, log=lambda m: None)
    assert c['big']['read'] == 200 and len(mix) == 10

def test_cli_list_and_normalize(tmp_path):
    r = dflash('sources', 'list')
    assert 'glaive-v2' in r.stdout and 'demo-hermes' in r.stdout and 'Apache-2.0' in r.stdout
    inp = tmp_path / 'glaive.jsonl'
    good = json.loads(Path(REGISTRY['demo-glaive-v2'].path.replace('pkg:', str(Path(__import__('dflash_nb').__file__).parent / 'data') + '/')).read_text().splitlines()[0])
    inp.write_text('\n'.join([json.dumps(good), '{broken', json.dumps({'system': 'SYSTEM: x', 'chat': 'nothing'}), json.dumps({'chat': 'USER: hi'})]) + '\n')
    r = dflash('sources', 'normalize', '--source', 'glaive-v2', '--input', inp, '--output', tmp_path / 'o.jsonl', '--quarantine', tmp_path / 'q.jsonl')
    assert 'read 4 records, wrote 1 rows' in r.stdout and 'quarantined 3' in r.stdout
    assert 'invalid JSON' in r.stdout and 'no turns' in r.stdout and 'missing field' in r.stdout
    out = [json.loads(l) for l in (tmp_path / 'o.jsonl').read_text().splitlines()]
    assert len(out) == 1 and validate_row(out[0]) == [] and out[0]['tools']
    assert len((tmp_path / 'q.jsonl').read_text().splitlines()) == 3


def cli(*args):
    "Run the CLI in-process (cheap): (exit code, stdout, stderr)."
    import contextlib, io
    from dflash_nb.cli import main
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e): code = main([str(a) for a in args])
    return code, o.getvalue(), e.getvalue()

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
}

@pytest.mark.parametrize('name', sorted(NORMALIZERS))
def test_detection_names_every_known_format(name, tmp_path):
    assert name in GOOD and name in SIGNATURES, f'normalizer {name} has no detection signature or test record'
    recs = GOOD[name] if isinstance(GOOD[name], list) else [GOOD[name]] * 3
    p = tmp_path / 'f.jsonl'; p.write_text(''.join(json.dumps(r) + '\n' for r in recs))
    d = detect_format(p)
    assert d['matches'] and d['matches'][0]['normalizer'] == name, (name, d['matches'])
    assert d['matches'][0]['normalized'] == f'{len(recs) if name != "oasst_messages" else 1}/{len(recs) if name != "oasst_messages" else 1}'

@pytest.mark.skipif(fixtures_dir() is None, reason='no fixtures')
def test_detection_on_the_registry_files_and_real_fixtures():
    files = [s for s in REGISTRY.values() if s.path]
    assert sum(s.path.startswith('fixtures:') for s in files) >= 9
    for s in files:
        m = detect_format(s.path)['matches']
        assert m and m[0]['normalizer'] == s.normalizer, (s.name, [x['normalizer'] for x in m])

def test_unknown_file_is_a_clear_no_match(tmp_path):
    p = tmp_path / 'odd.jsonl'; p.write_text(json.dumps({'question_text': 'q', 'answer_text': 'a'}) + '\n')
    assert detect_format(p)['matches'] == []
    code, out, err = cli('sources', 'detect', p)
    assert code == 1 and 'no match' in err and 'question_text (1)' in out
    code, out, err = cli('sources', 'normalize', '--input', p, '--output', tmp_path / 'o.jsonl')
    assert code == 1 and err.count('\n') == 1 and 'no normalizer matches' in err and not (tmp_path / 'o.jsonl').exists()

def test_openai_messages_file_keeps_ids_tools_calls_and_reasoning(tmp_path):
    row = {'id': 'conv-42', 'tools': [{'type': 'function', 'function': {'name': 'get_weather', 'parameters': {'type': 'object'}}}],
           'messages': [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Weather in Paris?'},
                        {'role': 'assistant', 'content': '', 'reasoning_content': 'I should call the tool.',
                         'tool_calls': [{'id': 'call_9', 'type': 'function', 'function': {'name': 'get_weather', 'arguments': '{"city": "Paris"}'}}]},
                        {'role': 'tool', 'tool_call_id': 'call_9', 'content': '{"t": 20}'}, {'role': 'assistant', 'content': 'It is 20 C.'}]}
    p = tmp_path / 'mine.jsonl'; p.write_text(json.dumps(row) + '\n' + json.dumps({**row, 'id': 'conv-43'}) + '\n')
    code, out, _ = cli('sources', 'detect', p)
    assert code == 0 and out.splitlines()[1].split()[:2] == ['best', 'messages'] and 'not mapped: none' in out.splitlines()[1]
    code, out, _ = cli('sources', 'normalize', '--source', 'auto', '--input', p, '--output', tmp_path / 'o.jsonl')
    assert code == 0 and 'normalizer messages: read 2 records, wrote 2 rows' in out
    out = [json.loads(l) for l in (tmp_path / 'o.jsonl').read_text().splitlines()]
    assert [o['id'] for o in out] == ['mine/conv-42', 'mine/conv-43']
    assert out[0]['tools'] == row['tools']
    a = out[0]['messages'][2]
    assert a['tool_calls'][0]['id'] == 'call_9' and a['tool_calls'][0]['function']['arguments'] == {'city': 'Paris'}
    assert a['reasoning_content'] == 'I should call the tool.' and out[0]['messages'][3]['tool_call_id'] == 'call_9'

def test_a_normalizer_reports_the_fields_it_does_not_map(tmp_path):
    row = {'uuid': 'x', 'id': 'keep-me', 'tools': [{'type': 'function', 'function': {'name': 'f'}}], 'messages': [U, A]}
    p = tmp_path / 'n.jsonl'; p.write_text(json.dumps(row) + '\n')
    c = normalize_file('nemotron-v2-chat', p, tmp_path / 'o.jsonl')
    assert c['written'] == 1 and c['unmapped_fields'] == {'id': 1, 'tools': 1}
    assert detect_format(p)['matches'][0]['normalizer'] == 'messages'   # the reader that maps every field wins

def _llamafactory_ranking(n):
    return [{'conversations': [{'from': 'human', 'value': f'Question {i}: what is {i} + {i}?'}],
             'chosen': {'from': 'gpt', 'value': f'{2 * i}'}, 'rejected': {'from': 'gpt', 'value': 'I do not know.'}} for i in range(n)]

def test_preference_files_keep_the_chosen_answer(tmp_path):
    p = tmp_path / 'dpo_en_demo.json'; p.write_text(json.dumps(_llamafactory_ranking(300)))
    assert detect_format(p)['matches'][0]['normalizer'] == 'sharegpt_preference'
    c = normalize_file('auto', p, tmp_path / 'o.jsonl')
    out = [json.loads(l) for l in (tmp_path / 'o.jsonl').read_text().splitlines()]
    assert (c['read'], c['written'], c['quarantined']) == (300, 300, 0)
    assert sum(o['messages'][-1]['role'] == 'user' for o in out) == 0 and out[7]['messages'][-1]['content'] == '14'
    assert c['unmapped_fields'] == {'rejected': 300}          # left out on purpose, and said so
    # the issue's trap: through the plain ShareGPT normalizer the answers are missing, and the report says why
    c2 = normalize_file('sharegpt', p, tmp_path / 'o2.jsonl')
    assert c2['unmapped_fields'] == {'chosen': 300, 'rejected': 300}
    hh = tmp_path / 'hh.jsonl'; hh.write_text(json.dumps(GOOD['hh_rlhf']) + '\n')
    assert json.loads((tmp_path / 'o3.jsonl').read_text() if normalize_file('auto', hh, tmp_path / 'o3.jsonl') else '')['messages'][-1]['content'] == 'Hello!'
    dpo = tmp_path / 'openai_dpo.jsonl'
    dpo.write_text(json.dumps({'input': {'messages': [U], 'tools': [{'type': 'function', 'function': {'name': 'f'}}]},
                               'preferred_output': [A], 'non_preferred_output': [{'role': 'assistant', 'content': 'No.'}]}) + '\n')
    c4 = normalize_file('auto', dpo, tmp_path / 'o4.jsonl')
    o4 = json.loads((tmp_path / 'o4.jsonl').read_text())
    assert c4['normalizer'] == 'openai_preference' and o4['messages'][-1] == A and o4['tools'][0]['function']['name'] == 'f'
    assert c4['unmapped_fields'] == {'non_preferred_output': 1}

def test_structural_repairs_are_applied_and_recorded(tmp_path):
    rows = [{'id': 'w', 'messages': [{'role': 'wizard', 'content': 'Cast a spell.'}]},
            {'id': 'b', 'messages': [{'role': 'assistant', 'content': 'Hello, how can I help?'}]},
            {'id': 's', 'messages': [U, {'role': 'system', 'content': 'Be brief.'}, A]},
            {'id': 'e', 'messages': [{'role': 'wizard', 'content': '   '}]}]
    p = tmp_path / 'r.jsonl'; p.write_text(''.join(json.dumps(r) + '\n' for r in rows))
    c = normalize_file('messages', p, tmp_path / 'o.jsonl', tmp_path / 'q.jsonl')
    assert (c['written'], c['quarantined']) == (3, 1)
    assert c['repairs'] == {'map_unknown_roles': 1, 'prepend_user': 1, 'move_system_first': 1}
    out = {o['id']: o for o in map(json.loads, (tmp_path / 'o.jsonl').read_text().splitlines())}
    assert out['r/w']['meta']['repairs'] == ['map_unknown_roles: wizard->user'] and out['r/w']['messages'][0]['role'] == 'user'
    assert [m['role'] for m in out['r/s']['messages']] == ['system', 'user', 'assistant']
    c0 = normalize_file('messages', p, tmp_path / 'o0.jsonl', repairs=())
    assert (c0['written'], c0['quarantined']) == (0, 4)        # off: those rows are quarantined, as before
