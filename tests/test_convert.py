"Format conversion: lossless round trips (hypothesis), every malformed row accounted for, fixtures convert without unexplained losses."
import json, string
from pathlib import Path
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

from dflash_nb.schema import (validate_row, repair_row, to_sharegpt, from_sharegpt, to_speculators, from_speculators)
from dflash_nb.convert import ConvertOptions, convert_file
from dflash_nb.core import fixtures_dir

# ---------- generated canonical rows ----------
txt = st.text(alphabet=string.printable + 'éß中文🙂', min_size=1, max_size=40).filter(lambda s: s.strip())
key = st.text(alphabet=string.ascii_letters + '_', min_size=1, max_size=8)
jval = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | txt,
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(key, c, max_size=3), max_leaves=6)

@st.composite
def rows(draw):
    names = draw(st.lists(key, min_size=1, max_size=3, unique=True))
    msgs = []
    if draw(st.booleans()): msgs.append({'role': 'system', 'content': draw(txt)})
    msgs.append({'role': 'user', 'content': draw(txt)})
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(['assistant', 'call', 'user']))
        if kind == 'user': msgs.append({'role': 'user', 'content': draw(txt)}); continue
        m = {'role': 'assistant', 'content': draw(txt) if kind == 'assistant' else draw(st.sampled_from(['', 'let me check']))}
        if draw(st.booleans()): m['reasoning_content'] = draw(txt)
        if kind == 'call':
            n = draw(st.integers(1, 3)); ids = draw(st.booleans())
            m['tool_calls'] = [{**({'id': f'call_{i}'} if ids else {}), 'type': 'function',
                                'function': {'name': draw(st.sampled_from(names)), 'arguments': draw(st.dictionaries(key, jval, max_size=3))}}
                               for i in range(n)]
            msgs.append(m)
            for i in range(n):
                t = {'role': 'tool', 'content': draw(txt)}
                if ids: t['tool_call_id'] = f'call_{i}'
                if draw(st.booleans()): t['name'] = m['tool_calls'][i]['function']['name']
                msgs.append(t)
            continue
        msgs.append(m)
    row = {'id': draw(txt), 'source': draw(key), 'messages': msgs}
    if draw(st.booleans()):
        row['tools'] = [{'type': 'function', 'function': {'name': n, 'description': draw(txt),
                         'parameters': {'type': 'object', 'properties': {draw(key): {'type': 'string'}}}}} for n in names]
    if draw(st.booleans()): row['meta'] = draw(st.dictionaries(key, jval, max_size=3))
    return row

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows())
def test_generated_rows_are_valid_and_roundtrip(row):
    assert validate_row(row) == []
    assert repair_row(row) == (row, [])                                # nothing to repair in a valid row
    assert from_sharegpt(to_sharegpt(row)) == row                      # ShareGPT round trip is lossless
    back = from_speculators(to_speculators(row), row['source'])
    assert back == {k: v for k, v in row.items() if k != 'meta'}       # speculators layout carries no meta column
    assert json.loads(json.dumps(to_sharegpt(row), ensure_ascii=False)) == to_sharegpt(row)

@settings(max_examples=150, deadline=None)
@given(rows())
def test_string_arguments_are_repaired(row):
    broken = json.loads(json.dumps(row))
    n = 0
    for m in broken['messages']:
        for tc in m.get('tool_calls', []): tc['function']['arguments'] = json.dumps(tc['function']['arguments']); n += 1
    fixed, reps = repair_row(broken)
    assert fixed == row and reps == ([f'args_to_objects: {n} call(s)'] if n else [])
    if n: assert any(r.startswith('arguments not an object') for r in validate_row(broken))

# ---------- malformed rows: every row accounted for with a reason ----------
def _ok(i, **kw):
    r = {'id': f'r{i}', 'source': 'test', 'messages': [{'role': 'user', 'content': 'hello'}, {'role': 'assistant', 'content': 'hi'}]}
    r.update(kw); return r

