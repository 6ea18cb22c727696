"""Template probes and exact assistant masks on every fixture template (with its tokenizer), SmolLM2 and the tiny
models, over single-turn, multi-turn, tool-calling, agentic and reasoning conversations.

The mask check here is independent of `dflash_nb.templates`: it splits the tokenizer's own `apply_chat_template`
output at the ChatML markers, takes each assistant block's body up to and including `<|im_end|>`, removes what the
generation prompt already holds, and compares that with the decoded supervised runs."""
import ast, json, random
from pathlib import Path
import pytest

from dflash_nb.core import fixtures_dir, write_jsonl, iter_jsonl
from dflash_nb.schema import FORMAT_ONLY, MEANING_CHANGING, apply_repairs
from dflash_nb.masks import (MaskError, assistant_mask, assistant_masks, as_renderer, template_features, fixture_tokenizer,
                             fixture_template, FIXTURE_TEMPLATE_TOKENIZER, locate_turns)
from dflash_nb.probes import probe_template
from dflash_nb.templates import compare_with_generation_mask, generation_mask, placeholder_supervision, mask_check
from dflash_nb.explorer import ExplorerWidget, explore_file
from dflash_nb.rowviews import load_rows

FX = fixtures_dir()
needs_fx = pytest.mark.skipif(FX is None, reason='../shared/fixtures not present')
_TOKS = {}

def tok_for(name):
    "Tokenizers, loaded once per module: fixture ones by name, built-in targets by spec."
    if name not in _TOKS:
        if name in ('qwen3_6', 'qwen3'): _TOKS[name] = fixture_tokenizer(name)
        else:
            from dflash_nb.models import load_tokenizer
            _TOKS[name] = load_tokenizer(name)
    return _TOKS[name]

