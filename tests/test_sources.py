"The source registry, normalizers on malformed native records, the mix builder and the `dflash-nb sources` CLI."
import json
from pathlib import Path
import pytest

from dflash_nb.sources import (REGISTRY, NORMALIZERS, CATEGORIES, build_mix, normalize_file, normalize_record,
                               survey_source, read_source, allocate, Source)
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
    'sharegpt': [{'conversations': {'from': 'human'}}, {'conversations': [{'from': 'gpt', 'value': 'only an answer'}]}],
    'llamafactory_tools': [{'conversations': [{'from': 'human', 'value': 'q'}, {'from': 'function_call', 'value': '[1]'}]}, {'conversations': [{'from': 'observation', 'value': 'r'}]}],
    'swe_agent': [{'history': [{'role': 'user', 'content': 'x'}, {'role': 'tool', 'content': 'orphan'}]}, {'trajectory': 't'}],
    'mt_bench': [{'turns': []}, {'turns': [1, 2]}],
    'humaneval': [{'task_id': 'x'}, {'prompt': None}],
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
