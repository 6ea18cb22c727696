"The source registry, normalizers on malformed native records, the mix builder and the `dflash-nb sources` CLI."
import json
from pathlib import Path
import pytest

from dflash_nb.formats import NORMALIZERS, SIGNATURES, detect_format, normalize_record
from dflash_nb.sources import REGISTRY, CATEGORIES, MixOptions, build_mix, normalize_file, survey_source, read_source, allocate, Source

def _mix(**kw):
    "The mix settings these tests were written with: no length filters, equal category weights."
    return MixOptions(**{'min_user_chars': 1, 'max_chars': None, 'category_weights': {}, **kw})
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
    a, ca = build_mix(srcs, _mix(total=40, seed=5), log=lambda m: None)
    b, _ = build_mix(srcs, _mix(total=40, seed=5), log=lambda m: None)
    c, _ = build_mix(srcs, _mix(total=40, seed=6), log=lambda m: None)
    assert a == b and a != c and len(a) == 40
    assert all(ca[n]['kept'] == ca[n]['quota'] for n in names)
    assert len({r['id'] for r in a}) == 40
    from dflash_nb.sources import dedup_keys
    assert len({dedup_keys(r)[1] for r in a}) == 40                  # no two rows share normalized user text
    full, cf = build_mix(srcs[1:4], _mix(total=200, quotas={'demo-glaive-toolcall': 100, 'demo-glaive-v2': 50, 'demo-qwen35-toolcalling': 50}), log=lambda m: None)
    assert cf['demo-glaive-v2']['kept'] == 0 and cf['demo-qwen35-toolcalling']['kept'] == 0   # both are Glaive again
    for n, c in cf.items():   # counts reconcile at every step
        assert c['normalized'] == c['too_short'] + c['too_long'] + c['dup_exact'] + c['dup_normalized'] + c['candidates']
    assert sum(allocate(57, srcs, {}, {'general': 2}).values()) == 57

def test_filters_and_unavailable_sources(monkeypatch):
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    mix, c = build_mix([REGISTRY['glaive-v2'], REGISTRY['demo-alpaca']], _mix(total=20, min_user_chars=40, max_chars=600), log=lambda m: None)
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
    mix, c = build_mix([src], _mix(total=10, scan_factor=20), log=lambda m: None)
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

U, A = {'role': 'user', 'content': 'How do I sort a list in Python?'}, {'role': 'assistant', 'content': 'Use sorted(xs).'}
HH = {'chosen': '\n\nHuman: Hi\n\nAssistant: Hello!', 'rejected': '\n\nHuman: Hi\n\nAssistant: Go away.'}

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

def test_detect_says_what_each_normalizer_expected(tmp_path):
    "A file no normalizer reads: the fields seen, then every normalizer's expectation, nearest first."
    p = tmp_path / 'qa.json'
    p.write_text(json.dumps([{'question': 'What is the capital of France?', 'answer': 'Paris'}] * 4, indent=1))
    code, out, err = cli('sources', 'detect', p)
    lines = out.splitlines()
    assert code == 1 and 'no match' in err and 'fields: question (4), answer (4)' in lines[0]
    i = lines.index('what each normalizer expects, nearest first:')
    table = lines[i + 1:]
    assert len(table) == len(NORMALIZERS)
    assert table[0].split()[:3] == ['bfcl', 'expects', 'question'] and 'their shape fits 0 of the records' in table[0]
    assert ' '.join(table[1].split()) == 'openorca expects system_prompt+question+response has question; lacks system_prompt, response'
    assert any(l.split()[0] == 'alpaca' and l.endswith('lacks instruction, output') for l in table)

def test_detect_reports_unreadable_lines_and_normalizes_the_rest(tmp_path):
    p = tmp_path / 'chats.json'                    # JSON lines under a .json name, one line broken
    rows = [{'messages': [{'role': 'user', 'content': f'Question {i}?'}, {'role': 'assistant', 'content': 'Yes.'}]}
            for i in range(3)]
    p.write_text(json.dumps(rows[0]) + '\n{"messages": [\n' + ''.join(json.dumps(r) + '\n' for r in rows[1:]))
    code, out, _ = cli('sources', 'detect', p)
    assert code == 0 and '3 records sampled' in out and '1 records could not be read; first: line 2: invalid JSON' in out
    code, out, _ = cli('sources', 'normalize', '--input', p, '--output', tmp_path / 'o.jsonl', '--quarantine', tmp_path / 'q.jsonl')
    assert code == 0 and 'read 4 records, wrote 3 rows' in out and 'quarantined 1' in out
    q = [json.loads(l) for l in (tmp_path / 'q.jsonl').read_text().splitlines()]
    assert len(q) == 1 and (q[0]['index'], q[0]['line']) == (1, 2) and q[0]['reason'].startswith('invalid JSON')

def test_preference_rows_without_an_answer_are_quarantined_not_written(tmp_path):
    pairs = _llamafactory_ranking(3)
    pairs[1]['chosen'] = {'from': 'gpt', 'value': '   '}
    p = tmp_path / 'dpo.json'; p.write_text(json.dumps(pairs))
    c = normalize_file('auto', p, tmp_path / 'o.jsonl', tmp_path / 'q.jsonl')
    out = [json.loads(l) for l in (tmp_path / 'o.jsonl').read_text().splitlines()]
    assert (c['written'], c['quarantined']) == (2, 1) and list(c['reasons']) == ['no answer']
    assert all(o['messages'][-1]['role'] == 'assistant' for o in out)
    q = json.loads((tmp_path / 'q.jsonl').read_text())
    assert 'chosen answer is empty' in json.dumps(q)

def test_normalize_prints_each_repair_with_its_class(tmp_path):
    "A meaning-changing repair applies only when opted in (`--repair`), and is printed with its class from schema.REPAIRS."
    p = tmp_path / 'greet.jsonl'; p.write_text(json.dumps({'messages': [{'role': 'assistant', 'content': 'Hello!'}]}) + '\n')
    code, out, _ = cli('sources', 'normalize', '--source', 'messages', '--input', p, '--output', tmp_path / 'o.jsonl')
    assert code == 0 and 'wrote 0 rows' in out and 'no user turn' in out   # quarantined unless opted in
    code, out, _ = cli('sources', 'normalize', '--source', 'messages', '--input', p, '--output', tmp_path / 'o.jsonl',
                       '--repair', 'prepend_user')
    assert code == 0 and '1  repaired: prepend_user (meaning-changing)' in out

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
    hh = tmp_path / 'hh.jsonl'; hh.write_text(json.dumps(HH) + '\n')
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
    c = normalize_file('messages', p, tmp_path / 'o.jsonl', tmp_path / 'q.jsonl',
                       repairs=('map_unknown_roles', 'prepend_user', 'move_system_first', 'drop_empty_turns'))
    assert (c['written'], c['quarantined']) == (3, 1)
    assert c['repairs'] == {'map_unknown_roles': 1, 'prepend_user': 1, 'move_system_first': 1}
    out = {o['id']: o for o in map(json.loads, (tmp_path / 'o.jsonl').read_text().splitlines())}
    assert out['r/w']['meta']['repairs'] == ['map_unknown_roles: wizard->user'] and out['r/w']['messages'][0]['role'] == 'user'
    assert [m['role'] for m in out['r/s']['messages']] == ['system', 'user', 'assistant']
    c0 = normalize_file('messages', p, tmp_path / 'o0.jsonl', repairs=())
    assert (c0['written'], c0['quarantined']) == (0, 4)        # off: those rows are quarantined, as before
