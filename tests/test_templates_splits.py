"""The probe, the explorer and `dflash-nb templates report` say which rows `tokenization.rows: auto` splits, and why
(issue 29, item 2).

A template that drops the reasoning of assistant turns before the last user query (Qwen3's) makes tokenization split
such a row into one sample per assistant turn. The template tools must say so with the same decision
(`masks.split_reason`): the rows they call split are exactly the rows `tokenization.encode_rows` splits, a row with no
earlier reasoning is never called split, the headline counts them apart (the same text in the terminal and in the
HTML), the stage's mask check counts them, and the probe says whether the template drops earlier reasoning.

Run with Qwen3's template and tokenizer from ../shared/fixtures (skipped without them) and with a small toy template
that drops earlier reasoning as Qwen3's does (SmolLM2's tokenizer; no ../shared needed), over the agentic fixtures and
a multi-turn reasoning + tool-call file. Also: `templates report` without `--format` reads a file with the format
`dflash-nb sources detect` names, not as canonical.
"""
import contextlib, html, io
from pathlib import Path
import pytest

from dflash_nb.formats import detect_format
from dflash_nb.masks import fixture_template, fixture_tokenizer
from dflash_nb.schema import fix_row
from dflash_nb.explorer import ExplorerWidget, format_report, template_report
from dflash_nb.rowviews import explore, headline, load_rows
from dflash_nb.probes import format_probe_report, probe_template
from dflash_nb.templates import format_mask_check, mask_check
from dflash_nb.tokenization import TokenizeOptions, encode_rows

ROOT = Path(__file__).resolve().parents[1]
AGENTIC = sorted((ROOT / 'tests' / 'fixtures' / 'agentic').glob('*.jsonl'))
MULTI = ROOT / 'tests' / 'fixtures' / 'reasoning_tools_multiturn.jsonl'
FILES = AGENTIC + [MULTI]
# the rows of MULTI that split (earlier reasoning the template drops) and those that must not
MULTI_SPLIT = {'two-queries-reasoning': 4, 'earlier-reasoning-last-plain': 3}   # id: samples
MULTI_KEPT = {'no-earlier-reasoning', 'one-query-agentic', 'empty-earlier-reasoning'}