CALL = lambda args: {'role': 'assistant', 'content': '', 'tool_calls': [{'type': 'function', 'function': {'name': 'f', 'arguments': args}}]}
U = {'role': 'user', 'content': 'q'}
A = {'role': 'assistant', 'content': 'a'}
BAD = {   # expected reason kind -> raw JSONL line
    'invalid JSON': '{"id": "x", "messages": [',
    'expected a JSON object': '[1, 2, 3]',
    'missing field': json.dumps({'source': 's', 'messages': [U]}),
    'bad id': json.dumps(_ok(0, id=17)),
    'bad source': json.dumps(_ok(0, source='')),
    'bad messages': json.dumps(_ok(0, messages={'role': 'user'})),
    'empty conversation': json.dumps(_ok(0, messages=[])),
    'bad message': json.dumps(_ok(0, messages=[U, 'just text'])),
    'unknown role': json.dumps(_ok(0, messages=[U, {'role': 'narrator', 'content': 'x'}])),
    'non-string content': json.dumps(_ok(0, messages=[{'role': 'user', 'content': 42}])),
    'missing content': json.dumps(_ok(0, messages=[U, {'role': 'assistant'}])),
    'no user turn': json.dumps(_ok(0, messages=[{'role': 'system', 'content': 's'}, {'role': 'assistant', 'content': 'a'}])),
    'system not first': json.dumps(_ok(0, messages=[U, {'role': 'system', 'content': 's'}])),
    'orphan tool message': json.dumps(_ok(0, messages=[U, {'role': 'tool', 'content': 'r'}])),
    'arguments not JSON': json.dumps(_ok(0, messages=[U, CALL('{"a": ')])),
    'arguments not an object': json.dumps(_ok(0, messages=[U, CALL([1, 2])])),
    'bad tool call': json.dumps(_ok(0, messages=[U, {'role': 'assistant', 'content': '', 'tool_calls': [{'type': 'function', 'function': {'arguments': {}}}]}])),
    'bad tools': json.dumps(_ok(0, tools=[{'description': 'no name, no type'}])),
    'unknown field': json.dumps(_ok(0, conversation=[])),
    'unknown message key': json.dumps(_ok(0, messages=[{'role': 'user', 'content': 'q', 'weight': 1}])),
    'bad reasoning': json.dumps(_ok(0, messages=[U, {'role': 'assistant', 'content': 'a', 'reasoning_content': ['x']}])),
    'bad meta': json.dumps(_ok(0, meta='x')),
    'too long': json.dumps(_ok(0, messages=[{'role': 'user', 'content': 'x' * 300_000}])),
    'duplicate id': json.dumps(_ok(1)),      # r1 is also written as a valid row below
    'bad tool_call_id': json.dumps(_ok(0, messages=[U, {**CALL({}), 'tool_calls': [{'id': 'c', 'type': 'function', 'function': {'name': 'f', 'arguments': {}}}]},
                                                   {'role': 'tool', 'content': 'r', 'tool_call_id': 5}])),
}

def test_malformed_rows_are_all_accounted_for(tmp_path):
    lines, expected = [json.dumps(_ok(1))], {}
    for i, (kind, line) in enumerate(BAD.items()):
        if kind not in ('duplicate id',) and line.startswith('{') and '"id": "r0"' in line: line = line.replace('"id": "r0"', f'"id": "bad{i}"')
        lines.append(line); expected[len(lines)] = kind
    lines += ['', json.dumps(_ok(2, messages=[{'role': 'human', 'content': [{'type': 'text', 'text': 'real'}]}, A]))]   # format-only repairs: kept
    (tmp_path / 'in.jsonl').write_text('\n'.join(lines) + '\n')
    c = convert_file(tmp_path / 'in.jsonl', tmp_path / 'out', ConvertOptions())   # the defaults: format-only repairs
    assert len(BAD) >= 20
    assert c['rows_in'] == c['rows_out'] + c['quarantined'] == len(lines) - 1        # the blank line is not a row
    assert c['rows_out'] == 2 and c['quarantined'] == len(BAD)
    assert c['repairs'] == {'flatten_content': 1, 'rename_roles': 1} and c['repair_kinds'] == {'format-only': 1}
    q = [json.loads(l) for l in (tmp_path / 'out' / 'quarantine.jsonl').read_text().splitlines()]
    got = {}
    for rec in q:
        assert rec['reason'] and rec['reasons']
        got[rec['reason'].split(':', 1)[0]] = rec
    missing = [k for k in BAD if k not in got and not any(r.startswith(k) for g in got.values() for r in g['reasons'])]
    assert not missing, f'no quarantined row with reason {missing}; got {sorted(got)}'
    out = [json.loads(l) for l in (tmp_path / 'out' / 'conversations.jsonl').read_text().splitlines()]
    assert [r['id'] for r in out] == ['r1', 'r2'] and all(validate_row(r) == [] for r in out)
    assert len((tmp_path / 'out' / 'sharegpt.jsonl').read_text().splitlines()) == 2

