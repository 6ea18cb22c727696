"""Repairs mean one thing (one registry, each repair classed format-only or meaning-changing, the explorer showing
exactly what convert applies), and a render that loses what the assistant said is a failure (SmolLM2 drops tool
calls). The messy file `examples/messy_rows.jsonl` carries one row of each case users hit."""
import json, re
from pathlib import Path
import pytest

import dflash_nb.convert as convert_mod
import dflash_nb.explorer as explorer_mod
import dflash_nb.rowviews as rowviews_mod
import dflash_nb.templates as templates_mod
from dflash_nb import schema
from dflash_nb.cli import main
from dflash_nb.convert import ConvertOptions, convert_file
from dflash_nb.core import iter_jsonl, write_jsonl
from dflash_nb.schema import DEFAULT_REPAIRS, FORMAT_ONLY, MEANING_CHANGING, REPAIRS
from dflash_nb.explorer import explore_file
from dflash_nb.masks import assistant_masks, fixture_template, fixture_tokenizer
from dflash_nb.probes import probe_template, show_tail
from dflash_nb.templates import mask_check

MESSY = Path(__file__).resolve().parents[1] / 'examples' / 'messy_rows.jsonl'
TOOL_ROW = {'id': 'tool', 'source': 't', 'messages': [
    {'role': 'user', 'content': 'Is it raining in Oslo?'},
    {'role': 'assistant', 'content': '', 'tool_calls': [{'id': 'c1', 'type': 'function', 'function': {'name': 'get_weather', 'arguments': {'city': 'Oslo'}}}]},
    {'role': 'tool', 'tool_call_id': 'c1', 'content': '{"rain_mm": 3.2}'},
    {'role': 'assistant', 'content': 'Yes: 3.2 mm of rain.'}]}
PLAIN_ROW = {'id': 'plain', 'source': 't', 'messages': [{'role': 'user', 'content': 'Name a prime.'}, {'role': 'assistant', 'content': '7.'}]}

def _smol():
    from dflash_nb.models import load_tokenizer
    return load_tokenizer('smollm2')

def _targets():
    "SmolLM2 (the package's target) and, with the fixtures, Qwen3.6's official template."
    out = [('smollm2', _smol(), None)]
    if fixture_tokenizer('qwen3_6') is not None: out.append(('qwen3_6', fixture_tokenizer('qwen3_6'), fixture_template('qwen3_6')))
    return out

# ------------------------------------------------------------------ one registry, one meaning per repair name
def test_each_repair_is_declared_once_with_its_class():
    assert all(r.kind in (FORMAT_ONLY, MEANING_CHANGING) and r.name == n and r.doc for n, r in REPAIRS.items())
    assert DEFAULT_REPAIRS == tuple(n for n, r in REPAIRS.items() if r.kind == FORMAT_ONLY)
    assert {'args_to_objects', 'rename_roles'} <= set(DEFAULT_REPAIRS)
    assert {'move_system_first', 'prepend_user', 'map_unknown_roles', 'drop_empty_turns'} <= {n for n, r in REPAIRS.items() if r.kind == MEANING_CHANGING}
    # no stage module keeps a copy: the names it uses are the schema's own objects, and no repair is defined there
    for mod in (templates_mod, explorer_mod, rowviews_mod, convert_mod):
        src = Path(mod.__file__).read_text()
        for name in list(REPAIRS) + ['PLACEHOLDER_USER', 'ROLE_ALIASES']:
            assert not re.search(rf'^(def {name}\b|{name}\s*=)', src, re.M), f'{mod.__name__} defines its own {name}'
            assert getattr(mod, name, getattr(schema, name, None)) is getattr(schema, name, None)
    assert schema.fix_row.__defaults__[0] == DEFAULT_REPAIRS            # the entry point's default: format-only

def test_gpt_role_and_string_arguments_are_format_only_and_applied_by_default(tmp_path):
    row = {'id': 'g', 'source': 't', 'messages': [{'role': 'human', 'content': 'Hi'}, {'role': 'gpt', 'content': None, 'tool_calls': [
        {'type': 'function', 'function': {'name': 'f', 'arguments': '{"a": 1}'}}]}, {'role': 'tool', 'content': '1'}, {'role': 'gpt', 'content': 'Done.'}]}
    write_jsonl(tmp_path / 'in.jsonl', [row])
    c = convert_file(tmp_path / 'in.jsonl', tmp_path / 'out')
    assert (c['rows_out'], c['repair_kinds']) == (1, {FORMAT_ONLY: 1})
    out = next(iter_jsonl(tmp_path / 'out' / 'conversations.jsonl'))
    assert [m['role'] for m in out['messages']] == ['user', 'assistant', 'tool', 'assistant']
    assert out['messages'][1]['tool_calls'][0]['function']['arguments'] == {'a': 1} and out['messages'][1]['content'] == ''
    assert [n.split(':')[0] for n in out['meta']['repairs']] == ['none_to_empty', 'rename_roles', 'args_to_objects']