# Qwen3's rule in small: reasoning shown only on assistant turns after the last user query; tool calls and tool
# results rendered in full, so that nothing else is lost.
TOY = ("{%- set ns = namespace(last=-1) %}{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last = loop.index0 %}{%- endif %}{%- endfor %}"
       "{%- if tools %}{{- '<|im_start|>system\\nTools: ' + (tools | tojson) + '<|im_end|>\\n' }}{%- endif %}"
       "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' }}"
       "{%- if m.role == 'assistant' and m.reasoning_content and loop.index0 > ns.last %}{{- '<think>\\n' + m.reasoning_content + '\\n</think>\\n\\n' }}{%- endif %}"
       "{{- m.content or '' }}"
       "{%- for tc in m.tool_calls or [] %}{{- '<tool_call>' + ({'name': tc.function.name, 'arguments': tc.function.arguments} | tojson) + '</tool_call>' }}{%- endfor %}"
       "{{- '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


@pytest.fixture(scope='module')
def smol():
    from dflash_nb.models import load_tokenizer
    return load_tokenizer('smollm2')

@pytest.fixture(scope='module', params=['toy', 'qwen3'])
def target(request, smol, tmp_path_factory):
    "(tokenizer, template file) of a template that drops earlier reasoning."
    if request.param == 'toy':
        p = tmp_path_factory.mktemp('toy') / 'toy.jinja'; p.write_text(TOY)
        return smol, str(p)
    tok, tpl = fixture_tokenizer('qwen3'), fixture_template('qwen3')
    if tok is None or tpl is None: pytest.skip('no Qwen3 fixtures (../shared/fixtures)')
    return tok, str(tpl)

def canonical(rows) -> list[dict]:
    "The rows a run's later stages get: those read without error, with the format-only repairs a run applies on reading."
    out = []
    for r in rows:
        if '_error' in r or not (r.get('read') or {'ok': True})['ok']: continue
        fixed = fix_row({'id': r['id'], 'source': r['source'], 'messages': r['messages'], **({'tools': r['tools']} if r.get('tools') else {})})[0]
        out.append({k: fixed[k] for k in ('id', 'source', 'messages', 'tools') if k in fixed})
    return out

def tokenization_splits(tok, tpl, rows) -> tuple[dict, dict]:
    "({row id: samples kept} of the rows tokenization splits, its counts), from `encode_rows` itself."
    out, rej, c = encode_rows(tok, canonical(rows), TokenizeOptions(chat_template=tpl, min_supervised_tokens=1))   # every turn, however short (the explorer's count)
    split = {e['id']: 0 for e in rej if e.get('split')}
    for o in out:
        if '#' in o['id']: k = o['id'].rsplit('#', 1)[0]; split[k] = split.get(k, 0) + 1
    return split, c

def explorer_splits(ex) -> dict:
    "{row id: samples trained} of the rows the explorer calls split (0 for a split row quarantined)."
    return {v['id']: 0 if v['default'].startswith('quarantined') else v['split_samples'] for v in ex['rows'] if 'split' in v}


# ------------------------------------------------------------------ the same rows as tokenization, and only those
@pytest.mark.parametrize('path', FILES, ids=lambda p: p.name)
def test_explorer_splits_the_rows_tokenization_splits(target, path):
    tok, tpl = target
    rows, info = load_rows(path)
    ex = explore(tok, rows, tpl, data_info=info)
    want, c = tokenization_splits(tok, tpl, rows)
    assert explorer_splits(ex) == want
    s = ex['summary']
    assert (s['split'] + s['split_quarantined'] + s['split_repaired'], s['split_samples']) == (c['rows_split'], c['split_samples'])
    assert s['rows'] == s['ok'] + s['split'] + s['prompt_only'] + s['repaired_by_default'] + s['quarantined']
    for v in ex['rows']:   # a row with no reasoning before its last assistant turn is never called split
        if 'split' in v:
            row = next(r for r in rows if r['id'] == v['id'])
            earlier = [m for m in row['messages'] if m.get('role') == 'assistant'][:-1]
            assert any((m.get('reasoning_content') or '').strip() for m in earlier), v['id']
    msum, _ = mask_check(tok, canonical(rows), tpl)   # the stage's `template_report.json` masks section
    assert (msum['split'], msum['split_quarantined'], set(msum['split_ids'])) == (c['rows_split'], s['split_quarantined'], set(want))
    assert msum['rows'] == msum['ok'] + msum['prompt_only'] + msum['failed']

def test_multiturn_reasoning_file(target):
    "The reasoning + tool-call rows: those with earlier reasoning split into one sample per assistant turn, the rest not."
    tok, tpl = target
    rows, info = load_rows(MULTI)
    views = {v['id']: v for v in explore(tok, rows, tpl, data_info=info)['rows']}
    assert {k: (views[k]['status'], views[k]['default']) for k in MULTI_SPLIT} == \
           {k: ('split', f'split into {n} samples') for k, n in MULTI_SPLIT.items()}
    assert all('split' not in views[k] and views[k]['status'] == 'ok' for k in MULTI_KEPT), {k: views[k]['reason'] for k in MULTI_KEPT}
    assert views['two-queries-reasoning']['split'] == 'the template drops earlier reasoning: message 1'
    for v in (views[k] for k in MULTI_SPLIT):   # each sample supervises its own turn, with its own reasoning when it has one
        row = next(r for r in rows if r['id'] == v['id'])
        for smp in v['samples']:
            rc = (row['messages'][smp['turn']].get('reasoning_content') or '').strip()
            assert 'error' not in smp and (not rc or rc in ''.join(smp['pieces'])), (v['id'], smp['turn'])
    assert tokenization_splits(tok, tpl, rows)[0] == MULTI_SPLIT

def test_fixture_splits_are_not_trivial(target):
    "Over the agentic fixtures some row does split (`openai_parts` refuse-3: reasoning before a second user query)."
    tok, tpl = target
    rows, _ = load_rows(ROOT / 'tests' / 'fixtures' / 'agentic' / 'openai_parts.jsonl')
    assert 'refuse-3' in explorer_splits(explore(tok, rows, tpl))

def test_a_row_repaired_on_reading_then_split(target):
    "A row in ShareGPT roles with earlier reasoning: repaired by default (format-only), then split as tokenization splits the repaired row."
    tok, tpl = target
    rows, _ = load_rows(MULTI, 'canonical')
    alias = {'user': 'human', 'assistant': 'gpt'}
    row = {**rows[0], 'messages': [{**m, 'role': alias.get(m['role'], m['role'])} for m in rows[0]['messages']]}
    v = explore(tok, [row], tpl)['rows'][0]
    assert (v['default'], v['repair'], v['split'], v['split_samples']) == ('repaired', 'rename_roles', 'the template drops earlier reasoning: message 1', 4)
    assert tokenization_splits(tok, tpl, [row])[0] == {row['id']: 4}

def test_smollm2_never_splits(smol):
    "A template that never shows reasoning gains nothing from a split: no row is called split, and none is split."
    rows, _ = load_rows(MULTI)
    assert explorer_splits(explore(smol, rows)) == {} == tokenization_splits(smol, None, rows)[0]
    rep = probe_template(smol)
    assert rep['summary']['splits'] is None and 'earlier reasoning: never shown' in format_probe_report(rep)


# ------------------------------------------------------------------ the probe, the headline, the HTML, the widget
def test_probe_says_splits_will_happen(target):
    tok, tpl = target
    rep = probe_template(tok, tpl)
    assert rep['summary']['splits'] == 'the template drops earlier reasoning: message 1'
    assert 'earlier reasoning: dropped (the template drops earlier reasoning: message 1 of the probe)' in format_probe_report(rep)

def test_headline_and_html_say_the_same(target, tmp_path):
    tok, tpl = target
    exs, page = template_report(MULTI, tok, tpl, enable_thinking=True, out=tmp_path / 'r.html')
    ex = exs[0]
    lines = headline(ex['summary'])
    n = len(MULTI_SPLIT)
    assert f"{n} split per turn" in lines[0] and lines[2].startswith(f"  split: {n} rows into {sum(MULTI_SPLIT.values())} samples")
    text = format_report(ex)
    assert all(l in text for l in lines)                                  # the terminal
    assert all(html.escape(l.strip()) in page for l in lines)             # the HTML, the same text
    row = next(l for l in text.splitlines() if l.startswith('two-queries-reasoning '))   # the row's outcome and why
    assert 'split: earlier reasoning dropped' in row and row.rstrip().endswith('split into 4 samples')
    assert 'split: <code>the template drops earlier reasoning: message 1</code>' in page
    assert 'sample 2: message 3 last' in page and '<option value="split"' in page
    assert 'split' in format_mask_check(mask_check(tok, canonical(load_rows(MULTI)[0]), tpl)[0])

def test_widget_shows_splits(target):
    pytest.importorskip('ipywidgets')
    tok, tpl = target
    rows, info = load_rows(MULTI)
    w = ExplorerWidget(tok, rows, tpl, enable_thinking=True, data_info=info)
    assert ('split (2)', 'split') in w.reason.options and w.reason.value not in ('ok', 'split', 'prompt-only')
    w.reason.value = 'split'
    assert {v['id'] for v in w.selected()} == set(MULTI_SPLIT) and 'split into' in w.body.value
    static = w.outputs()[1]
    assert headline(w.exploration()['summary'])[2] in static['text/plain'] and 'split: <code>' in static['text/html']


# ------------------------------------------------------------------ the format `sources detect` names, not canonical
@pytest.mark.parametrize('name', ['anthropic_messages.jsonl', 'openai_parts.jsonl'])
def test_report_reads_the_detected_format(name, tmp_path, smol):
    from dflash_nb.cli import main as cli_main
    p = ROOT / 'tests' / 'fixtures' / 'agentic' / name
    fmt = detect_format(p)['best']
    assert fmt not in (None, 'canonical')
    tpl = tmp_path / 'toy.jinja'; tpl.write_text(TOY)
    with contextlib.redirect_stdout(io.StringIO()) as buf:
        assert cli_main(['templates', 'report', str(p), '--template', str(tpl), '--tokenizer', 'smollm2',
                         '--out', str(tmp_path / 'r.html')]) == 0
    out = buf.getvalue()
    assert f'data {name} ({fmt}, detected)' in out
    rows, info = load_rows(p)   # what the command read: the normalizer's rows, not the file's records as canonical rows
    assert info['format'] == fmt and all('_error' in r or 'read' in r for r in rows)
    ex = explore(smol, rows, str(tpl), data_info=info)
    assert headline(ex['summary'])[0] in out
    canon, _ = load_rows(p, 'canonical')
    if name == 'openai_parts.jsonl':   # read as canonical, the reasoning parts are no `reasoning_content`: nothing would split
        assert 'refuse-3' in explorer_splits(ex) and explorer_splits(explore(smol, canon, str(tpl))) == {}


# ------------------------------------------------------------------ a split row whose sample loses its turn's content
_CALL = {'id': 'call_1', 'type': 'function', 'function': {'name': 'get_weather', 'arguments': {'city': 'Oslo'}}}
LOSSY = {'id': 'x', 'source': 's', 'messages': [
    {'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': 'Hello.', 'reasoning_content': 'Greet back.'},
    {'role': 'user', 'content': 'Weather in Oslo?'},
    {'role': 'assistant', 'content': '', 'reasoning_content': 'Call the tool.', 'tool_calls': [_CALL]},
    {'role': 'tool', 'tool_call_id': 'call_1', 'content': '4 C'},
    {'role': 'assistant', 'content': 'It is 4 C.', 'reasoning_content': 'Report.'}]}

def test_split_row_losing_a_call_is_quarantined_as_tokenization_does(smol, tmp_path):
    "A (bad) template that drops a call rendered last: the row splits, its calling sample loses the call, the row is quarantined whole."
    tpl = tmp_path / 'history.jinja'
    tpl.write_text(TOY.replace('{%- for tc in m.tool_calls or [] %}', '{%- for tc in ([] if loop.last else m.tool_calls or []) %}'))
    want, c = tokenization_splits(smol, str(tpl), [LOSSY])
    assert want == {'x': 0} and c['rows_split'] == 1 and c['content_lost'] == 1
    ex = explore(smol, [LOSSY], str(tpl))
    v = ex['rows'][0]
    assert (v['status'], v['reason'], v['default'], v['split']) == \
           ('failed', 'the template drops tool calls', 'quarantined', 'the template drops earlier reasoning: message 1')
    assert "its sample of message 3: " in v['error'] and explorer_splits(ex) == want
    s = ex['summary']
    assert (s['split'], s['split_quarantined'], s['quarantined'], s['content_lost']) == (0, 1, 1, 1)
    assert headline(s)[2] == '  split: 0 rows into 0 samples, one per assistant turn, as the template drops earlier reasoning; 1 more split rows quarantined'
    msum, fails = mask_check(smol, [LOSSY], str(tpl))
    assert (msum['split'], msum['split_quarantined'], msum['failed'], msum['content_lost']) == (1, 1, 1, 1)
    assert (fails[0]['reason'], fails[0]['turn'], fails[0]['split']) == ('the template drops tool calls', 3, v['split'])