REPAIRABLE = {'unknown role': ['map_unknown_roles: narrator->user'], 'no user turn': ["prepend_user: 'Continue.' inserted"],
              'system not first': ['move_system_first: 1 system turn(s) merged at the start']}

OPT_IN = ['map_unknown_roles', 'prepend_user', 'move_system_first']

def test_meaning_changing_repairs_are_quarantined_by_default_with_the_repair_that_would_apply(tmp_path):
    lines = [l.replace('"id": "r0"', f'"id": "bad{i}"') for i, (k, l) in enumerate(BAD.items()) if k != 'duplicate id']
    (tmp_path / 'in.jsonl').write_text('\n'.join(lines) + '\n')
    c = convert_file(tmp_path / 'in.jsonl', tmp_path / 'out', ConvertOptions())
    assert c['rows_out'] == 0 and c['quarantined'] == len(lines) and c['repairs'] == {}
    assert c['needs_opt_in'] == {'map_unknown_roles': 1, 'prepend_user': 1, 'move_system_first': 1}
    q = {r['reason'].split(':')[0]: r for r in map(json.loads, (tmp_path / 'out/quarantine.jsonl').read_text().splitlines())}
    for kind, notes in REPAIRABLE.items():
        name = notes[0].split(':')[0]
        assert q[kind]['would_repair'] == [name] and f'meaning-changing repair {name} would apply' in q[kind]['reason']
    assert sum('would_repair' in r for r in q.values()) == len(REPAIRABLE)

def test_repairs_keep_exactly_the_repairable_rows_and_record_them(tmp_path):
    lines = [l.replace('"id": "r0"', f'"id": "bad{i}"') for i, (k, l) in enumerate(BAD.items()) if k != 'duplicate id']
    (tmp_path / 'in.jsonl').write_text('\n'.join(lines) + '\n')
    c = convert_file(tmp_path / 'in.jsonl', tmp_path / 'out', ConvertOptions(repairs=OPT_IN))   # opted in
    assert c['rows_in'] == len(lines) and c['rows_out'] == len(REPAIRABLE) and c['quarantined'] == len(lines) - len(REPAIRABLE)
    assert c['repairs'] == {'map_unknown_roles': 1, 'prepend_user': 1, 'move_system_first': 1}
    assert c['repair_kinds'] == {'meaning-changing': 3} and c['needs_opt_in'] == {}
    assert not set(REPAIRABLE) & set(c['reasons'])          # quarantined only when no repair helps
    kinds = list(BAD)
    out = [json.loads(l) for l in (tmp_path / 'out/conversations.jsonl').read_text().splitlines()]
    got = {kinds[int(o['id'][3:])]: o['meta']['repairs'] for o in out}
    assert got == REPAIRABLE
    assert all(validate_row(o) == [] for o in out)
    c2 = convert_file(tmp_path / 'in.jsonl', tmp_path / 'out2', ConvertOptions(repairs=['move_system_first']))
    assert c2['rows_out'] == 1 and c2['repairs'] == {'move_system_first': 1}   # only what is configured