# ------------------------------------------------------------------ meaning-changing: quarantined by default, opt in applies
def test_messy_file_meaning_changing_rows_quarantined_by_default(tmp_path):
    c = convert_file(MESSY, tmp_path / 'out')
    assert (c['rows_in'], c['rows_out'], c['quarantined']) == (6, 3, 3)
    assert c['needs_opt_in'] == {'move_system_first': 1, 'prepend_user': 2} and c['repair_kinds'] == {FORMAT_ONLY: 2}
    q = {r['row']['id']: r for r in iter_jsonl(tmp_path / 'out' / 'quarantine.jsonl')}
    assert q['mid-system']['would_repair'] == ['move_system_first'] and q['mid-system']['reason'].startswith('system not first')
    assert q['greeting-first']['would_repair'] == ['prepend_user'] and q['greeting-first']['reason'].startswith('assistant first')
    assert q['no-prompt']['would_repair'] == ['prepend_user'] and q['no-prompt']['reason'].startswith('no user turn')
    assert q['mid-system']['row'] == json.loads(MESSY.read_text().splitlines()[0])    # quarantined as it came, not half-repaired

def test_opting_in_applies_the_meaning_changing_repair(tmp_path):
    c = convert_file(MESSY, tmp_path / 'out', ConvertOptions(repairs=['move_system_first', 'prepend_user']))
    assert (c['rows_out'], c['quarantined'], c['needs_opt_in']) == (6, 0, {})
    assert c['repair_kinds'] == {FORMAT_ONLY: 2, MEANING_CHANGING: 3}
    out = {r['id']: r for r in iter_jsonl(tmp_path / 'out' / 'conversations.jsonl')}
    assert out['mid-system']['messages'][0] == {'role': 'system', 'content': 'From now on answer only in French.'}
    assert out['greeting-first']['messages'][0] == {'role': 'user', 'content': schema.PLACEHOLDER_USER}
    assert out['no-prompt']['meta']['repairs'] == ["prepend_user: 'Continue.' inserted"]
    c = convert_file(MESSY, tmp_path / 'out2', ConvertOptions(repairs=['move_system_first']))          # only what is listed
    assert (c['rows_out'], c['needs_opt_in']) == (4, {'prepend_user': 2})
    with pytest.raises(ValueError, match="convert.repairs: "): convert_file(MESSY, tmp_path / 'o3', ConvertOptions(repairs=['guess']))

# ------------------------------------------------------------------ the explorer shows exactly what convert applies
def test_explorer_repair_is_byte_for_byte_what_convert_applies(tmp_path):
    lines = MESSY.read_text().splitlines()
    for label, tok, tpl in _targets():
        ex = explore_file(MESSY, tok, tpl, fmt='canonical').exploration()
        shown = {v['id']: v for v in ex['rows'] if v.get('repair')}
        assert {'mid-system', 'greeting-first', 'no-prompt', 'gpt-role'} <= set(shown), (label, sorted(shown))
        for k, v in shown.items():
            src = next(l for l in lines if json.loads(l)['id'] == k)
            (tmp_path / 'one.jsonl').write_text(src + '\n')
            opt_in = [n for n in v['repair'].split('+') if REPAIRS[n].kind == MEANING_CHANGING]
            assert v['repair_kind'] == (MEANING_CHANGING if opt_in else FORMAT_ONLY)
            c = convert_file(tmp_path / 'one.jsonl', tmp_path / f'{label}-{k}', ConvertOptions(repairs=opt_in))
            assert c['rows_out'] == 1, (label, k, c)
            got = next(iter_jsonl(tmp_path / f'{label}-{k}' / 'conversations.jsonl'))
            assert json.dumps(got['messages'], ensure_ascii=False) == json.dumps(v['repaired_messages'], ensure_ascii=False)
            assert [n.split(':')[0] for n in got['meta']['repairs']] == v['repair'].split('+')
            if opt_in: assert v['default'] == 'quarantined; opt in: ' + ', '.join(opt_in)   # and without the opt-in: quarantined
            if opt_in: assert convert_file(tmp_path / 'one.jsonl', tmp_path / f'{label}-{k}-d')['rows_out'] == 0

def test_mid_conversation_system_message_is_not_reported_clean():
    "SmolLM2 renders it and would give an exact mask; the explorer still says the schema rejects it and the fix changes meaning."
    for label, tok, tpl in _targets():
        v = next(v for v in explore_file(MESSY, tok, tpl).exploration()['rows'] if v['id'] == 'mid-system')
        assert v['status'] == 'failed' and v['repair'] == 'move_system_first' and v['repair_kind'] == MEANING_CHANGING, (label, v)
        assert v['reason'] == ('system not first' if label == 'smollm2' else 'template error: System message must be at the beginning.')