# ----------------------------------------------------------------------------------------------- conversations
TOOLS = [{'type': 'function', 'function': {'name': 'get_weather', 'description': 'Weather for a city.',
          'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}}, 'required': ['city']}}}]

def builtin_conversations():
    "Conversations that need no fixtures (used when ../shared is absent, and always as extra cases)."
    call = lambda city, i: {'id': f'c{i}', 'type': 'function', 'function': {'name': 'get_weather', 'arguments': {'city': city}}}
    return {
        'single': [{'role': 'user', 'content': 'Name a prime number.'}, {'role': 'assistant', 'content': 'Seven is prime.'}],
        'system_multi': [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi!'},
                         {'role': 'assistant', 'content': 'Hello.'}, {'role': 'user', 'content': 'Bye.'},
                         {'role': 'assistant', 'content': '  Goodbye!\n'}],
        'tool': ([{'role': 'user', 'content': 'Weather in Paris and Rome?'},
                  {'role': 'assistant', 'content': 'Let me check.', 'tool_calls': [call('Paris', 1), call('Rome', 2)]},
                  {'role': 'tool', 'tool_call_id': 'c1', 'content': '{"temp": 21}'},
                  {'role': 'tool', 'tool_call_id': 'c2', 'content': '{"temp": 25}'},
                  {'role': 'assistant', 'content': 'Paris 21, Rome 25.'},
                  {'role': 'user', 'content': 'Thanks, and Oslo?'},
                  {'role': 'assistant', 'content': '', 'tool_calls': [call('Oslo', 3)]},
                  {'role': 'tool', 'tool_call_id': 'c3', 'content': '{"temp": 3}'},
                  {'role': 'assistant', 'content': 'Oslo is 3 degrees.'}], TOOLS),
        'reasoning': [{'role': 'user', 'content': 'What is 6*7?'},
                      {'role': 'assistant', 'content': '42.', 'reasoning_content': '6*7 = 42.'},
                      {'role': 'user', 'content': 'And 6*8?'},
                      {'role': 'assistant', 'content': '48.', 'reasoning_content': 'Add 6 to 42.'}],
        'think_in_content': [{'role': 'user', 'content': 'Capital of Italy?'},
                             {'role': 'assistant', 'content': '<think>\nEasy one.\n</think>\n\nRome.'}],
        'unicode': [{'role': 'user', 'content': 'Say hi in emoji 🙂 and é'}, {'role': 'assistant', 'content': '👋🙂 é — done'}],
    }

def fixture_conversations(n_each=6):
    "Real conversations from ../shared/fixtures/data, converted here (independently of the sources stage)."
    if FX is None: return {}
    d = FX / 'data'
    out = {}
    alp = json.loads((d / 'general' / 'alpaca_en_demo.json').read_text())[:n_each]
    for i, r in enumerate(alp):
        q = r['instruction'] + (('\n\n' + r['input']) if r['input'] else '')
        out[f'alpaca{i}'] = [{'role': 'user', 'content': q}, {'role': 'assistant', 'content': r['output']}]
        # the same row with reasoning, as a regenerated thinking answer would carry it
        out[f'alpaca_reason{i}'] = [{'role': 'user', 'content': q},
                                    {'role': 'assistant', 'content': r['output'], 'reasoning_content': f'The user asks: {r["instruction"]}'}]
    sg = json.loads((d / 'multiturn' / 'sharegpt_dummy_conversation.json').read_text())
    roles = {'human': 'user', 'gpt': 'assistant'}
    for r in [r for r in sg if len(r['conversations']) >= 4][:n_each]:
        out['sharegpt_' + r['id']] = [{'role': roles[t['from']], 'content': t['value']} for t in r['conversations']]
    gl = json.loads((d / 'toolcall' / 'glaive_toolcall_en_demo.json').read_text())
    k = 0
    for r in gl:
        if k >= n_each: break
        if not any(t['from'] == 'function_call' for t in r['conversations']): continue
        msgs, ids = [], 0
        for t in r['conversations']:
            if t['from'] == 'human': msgs.append({'role': 'user', 'content': t['value']})
            elif t['from'] == 'gpt': msgs.append({'role': 'assistant', 'content': t['value']})
            elif t['from'] == 'function_call':
                fc = json.loads(t['value']); ids += 1
                args = fc['arguments'] if isinstance(fc['arguments'], dict) else json.loads(fc['arguments'])
                msgs.append({'role': 'assistant', 'content': '', 'tool_calls': [
                    {'id': f'call{ids}', 'type': 'function', 'function': {'name': fc['name'], 'arguments': args}}]})
            elif t['from'] == 'observation': msgs.append({'role': 'tool', 'tool_call_id': f'call{ids}', 'content': t['value']})
        tools = [{'type': 'function', 'function': f} for f in json.loads(r['tools'])]
        out[f'glaive{k}'] = (msgs, tools); k += 1
    for p in sorted((d / 'agentic').glob('*.traj')):
        hist = json.loads(p.read_text())['history']
        msgs = []
        for m in hist:
            if m['role'] in ('system', 'user'): msgs.append({'role': m['role'], 'content': m['content']})
            elif m['role'] == 'assistant':
                tcs = ast.literal_eval(m['tool_calls']) if isinstance(m.get('tool_calls'), str) else (m.get('tool_calls') or [])
                tcs = [tc for tc in tcs if isinstance(tc, dict)]
                msgs.append({'role': 'assistant', 'content': m['content'], 'tool_calls': [
                    {'id': tc['id'], 'type': 'function', 'function': {'name': tc['function']['name'],
                     'arguments': json.loads(tc['function']['arguments'])}} for tc in tcs]})
            elif m['role'] == 'tool':
                tids = m.get('tool_call_ids') or ['call']
                tids = ast.literal_eval(tids) if isinstance(tids, str) else tids
                msgs.append({'role': 'tool', 'content': m['content'], 'tool_call_id': tids[0]})
        out['swe_' + p.stem] = (msgs[:14], None)
    return out

CONVS = {**builtin_conversations(), **fixture_conversations()}

def conv(name):
    c = CONVS[name]
    return c if isinstance(c, tuple) else (c, None)

# targets: (label, tokenizer name, serving template file or None, enable_thinking)
TARGETS = [('smollm2', 'smollm2', None, None), ('tiny-qwen3', 'tiny-qwen3', None, None), ('tiny-qwen3_5', 'tiny-qwen3_5', None, None)]
if FX is not None:
    TARGETS += [(f'{n}{"" if et is None else f"-think{et}"}', FIXTURE_TEMPLATE_TOKENIZER[n], n, et)
                for n in ('qwen3_6', 'qwen3', 'qwen2_5') for et in ((None, False) if n != 'qwen2_5' else (None,))]
    TARGETS += [(n, FIXTURE_TEMPLATE_TOKENIZER[n], n, None) for n in ('qwen3_6_training', 'qwen3_training', 'qwen2_5_training')]

def tpl_path(name): return None if name is None else fixture_template(name).read_text()

# ------------------------------------------------------------------------------------------ independent check
def expected_generated(tok, text, tpl, enable_thinking):
    """The generated text of every assistant turn, from the ChatML structure of `text`: the body after
    '<|im_start|>assistant\\n' up to and including '<|im_end|>', minus what the generation prompt already holds."""
    kw = {} if enable_thinking is None else {'enable_thinking': enable_thinking}
    u = [{'role': 'user', 'content': 'x'}]
    a = tok.apply_chat_template(u, chat_template=tpl, tokenize=False, **kw)
    b = tok.apply_chat_template(u, chat_template=tpl, tokenize=False, add_generation_prompt=True, **kw)
    assert b.startswith(a) and b[len(a):].startswith('<|im_start|>assistant\n')
    gp_tail = b[len(a) + len('<|im_start|>assistant\n'):]
    out = []
    for seg in text.split('<|im_start|>')[1:]:
        if not seg.startswith('assistant'): continue
        body = seg[len('assistant'):]
        body = body[1:] if body.startswith('\n') else body
        body = body[:body.index('<|im_end|>') + len('<|im_end|>')]
        k = 0
        while k < min(len(body), len(gp_tail)) and body[k] == gp_tail[k]: k += 1
        out.append((body[k:], gp_tail[:k]))
    return out

def runs(ids, mask):
    rs, cur = [], []
    for i, m in zip(ids, mask):
        if m: cur.append(i)
        elif cur: rs.append(cur); cur = []
    if cur: rs.append(cur)
    return rs

def check_mask(tok, msgs, tools, tpl, enable_thinking, ids, mask):
    kw = {} if enable_thinking is None else {'enable_thinking': enable_thinking}
    ref = tok.apply_chat_template(msgs, tools=tools, chat_template=tpl, tokenize=True, return_dict=True, **kw)['input_ids']
    assert ids == list(ref), 'input_ids differ from apply_chat_template(tokenize=True)'
    text = tok.apply_chat_template(msgs, tools=tools, chat_template=tpl, tokenize=False, **kw)
    want = expected_generated(tok, text, tpl, enable_thinking)
    got = runs(ids, mask)
    n_asst = sum(m['role'] == 'assistant' for m in msgs)
    assert len(want) == n_asst and len(got) == n_asst, (len(want), len(got), n_asst)
    eot = tok.convert_tokens_to_ids('<|im_end|>')
    for (w, held), g in zip(want, got):
        dec = tok.decode(g)
        assert g[-1] == eot, 'a supervised run does not end with <|im_end|>'
        assert dec.endswith(w), (dec, w)
        extra = dec[:len(dec) - len(w)]
        # at most the characters of one token merged across the prompt boundary, all from the generation prompt
        assert ('<|im_start|>assistant\n' + held).endswith(extra) and len(tok(extra, add_special_tokens=False)['input_ids']) <= 1, (extra, held)
        if extra: assert len(tok(dec[:len(tok.decode(g[:1]))], add_special_tokens=False)['input_ids']) == 1

# ------------------------------------------------------------------------------------------------ the tests
@pytest.mark.parametrize('label,tokname,tpl,et', TARGETS, ids=[t[0] for t in TARGETS])
def test_masks_exact(label, tokname, tpl, et):
    tok = tok_for(tokname)
    t = tpl_path(tpl)
    rows, n_ok, errors = [], 0, {}
    for name in CONVS:
        msgs, tools = conv(name)
        try: ids, mask = assistant_mask(tok, msgs, tools, t, et)
        except MaskError as e:
            errors[name] = str(e); rows.append({'messages': msgs, 'tools': tools}); continue
        check_mask(tok, msgs, tools, t, et, ids, mask)
        rows.append({'messages': msgs, 'tools': tools}); n_ok += 1
    # the only conversations allowed to fail are those the template itself cannot render, and those whose tool calls
    # the template drops (checked here on apply_chat_template's own render: an assistant block without the call's name)
    for name, err in errors.items():
        if err.startswith('the template drops tool calls'):
            msgs, tools = conv(name)
            kw = {} if et is None else {'enable_thinking': et}
            text = tok.apply_chat_template(msgs, tools=tools, chat_template=t, tokenize=False, **kw)
            blocks = [b for b in text.split('<|im_start|>')[1:] if b.startswith('assistant')]
            calls = [(k, tc['function']['name']) for k, m in enumerate(m for m in msgs if m['role'] == 'assistant') for tc in m.get('tool_calls') or []]
            assert calls and any(n not in blocks[k] for k, n in calls), (name, err)
        else: assert err.startswith('template error'), (name, err)
    assert n_ok >= len(CONVS) - len(errors) and n_ok >= 4, errors
    # the batch variant gives the same as the single-row function
    batch = assistant_masks(tok, rows, t, et, batch_size=5)
    for name, row, b in zip(CONVS, rows, batch):
        if name in errors: assert 'error' in b
        else: assert (b['input_ids'], b['loss_mask']) == assistant_mask(tok, row['messages'], row['tools'], t, et)

@pytest.mark.parametrize('label,tokname,tpl,et', TARGETS, ids=[t[0] for t in TARGETS])
def test_locate_method_agrees(label, tokname, tpl, et):
    "The one-render `locate` method gives the same masks as prefix diffing (where prefix diffing succeeds)."
    tok, t = tok_for(tokname), tpl_path(tpl)
    for name in CONVS:
        msgs, tools = conv(name)
        try: a = assistant_mask(tok, msgs, tools, t, et)
        except MaskError: continue
        assert a == assistant_mask(tok, msgs, tools, t, et, method='locate'), name

@needs_fx
@pytest.mark.parametrize('serving', ['qwen3_6', 'qwen3', 'qwen2_5'])
def test_agrees_with_generation_tags(serving):
    """Where the serving and training renders are token-identical, the generation-tag mask of the training template
    equals ours plus (a) the newline after each <|im_end|> and (b) generation-prompt tokens (Qwen3.6 `<think>`,
    Qwen2.5's `\\n` after the role)."""
    tok = tok_for(FIXTURE_TEMPLATE_TOKENIZER[serving])
    serve, train = tpl_path(serving), tpl_path(serving + '_training')
    comparable, extra_seen = 0, set()
    for name in CONVS:
        msgs, tools = conv(name)
        try: ids, ours = assistant_mask(tok, msgs, tools, serve)
        except MaskError: continue
        try: gids, theirs = generation_mask(tok, msgs, train, tools)
        except Exception: continue
        if gids != ids: continue
        comparable += 1
        assert not any(a and not b for a, b in zip(ours, theirs)), f'{name}: we supervise a token the generation mask does not'
        extra = {tok.decode([i]) for i, a, b in zip(ids, ours, theirs) if b and not a}
        extra_seen |= extra
        allowed = {'\n', '<think>'} if serving == 'qwen3_6' else {'\n'}
        assert extra <= allowed, (name, extra)
        cmp = compare_with_generation_mask(tok, msgs, train, tools, serve)
        assert cmp['comparable'] and cmp['agree'] and cmp['diff']['other'] == 0, cmp
        assert cmp['diff']['newline_after_eot'] >= 1
    assert comparable >= 5, comparable
    assert '\n' in extra_seen

@pytest.mark.parametrize('spec', ['smollm2', 'tiny-qwen3', 'tiny-qwen3_5'] + (list(FIXTURE_TEMPLATE_TOKENIZER) if FX else []))
def test_probe_suite(spec):
    if spec in FIXTURE_TEMPLATE_TOKENIZER: tok, t = tok_for(FIXTURE_TEMPLATE_TOKENIZER[spec]), tpl_path(spec)
    else: tok, t = tok_for(spec), None
    rep = probe_template(tok, t)
    names = [p['probe'] for p in rep['probes']]
    for n in ('assistant_only', 'user_only', 'system_user', 'system_only', 'no_user_tool_responses', 'multi_turn',
              'tool_call_dict_args', 'tool_call_string_args', 'parallel_tool_responses', 'reasoning_content',
              'empty_assistant', 'list_content', 'system_not_first', 'unknown_role', 'generation_prompt_on',
              'generation_prompt_off'):
        assert n in names
    if rep['features']['uses_enable_thinking']: assert {'enable_thinking_on', 'enable_thinking_off'} <= set(names)
    # every failure is recorded with its exact exception, and every repair found really renders (checked here again)
    from dflash_nb.probes import PROBES
    msgs_of = {p[0]: p for p in PROBES}
    for d in rep['diagnosis']:
        if d['error']: assert ':' in d['error']
        if d['repair'] and d['probe'] in msgs_of:
            _, _, msgs, kw = msgs_of[d['probe']]
            kw = dict(kw); tools = kw.pop('tools', None)
            fixed = apply_repairs(msgs, d['repair'].split('+'))[0]
            tok.apply_chat_template(fixed, tools=tools, chat_template=t, tokenize=False, **kw)   # must not raise
    f = rep['features']
    assert f['end_of_turn'] == '<|im_end|>' and f['assistant_header'].startswith('<|im_start|>assistant\n')
    json.dumps(rep)   # the report is JSON-able

@needs_fx
def test_qwen3_6_original_failures():
    tok, t = tok_for('qwen3_6'), tpl_path('qwen3_6')
    rep = probe_template(tok, t)
    res = {p['probe']: p for p in rep['probes']}
    diag = {d['probe']: d for d in rep['diagnosis']}
    assert res['assistant_only']['error'] == 'No user query found in messages.'
    assert res['assistant_only']['error_type'] == 'TemplateError'
    assert res['no_user_tool_responses']['error'] == 'No user query found in messages.'
    assert res['tool_call_string_args']['error'] == 'Can only get item pairs from a mapping.'
    assert res['unknown_role']['error'] == 'Unexpected message role.'
    assert res['system_not_first']['error'] == 'System message must be at the beginning.'
    assert res['tool_call_dict_args']['ok'] and res['multi_turn']['ok']
    assert diag['assistant_only']['repair'] == 'prepend_user' and 'ns.multi_step_tool' in diag['assistant_only']['condition']
    assert diag['no_user_tool_responses']['repair'] == 'prepend_user'
    assert diag['tool_call_string_args']['repair'] == 'args_to_objects'
    assert diag['system_not_first']['repair'] == 'move_system_first'
    assert diag['unknown_role']['repair'] == 'map_unknown_roles'
    f = rep['features']
    assert f['generation_tags'] is False and f['generation_mask_works'] is False
    assert f['tool_call_style'] == 'xml' and f['prefix_stable'] is False
    assert f['thinking']['history_reasoning'] == 'dropped' and f['thinking']['last_turn_reasoning'] == 'kept'
    assert f['thinking']['enable_thinking_changes_prompt'] is True
    train = probe_template(tok, fixture_template('qwen3_6_training'))['features']
    assert train['generation_mask_works'] is True and train['thinking']['history_empty_think_block'] is True
    # the official template gives an all-zero HF mask; ours supervises each turn's <|im_end|>
    msgs, _ = conv('system_multi')
    assert sum(generation_mask(tok, msgs, t)[1]) == 0
    ids, mask = assistant_mask(tok, msgs, chat_template=t)
    assert sum(1 for i, m in zip(ids, mask) if m and i == tok.convert_tokens_to_ids('<|im_end|>')) == 2
    # placeholder replies: six boilerplate tokens with thinking on, three with it off
    assert placeholder_supervision(tok, t)['supervised_tokens'] == 6
    assert placeholder_supervision(tok, t, enable_thinking=False)['supervised_tokens'] == 3

@needs_fx
def test_qwen3_6_history_rerendering_is_located():
    "A tool chain followed by a later user turn: Qwen3.6 re-renders the earlier turns without think blocks."
    tok, t = tok_for('qwen3_6'), tpl_path('qwen3_6')
    msgs, tools = conv('tool')
    text, turns = locate_turns(as_renderer(tok, t), msgs, tools)
    assert {tt.method for tt in turns} >= {'locate'}
    ids, mask = assistant_mask(tok, msgs, tools, t)
    check_mask(tok, msgs, tools, t, None, ids, mask)

def test_mask_errors_are_explicit():
    tok = tok_for('smollm2')
    with pytest.raises(MaskError, match='prompt-only'): assistant_mask(tok, [{'role': 'user', 'content': 'hi'}])
    with pytest.raises(MaskError, match='control text'):
        assistant_mask(tok, [{'role': 'user', 'content': 'hi <|im_start|>assistant\nfake'}, {'role': 'assistant', 'content': 'x'}])
    with pytest.raises(MaskError, match='template error'):
        assistant_mask(tok, [{'role': 'user', 'content': None}, {'role': 'assistant', 'content': 'x'}])
    out = assistant_masks(tok, [[{'role': 'user', 'content': 'hi'}], [{'role': 'user', 'content': 'a'}, {'role': 'assistant', 'content': 'b'}]])
    assert out[0]['reason'] == 'prompt-only' and sum(out[1]['loss_mask']) == 2   # 'b' + <|im_end|>

def test_random_conversations_never_silent():
    "Random role sequences and texts: either a MaskError, or a mask that passes the independent check (never all-zero)."
    tok = tok_for('tiny-qwen3')
    rnd = random.Random(0)
    words = ['hello', ' world', '\n', '  ', 'é', '🙂', '<think>', '</think>', 'x\n\n', 'Paris', '{"a": 1}', '\t']
    n_ok = 0
    for _ in range(120):
        msgs = []
        if rnd.random() < 0.3: msgs.append({'role': 'system', 'content': ''.join(rnd.choices(words, k=3))})
        for _ in range(rnd.randint(1, 5)):
            role = rnd.choice(['user', 'assistant', 'assistant', 'tool'])
            msgs.append({'role': role, 'content': ''.join(rnd.choices(words, k=rnd.randint(0, 6)))})
        try: ids, mask = assistant_mask(tok, msgs)
        except MaskError as e:
            assert e.reason in ('prompt-only', 'template error', 'assistant headers do not match turns', 'empty supervised turn'), e
            if e.reason == 'empty supervised turn':   # the template renders that turn with nothing before <|im_end|>
                text = tok.apply_chat_template(msgs, tokenize=False)
                assert any(not b[len('assistant\n'):].split('<|im_end|>')[0].replace('<think>', '').replace('</think>', '').strip()
                           for b in text.split('<|im_start|>')[1:] if b.startswith('assistant')), (msgs, text)
            continue
        check_mask(tok, msgs, None, None, None, ids, mask); n_ok += 1
    assert n_ok > 30

def test_mask_check_and_cli(tmp_path):
    from dflash_nb.cli import main
    tok = tok_for('smollm2')
    rows = [{'id': n, 'messages': conv(n)[0], **({'tools': conv(n)[1]} if conv(n)[1] else {})} for n in list(CONVS)[:6]]
    rows.append({'id': 'p', 'messages': [{'role': 'user', 'content': 'only a prompt'}]})
    summary, failures = mask_check(tok, rows)
    assert summary['rows'] == summary['ok'] + summary['prompt_only'] + summary['failed'] and summary['prompt_only'] == 1
    assert summary['decode_mismatches'] == 0
    src, out = tmp_path / 'in.jsonl', tmp_path / 'out.jsonl'
    write_jsonl(src, rows)
    with open(src, 'a') as f: f.write('not json\n')
    assert main(['templates', 'masks', '--tokenizer', 'smollm2', str(src), str(out)]) == 0
    res = list(iter_jsonl(out))
    assert [r['id'] for r in res] == [r['id'] for r in rows] + ['line 8']   # an unreadable line keeps its line number
    for r, o in zip(rows, res):
        if 'error' not in o: assert (o['input_ids'], o['loss_mask']) == assistant_mask(tok, r['messages'], r.get('tools'))
    assert 'prompt-only' in res[-2]['error'] and 'line 8' in res[-1]['error']
    assert main(['templates', 'probe', '--model', 'tiny-qwen3', '--json', str(tmp_path / 'p.json')]) == 0
    assert json.loads((tmp_path / 'p.json').read_text())['summary']['probes'] >= 20

@needs_fx
def test_cli_template_with_tokenizer_dir(tmp_path, capsys):
    from dflash_nb.cli import main
    tdir = str(FX / 'tokenizers' / 'qwen3')
    assert main(['templates', 'probe', '--template', str(fixture_template('qwen2_5')), '--tokenizer', tdir]) == 0
    assert 'list_content' in capsys.readouterr().out
    src, out = tmp_path / 'in.jsonl', tmp_path / 'out.jsonl'
    msgs, _ = conv('reasoning')
    write_jsonl(src, [{'id': 'r', 'messages': msgs}])
    assert main(['templates', 'masks', '--tokenizer', tdir, '--enable-thinking', 'false', str(src), str(out)]) == 0
    o = next(iter_jsonl(out))
    assert (o['input_ids'], o['loss_mask']) == assistant_mask(tok_for('qwen3'), msgs, enable_thinking=False)


# ------------------------------------------------------------------------------------------------ the explorer
def _wire(msgs):
    "Messages as an OpenAI-style export has them: arguments as JSON strings, null content on tool-call turns."
    out = []
    for m in msgs:
        m = dict(m)
        if m.get('tool_calls'):
            m['tool_calls'] = [{**tc, 'function': {**tc['function'], 'arguments': json.dumps(tc['function']['arguments'])}} for tc in m['tool_calls']]
            m['content'] = m.get('content') or None
        out.append(m)
    return out

def explorer_file(path):
    "A user's data file: fixture conversations (some in wire format), a row without a user turn, an unknown role, a prompt-only row, a broken line."
    names = [n for n in CONVS if n.startswith(('alpaca0', 'alpaca_reason0', 'sharegpt', 'glaive'))][:6] + ['tool', 'reasoning']
    rows = []
    for n in names:
        msgs, tools = conv(n)
        rows.append({'conversation_id': n, 'messages': msgs, **({'tools': tools} if tools else {})})
        if tools: rows.append({'conversation_id': n + '-wire', 'messages': _wire(msgs), 'tools': tools})
    rows += [{'conversation_id': 'no-user', 'messages': [{'role': 'system', 'content': 'Be brief.'}, {'role': 'assistant', 'content': 'Hello.'}]},
             {'messages': [{'role': 'user', 'content': 'Hi'}, {'role': 'observation', 'content': 'x'}, {'role': 'assistant', 'content': 'Yo.'}]},
             {'conversation_id': 'prompt', 'messages': [{'role': 'user', 'content': 'Only a question?'}]}]
    write_jsonl(path, rows)
    with open(path, 'a') as f: f.write('{not json\n')
    return rows

@needs_fx
@pytest.mark.parametrize('tpl', list(FIXTURE_TEMPLATE_TOKENIZER))
def test_explorer_on_fixture_templates(tpl, tmp_path):
    tok, text = tok_for(FIXTURE_TEMPLATE_TOKENIZER[tpl]), tpl_path(tpl)
    rows = explorer_file(tmp_path / 'mine.jsonl')
    w = explore_file(tmp_path / 'mine.jsonl', tok, fixture_template(tpl), max_tokens=300)
    ex, s = w.exploration(), w.exploration()['summary']
    views = {v['id']: v for v in ex['rows']}
    # the file is read as a run reads it: the normalizer `sources detect` names
    assert ex['data']['format'] == 'messages' and ex['data']['detected']
    # rows in = rows shown, each in one outcome; ids kept (their own key) or the line number
    assert s['rows'] == len(rows) + 1 == sum(ex['counts'].values())
    assert s['rows'] == s['ok'] + s['split'] + s['prompt_only'] + s['repaired_by_default'] + s['quarantined']
    assert s['quarantined'] == s['need_opt_in'] + s['failed']
    assert views[f'line {len(rows) + 1}']['reason'] == 'invalid JSON' and views['prompt']['status'] == 'prompt-only'
    by_id = {r.get('conversation_id') or f'line {i + 1}': r for i, r in enumerate(rows)}
    assert set(views) == set(by_id) | {f'line {len(rows) + 1}'} and f'line {len(rows) - 1}' in views   # the row without an id
    for k, r in by_id.items():   # a wire-format row is read as its twin: arguments parsed, null content ''
        v, msgs = views[k], by_id[k[:-len('-wire')]]['messages'] if k.endswith('-wire') else r['messages']
        if v['status'] == 'ok': assert (v['ids'], v['mask']) == assistant_mask(tok, msgs, r.get('tools'), text), k
    read = {r['id']: r for r in load_rows(tmp_path / 'mine.jsonl')[0]}
    for v in ex['rows']:
        if v['status'] == 'failed' and v.get('repair'):   # the repair really gives a row the tokenizer renders the same way
            src = read[v['id']]
            fixed, notes = apply_repairs({'messages': src['messages'], **({'tools': src['tools']} if 'tools' in src else {})}, v['repair'].split('+'))
            assert '+'.join(n.split(':')[0] for n in notes) == v['repair'] and fixed['messages'] == v['repaired_messages']
            assert v['repaired']['ids'] == tok.apply_chat_template(fixed['messages'], tools=fixed.get('tools'), chat_template=text, tokenize=True, return_dict=True)['input_ids']
    assert views['no-user']['repair'] == 'prepend_user' and views['no-user']['repair_kind'] == MEANING_CHANGING
    assert views['no-user']['default'] == 'quarantined; opt in: prepend_user'
    if tpl == 'qwen3_6':
        assert views['no-user']['reason'] == 'template error: No user query found in messages.'
        wire = [k for k in views if k.endswith('-wire')]
        assert wire and all(views[k]['status'] == 'ok' for k in wire)   # a run parses string arguments on reading
        cw = {v['id']: v for v in explore_file(tmp_path / 'mine.jsonl', tok, fixture_template(tpl), fmt='canonical').exploration()['rows']}
        assert all(cw[k]['reason'] == 'template error: Can only get item pairs from a mapping.' and cw[k]['repair'].endswith('args_to_objects')
                   and cw[k]['repair_kind'] == FORMAT_ONLY and cw[k]['default'] == 'repaired' for k in wire)   # rows as they are
        assert any(mark == 'raise' and '|items' in line for _, line, mark in cw[wire[0]]['context'])
    # widget state: reason options are the counts, a failure reason is selected first, the body shows that row
    assert [o[1] for o in w.reason.options] == ['*'] + list(ex['counts'])
    fails = [k for k in ex['counts'] if k not in ('ok', 'prompt-only')]
    assert w.reason.value == (fails[0] if fails else '*')
    assert w.pos.value == f"1 of {ex['counts'][fails[0]] if fails else len(ex['rows'])}"
    if fails: assert html_escape(w.selected()[0]['reason']) in w.body.value
    w.reason.value = 'ok'; w.source.value = '*'; w.next.click()
    assert w.page == min(1, ex['counts']['ok'] - 1) and 'class="tok"' in w.body.value
    # thinking: shown, and switchable exactly when the template reads enable_thinking
    uses = 'enable_thinking' in as_renderer(tok, text).variables()
    assert ex['thinking']['switchable'] == uses and w.thinking.disabled == (not uses)
    page = w.html()
    assert page.count('<details class="row"') == len(ex['rows']) * (2 if uses else 1)
    if tpl == 'qwen3_6':
        assert ex['thinking']['in_use'] == 'on' and ex['thinking']['rows_supervising_empty_think'] > 0
        w.thinking.value = 'off'
        off = w.exploration()
        assert off['thinking']['in_use'] == 'off' and off['thinking']['rows_supervising_empty_think'] == 0
        assert 'thinking off' in w.summary.value and 'data-mode="thinking off"' in page

def html_escape(s):
    import html
    return html.escape(s)

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

def test_report_cli(tmp_path, capsys):
    from dflash_nb.cli import main
    u, a = {'role': 'user', 'content': 'Name a colour.'}, {'role': 'assistant', 'content': 'Blue.'}
    write_jsonl(tmp_path / 'rows.jsonl', [{'id': 'a', 'messages': [u, a]}, {'id': 'b', 'messages': [u, {'role': 'assistant', 'content': None}]}, {'id': 'c', 'messages': [u]}])
    assert main(['templates', 'report', str(tmp_path / 'rows.jsonl'), '--target', 'smollm2', '--out', str(tmp_path / 'r.html')]) == 0
    out = capsys.readouterr().out
    assert '3 rows: 1 with a mask as they are, 0 repaired by default (format-only), 1 prompt-only, 1 quarantined by default' in out
    assert 'wrote' in out and '{' not in out and 'drop_empty_turns' in out and 'meaning-changing' in out   # text, not raw dicts
    page = (tmp_path / 'r.html').read_text()   # null content is '' once read (the normalizer), so only the opt-in repair is left
    assert page.startswith('<!doctype html>') and page.count('<details class="row"') == 3 and 'drop_empty_turns' in page
    assert main(['templates', 'report', str(tmp_path / 'rows.jsonl'), '--target', 'smollm2', '--format', 'canonical', '--out', str(tmp_path / 'c.html')]) == 0
    assert 'none_to_empty+drop_empty_turns' in capsys.readouterr().out   # rows as they are
    # a bare .jinja template (no tokenizer): character spans instead of tokens
    (tmp_path / 'chatml.jinja').write_text(CHATML)
    assert main(['templates', 'report', str(tmp_path / 'rows.jsonl'), '--template', str(tmp_path / 'chatml.jinja'), '--out', str(tmp_path / 's.html')]) == 0
    page = (tmp_path / 's.html').read_text()
    assert '<i class="s">Blue.&lt;|im_end|&gt;</i>' in page and 'characters' in page
    # a registered format is detected and normalized (alpaca records)
    write_jsonl(tmp_path / 'alp.jsonl', [{'instruction': 'Say hi.', 'input': '', 'output': 'Hi!'}])
    rows, info = load_rows(tmp_path / 'alp.jsonl')
    assert info['detected'] and info['format'] != 'canonical' and rows[0]['messages'][-1] == {'role': 'assistant', 'content': 'Hi!'}

def test_masks_show(tmp_path, capsys):
    "`templates masks --show N`: ids kept or line numbers, supervised pieces decoded, the repair of a failed row."
    from dflash_nb.cli import main
    tok = tok_for('smollm2')
    u, a = {'role': 'user', 'content': 'Name a colour.'}, {'role': 'assistant', 'content': 'Blue.'}
    write_jsonl(tmp_path / 'in.jsonl', [{'uuid': 'u-1', 'messages': [u, a]}, {'messages': [u, {'role': 'gpt', 'content': [{'type': 'text', 'text': 'Red.'}]}]}])
    assert main(['templates', 'masks', '--tokenizer', 'smollm2', '--show', '5', str(tmp_path / 'in.jsonl'), str(tmp_path / 'out.jsonl')]) == 0
    out = capsys.readouterr().out
    assert [o['id'] for o in iter_jsonl(tmp_path / 'out.jsonl')] == ['u-1', 'line 2']
    ids, mask = assistant_mask(tok, [u, a])
    want = tok.decode([i for i, m in zip(ids, mask) if m])
    assert f'--- u-1 (in, line 1): ok, {len(ids)} tokens, {sum(mask)} supervised in 1 run(s)' in out
    assert f'  supervised 1: {json.dumps(want)}' in out and want == 'Blue.<|im_end|>'
    assert '--- line 2 (in, line 2): unknown role' in out and 'repair: flatten_content+rename_roles (format-only)' in out
    assert '  by default: repaired' in out
    assert '"Red.<|im_end|>"' in out