def test_eval_prompts_are_removed_from_training(tmp_path):
    from dflash_nb.formats import EvalIndex
    from dflash_nb.core import PKG_DIR
    mt = [json.loads(l) for l in (PKG_DIR / 'data/demo_mtbench.jsonl').read_text().splitlines()]
    he = [json.loads(l) for l in (PKG_DIR / 'data/demo_humaneval.jsonl').read_text().splitlines()]
    own = tmp_path / 'my_eval.jsonl'; own.write_text(json.dumps({'prompt': 'Summarise the plot of Hamlet in three sentences.'}) + '\n')
    rows = [_ok(1),                                                                             # kept
            _ok(2, messages=[{'role': 'user', 'content': mt[0]['turns'][0]}, A]),               # exact
            _ok(3, messages=[{'role': 'user', 'content': '  ' + mt[5]['turns'][1].upper()}]),   # normalized, second turn
            _ok(4, messages=[{'role': 'user', 'content': 'Complete this:\n```python\n' + he[3]['prompt'] + '```'}]),  # contained
            _ok(5, messages=[{'role': 'user', 'content': 'summarise the plot of hamlet, in three sentences'}, A])]       # own file
    (tmp_path / 'in.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
    ix = EvalIndex(['mt_bench', 'humaneval', str(own)])
    c = convert_file(tmp_path / 'in.jsonl', tmp_path / 'out', eval_index=ix)
    assert (c['rows_out'], c['quarantined'], c['eval_overlap']) == (1, 4, 4) and c['reasons'] == {'eval_overlap': 4}
    q = [json.loads(l) for l in (tmp_path / 'out/quarantine.jsonl').read_text().splitlines()]
    assert [x['row']['id'] for x in q] == ['r2', 'r3', 'r4', 'r5']
    assert q[0]['reason'] == f"eval_overlap: user turn 0 is mt_bench/{mt[0]['question_id']}"
    assert he[3]['task_id'] in q[2]['reason'] and 'contains' in q[2]['reason']
    c = convert_file(tmp_path / 'in.jsonl', tmp_path / 'out2', eval_index=EvalIndex(['mt_bench', 'humaneval'], mode='equal'))
    assert c['eval_overlap'] == 2                           # whole turns only: the wrapped HumanEval prompt stays

def test_merge_same_role_only_when_asked(tmp_path):
    row = _ok(1, messages=[{'role': 'user', 'content': 'a'}, {'role': 'user', 'content': 'b'}])
    (tmp_path / 'in.jsonl').write_text(json.dumps(row) + '\n')
    c = convert_file(tmp_path / 'in.jsonl', tmp_path / 'o1')
    assert c['repairs'] == {} and len(json.loads((tmp_path / 'o1/conversations.jsonl').read_text())['messages']) == 2
    c = convert_file(tmp_path / 'in.jsonl', tmp_path / 'o2', ConvertOptions(merge_same_role=True))
    assert c['repairs'] == {'merge_same_role': 1}
    assert json.loads((tmp_path / 'o2/conversations.jsonl').read_text())['messages'] == [{'role': 'user', 'content': 'a\n\nb'}]

# ---------- the real fixtures: zero unexplained losses ----------
FIXTURE_SOURCES = ['fx-alpaca', 'fx-codealpaca', 'fx-oasst', 'fx-sharegpt', 'fx-glaive-toolcall', 'fx-swe-agent-simple',
                   'fx-swe-agent-marshmallow', 'fx-mtbench', 'fx-humaneval']
DEMO_SOURCES = ['demo-alpaca', 'demo-oasst', 'demo-sharegpt', 'demo-glaive-toolcall', 'demo-glaive-v2', 'demo-qwen35-toolcalling',
                'demo-hermes', 'demo-xlam', 'demo-humaneval', 'demo-mtbench', 'demo-swe-agent']

@pytest.mark.parametrize('name', FIXTURE_SOURCES + DEMO_SOURCES)
def test_real_rows_convert_without_losses(name, tmp_path):
    from dflash_nb.sources import REGISTRY, normalize_file, resolve_path, SourceUnavailable, read_source
    src = REGISTRY[name]
    try: path = resolve_path(src.path)
    except SourceUnavailable: pytest.skip('fixtures not present')
    n_records = sum(1 for _ in read_source(src))
    c = normalize_file(name, path, tmp_path / 'norm.jsonl', tmp_path / 'q.jsonl')
    assert c['read'] == n_records
    assert c['quarantined'] == 0, c['reasons']          # every real record normalizes
    assert c['written'] == n_records                     # one conversation per record for these formats
    cc = convert_file(tmp_path / 'norm.jsonl', tmp_path / 'conv', ConvertOptions(max_chars=None))   # real rows, however long
    assert cc['rows_in'] == cc['rows_out'] == n_records and cc['quarantined'] == 0