# ------------------------------------------------------------------ a render that loses content is a failure
def test_empty_supervised_turn_caught_with_smollm2(tmp_path):
    tok = _smol()
    text = tok.apply_chat_template(TOOL_ROW['messages'], tokenize=False)
    assert '<|im_start|>assistant\n<|im_end|>' in text and 'get_weather' not in text     # the premise: the template drops the call
    out = assistant_masks(tok, [TOOL_ROW, PLAIN_ROW])
    assert out[0]['reason'] == 'the template drops tool calls' and 'message 1' in out[0]['error'] and 'loss_mask' in out[1]
    assert 'tool calls' in probe_template(tok)['summary']['drops']
    s, fails = mask_check(tok, [TOOL_ROW, PLAIN_ROW])
    assert (s['ok'], s['failed'], s['content_lost'], fails[0]['id']) == (1, 1, 1, 'tool')
    from dflash_nb.tokenization import TokenizeJob, TokenizeOptions, tokenize_conversations
    write_jsonl(tmp_path / 'in.jsonl', [TOOL_ROW, PLAIN_ROW])
    job = TokenizeJob(num_proc=1, chunk_rows=2000, shard_mb=500, draft_vocab_size=0)
    rep = tokenize_conversations(tmp_path / 'in.jsonl', tmp_path / 'tok', 'smollm2', TokenizeOptions(min_supervised_tokens=1), job,
                                 tokenizer=tok)
    assert (rep['rows_out'], rep['quarantined'], rep['content_lost']) == (1, 1, 1)
    assert rep['quarantine_reasons'] == {'the template drops tool calls': 1}
    q = list(iter_jsonl(tmp_path / 'tok' / 'quarantine.jsonl'))
    assert q[0]['id'] == 'tool' and q[0]['row'] == TOOL_ROW
    assert json.loads((tmp_path / 'tok' / 'report.json').read_text())['content_lost'] == 1

def test_templates_that_render_the_content_keep_the_row():
    "No false alarm: templates that do render tool calls, reasoning and content give the row its mask."
    tok = fixture_tokenizer('qwen3_6')
    if tok is None: pytest.skip('fixtures not present')
    reasoning = {**PLAIN_ROW, 'messages': [PLAIN_ROW['messages'][0], {**PLAIN_ROW['messages'][1], 'reasoning_content': 'Small primes: 2, 3, 5, 7.'}]}
    for tpl in ('qwen3_6', 'qwen3', 'qwen3_6_training'):
        t = fixture_template(tpl)
        k = fixture_tokenizer('qwen3_6' if tpl.startswith('qwen3_6') else 'qwen3')
        out = assistant_masks(k, [TOOL_ROW, PLAIN_ROW, reasoning], t)
        assert all('loss_mask' in o for o in out), (tpl, out)

# ------------------------------------------------------------------ templates report: readable in the terminal
def test_templates_report_prints_tables_and_whole_prompts(tmp_path, capsys):
    assert main(['templates', 'report', str(MESSY), '--target', 'smollm2', '--format', 'canonical', '--out', str(tmp_path / 'r.html')]) == 0
    out = capsys.readouterr().out
    assert '{' not in out and "'" not in out.split('wrote')[0]                         # no raw dicts
    assert re.search(r'^reason\s+rows\s+repair\s+class\s+by default$', out, re.M)
    assert re.search(r'^mid-system\s+system not first\s+move_system_first\s+quarantined; opt in: move_system_first$', out, re.M)
    assert re.search(r'^gpt-role\s+unknown role\s+rename_roles\s+repaired$', out, re.M)
    assert re.search(r'^tool-call\s+the template drops tool calls\s+quarantined$', out, re.M)
    assert '6 rows: 0 with a mask as they are, 1 repaired by default (format-only), 0 prompt-only, 5 quarantined by default' in out and '2 lose assistant content' in out
    page = (tmp_path / 'r.html').read_text()
    assert 'meaning-changing' in page and 'the template drops tool calls' in page
    tok = fixture_tokenizer('qwen3_6')
    if tok is None: return
    assert main(['templates', 'report', str(MESSY), '--template', str(fixture_template('qwen3_6')), '--tokenizer',
                 str(Path(fixture_template('qwen3_6')).parents[1] / 'tokenizers' / 'qwen3_6'), '--out', str(tmp_path / 'q.html')]) == 0
    out = capsys.readouterr().out
    shown = re.findall(r'the generation prompt is (\S+)', out)
    assert len(shown) == 2 and all(p.startswith('"<|im_start|>') for p in shown), shown                 # never "art|>..."
    assert '"<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n"' in out                           # whole prompts

def test_show_tail_cuts_at_a_token_boundary():
    tok = _smol()
    text = 'You are helpful.<|im_end|>\n<|im_start|>assistant\nSure, here is the answer'
    s = show_tail(text, tok, max_chars=30)
    assert s.startswith('…"') and len(json.loads(s[1:])) <= 30
    ids = tok(text, add_special_tokens=False)['input_ids']
    assert any(tok.decode(ids[k:]) == json.loads(s[1:]) for k in range(len(ids)))        # a whole-token suffix
    assert show_tail('short', tok) == '"short"'
