"""A new user's own data, end to end (issue 30, items 1, 2 and 7): `examples/own_data.jsonl` (OpenAI `messages` with a
tool call, a mid-conversation system message, reasoning, content parts, an image, an assistant-first greeting, an
empty answer, one ShareGPT row) through `dflash-nb new`, `plan` and the chain's first stages (a stage run by hand with papermill:
test_rehearsal_profile.py)."""
import json, re
from pathlib import Path
import pytest, yaml
from conftest import dflash, ROOT

OWN = ROOT / 'examples' / 'own_data.jsonl'
NEEDS_OPT_IN = {'mid-system': 'move_system_first', 'greeting-first': 'prepend_user', 'empty-answer': 'drop_empty_turns'}

def _ids(path): return [json.loads(l).get('id') for l in Path(path).read_text().splitlines() if l.strip()]

def _config(tmp_path, **run):
    "A cheap run config over the example file: sources and convert only (targets and templates skipped)."
    cfg = {'run': {'name': 'own', 'target': 'smollm2', 'device': 'cpu', 'skip': ['targets', 'templates'], **run},
           'sources': {'sources': ['mine'], 'extra_sources': {'mine': {'path': str(OWN)}}, 'survey': 'mix'}}
    p = tmp_path / 'own.yaml'; p.write_text(yaml.safe_dump(cfg)); return p

def test_the_example_file_has_every_case():
    rows = [json.loads(l) for l in OWN.read_text().splitlines()]
    assert len(rows) == 10 and len(set(_ids(OWN))) == 10
    blob = OWN.read_text()
    for s in ('"tool_calls"', '"reasoning_content"', '"image_url"', '"conversations"', '"type": "text"'): assert s in blob, s
    assert set(NEEDS_OPT_IN) <= set(_ids(OWN))

# --- 1. nothing dropped silently; one opt-in (run.repairs) for every stage that validates rows -----------------------

def test_run_repairs_reaches_every_stage_that_validates_rows():
    from dflash_nb.core import load_config
    from dflash_nb.pipeline import check_config, discover_stages
    stages = discover_stages()
    p = check_config(load_config(overrides=['run.repairs=[prepend_user, move_system_first]']), stages)
    validating = [s.name for s in stages if 'repairs' in s.params]
    assert {'10_sources', '30_convert'} <= set(validating)
    for n in validating: assert p[n]['repairs'] == ['prepend_user', 'move_system_first'], n
    p = check_config(load_config(overrides=['run.repairs=[prepend_user]', 'convert.repairs=[]']), stages)   # a stage's own key wins
    assert (p['10_sources']['repairs'], p['30_convert']['repairs']) == (['prepend_user'], [])
    with pytest.raises(Exception, match=r"run.repairs: \['guess'\] is not allowed"):
        check_config(load_config(overrides=['run.repairs=[guess]']), stages)

def test_an_opted_in_repair_saves_the_row_or_says_why():
    from dflash_nb.formats import NORMALIZERS, normalize_record
    from dflash_nb.schema import DEFAULT_REPAIRS
    greet = json.loads(next(l for l in OWN.read_text().splitlines() if '"greeting-first"' in l))
    rows, rej = normalize_record('mine', NORMALIZERS['messages'], greet, 6, repairs=DEFAULT_REPAIRS + ('prepend_user',))
    assert not rej and rows[0]['messages'][0] == {'role': 'user', 'content': 'Continue.'}, rej   # saved, as the README says
    orphan = {'messages': greet['messages'] + [{'role': 'tool', 'content': '{}'}]}   # prepend_user applies, yet it fails
    _, rej = normalize_record('mine', NORMALIZERS['messages'], orphan, 0, repairs=DEFAULT_REPAIRS + ('prepend_user',))
    assert 'prepend_user applied, but the row still fails: orphan tool message' in rej[0]['reason'], rej
    from dflash_nb.convert import ConvertOptions, convert_rows
    v = next(convert_rows([{'id': 'o', 'source': 's', **orphan}], ConvertOptions(repairs=['prepend_user'])))
    assert 'prepend_user applied, but the row still fails: orphan tool message' in v['reasons'][0], v

def test_every_quarantine_is_announced_and_run_repairs_saves_rows(tmp_path):
    "The chain's console and the stage's log say what was quarantined, by reason, and where; run.repairs saves rows."
    r = dflash('run', _config(tmp_path), '--runs-dir', tmp_path / 'runs', '--until', 'regenerate')
    run = tmp_path / 'runs' / 'own'
    line = '10_sources: quarantined 5 row(s) ('
    assert line in r.stdout and '-> 10_sources/quarantine.jsonl' in r.stdout, r.stdout
    assert line in (run / '10_sources' / 'log.txt').read_text()
    assert line in dflash('stages', _config(tmp_path), '--runs-dir', tmp_path / 'runs').stdout   # and afterwards
    for reason in ('system not first', 'assistant first', 'empty content', 'non-text content', 'missing field'):
        assert f'1 {reason}' in r.stdout, reason
    m = json.loads((run / '10_sources' / 'manifest.json').read_text())
    assert m['quarantine'] == [{'path': '10_sources/quarantine.jsonl', 'rows': 5, 'reasons': m['quarantine'][0]['reasons']}]
    q = [json.loads(l) for l in (run / '10_sources' / 'quarantine.jsonl').read_text().splitlines()]
    for rec in q:
        if rec['row'].get('id') in NEEDS_OPT_IN: assert f"{NEEDS_OPT_IN[rec['row']['id']]} would apply: opt in with run.repairs" in rec['reason']
    # the one opt-in of the run, read by 10_sources and 30_convert alike
    r = dflash('run', _config(tmp_path, repairs=sorted(set(NEEDS_OPT_IN.values()))), '--runs-dir', tmp_path / 'runs', '--until', 'regenerate')
    kept = _ids(run / '30_convert' / 'conversations.jsonl')
    assert {f'mine/{i}' for i in NEEDS_OPT_IN} <= set(kept), kept
    assert '10_sources: quarantined 2 row(s) (1 non-text content, 1 missing field)' in r.stdout, r.stdout

# --- 2. `dflash-nb new` writes a complete config with a real run's values; `plan` counts the file's rows ------------

def test_new_writes_a_complete_config_with_a_real_runs_values(tmp_path):
    from dflash_nb.pipeline import check_config, discover_stages
    from dflash_nb.pipeline import RUN_ONLY
    out = tmp_path / 'my_run.yaml'
    r = dflash('new', OWN, '--target', 'smollm2', '--out', out)
    assert 'read as messages (10 records)' in r.stdout, r.stdout
    text = out.read_text(); cfg = yaml.safe_load(text)
    stages = discover_stages()
    check_config(cfg, stages)
    assert cfg['run']['target'] == 'smollm2' and cfg['run']['repairs'] == []
    for st in stages:   # every section, every declared key (the run-wide ones in `run`), each section commented
        assert any(l.startswith(f'{st.short}:') and f'# {st.name}: ' in l for l in text.splitlines()), st.name
        assert set(cfg.get(st.short) or {}) == {k for k in st.params if k != 'run_dir' and k not in RUN_ONLY}, st.name
    assert {k: cfg['run'][k] for k in ('chat_template', 'enable_thinking', 'mask_method')} == {'chat_template': None, 'enable_thinking': None, 'mask_method': 'locate'}
    src = cfg['sources']
    assert src['sources'] == ['own_data'] and src['extra_sources']['own_data']['normalizer'] == 'messages'
    assert src['extra_sources']['own_data']['path'] == str(OWN) and src['total'] == 10
    assert 'detected format messages' in text
    # a real run's values, not the demo's
    assert (cfg['train']['num_hidden_layers'], cfg['train']['max_minutes'], cfg['train']['num_anchors']) == (5, None, 512)
    assert cfg['regenerate']['max_new_tokens'] == 2048 and cfg['evaluate']['max_prompts'] == 80
    assert dflash('new', OWN, '--target', 'smollm2', '--out', out, check=False).returncode != 0   # never overwrites silently

def _plan(config, *overrides) -> str:
    "What `dflash-nb plan CONFIG --set ...` prints (in-process: the plan is offline and cheap)."
    from dflash_nb.plan import make_plan
    out = []
    make_plan(config, overrides, echo=out.append)
    return '\n'.join(out)

def test_plan_counts_the_rows_a_local_file_gives(tmp_path):
    from dflash_nb.cli import main
    out = tmp_path / 'my_run.yaml'
    assert main(['new', str(OWN), '--target', 'smollm2', '--out', str(out)]) == 0
    p = _plan(out)
    assert 'mix: 5 rows' in p, p
    assert 'own_data: 5 rows for a quota of 10 (counted: 10 records read; quarantined by 10_sources:' in p
    assert '1 assistant first' in p and 'settings sized for the demo' not in p
    assert 'mix: 8 rows' in _plan(out, 'run.repairs=[prepend_user, move_system_first, drop_empty_turns]')

def test_plan_says_when_a_run_keeps_the_demos_settings(tmp_path):
    "The declared defaults are a real run's; a config copied from the demo's keeps its CPU-sized values and is told so."
    p = _plan(_config(tmp_path))
    assert 'mix: 5 rows' in p and 'mix: 56 rows' not in p, p
    assert 'settings sized for the demo' not in p, p   # only the run section and the sources: a real run's values
    from dflash_nb.core import load_config
    demo = load_config(); demo['run'] = {**demo['run'], 'name': 'copied'}
    (tmp_path / 'copied.yaml').write_text(yaml.safe_dump(demo))
    w = next(l for l in _plan(tmp_path / 'copied.yaml').splitlines() if 'settings sized for the demo' in l)
    for s in ('sources.total 56 (a real run: 100000)', 'train.num_hidden_layers 1 (a real run: 5)', 'train.max_minutes 3.0',
              'train.num_anchors 16', 'dflash-nb new'):
        assert s in w, (s, w)
    p = _plan(_config(tmp_path), 'convert.repairs=[move_system_first]')
    assert "convert.repairs ['move_system_first']): 10_sources rejects a row before 30_convert sees it" in p
    assert 'settings sized for the demo' not in _plan(None)   # the demo is the demo

# --- issue 46: a fully answered file of your own gets the target's answers; `plan` measures it -----------------------

ZH = '深度学习模型的推理速度取决于模型大小、硬件和批处理。推测解码用一个小型草稿模型提出令牌，再由目标模型并行验证。'
EN = 'Speculative decoding drafts tokens with a small model and verifies them with the target in one forward pass. '

def _chats(path, n=33):
    "A fully answered chat file like issue 46's: Chinese and English, 8-13 messages a row, a `conversation_id` not unique."
    rows = []
    for i in range(n):
        msgs = [{'role': 'system', 'content': '你是一个有帮助的助手。'}] if i % 3 == 0 else []
        for t in range(4 + i % 3):
            msgs += [{'role': 'user', 'content': (ZH if t % 2 else EN) + f' 问题 {i}.{t}'},
                     {'role': 'assistant', 'content': ZH * (6 + (i + t) % 5) + EN * (1 + t % 3)}]
        rows.append({'conversation_id': f'conv-{i % 5}', 'messages': msgs})
    Path(path).write_text(''.join(json.dumps(r, ensure_ascii=False) + '\n' for r in rows), encoding='utf-8')
    return rows

def test_new_has_the_target_write_every_answer_and_plan_counts_what_that_writes(tmp_path):
    "`new` writes `regenerate.select: all` and says so; `plan` counts the tokens each select mode writes and warns for prompt_only."
    from dflash_nb.core import load_config
    from dflash_nb.pipeline import find_stage
    assert find_stage('regenerate').defaults['select'] == 'all' and load_config()['regenerate']['select'] == 'prompt_only'   # the demo's, explicit
    _chats(tmp_path / 'my_chats.jsonl')
    out = tmp_path / 'my_run.yaml'
    r = dflash('new', tmp_path / 'my_chats.jsonl', '--target', 'smollm2', '--out', out)
    assert 'regenerate.select: all -- the target rewrites every assistant turn (33 of your 33 records hold answers' in r.stdout, r.stdout
    text = out.read_text()
    assert yaml.safe_load(text)['regenerate']['select'] == 'all'
    assert '  select: all  # the target rewrites every assistant turn (33 of your 33 records hold answers' in text
    every, kept = _plan(out), _plan(out, 'regenerate.select=prompt_only')
    gen = lambda p: re.search(r'([\d,]+) generated tokens \(select (\w+): ([\d,]+) of 33 rows\)', p).groups()
    assert gen(kept) == ('0', 'prompt_only', '0'), gen(kept)
    g = int(gen(every)[0].replace(',', ''))
    assert gen(every)[1:] == ('all', '33') and g > 33 * 1000, gen(every)
    assert (f'regenerate.select prompt_only: 33 of 33 rows keep answers the target did not write, and the drafter learns to '
            f"draft those, not the target's own") in kept and f'{g:,} tokens to generate instead of 0' in kept, kept
    assert 'regenerate.select prompt_only' not in every

def test_plan_measures_your_file_with_the_targets_tokenizer(tmp_path):
    """Issue 46.2: `plan` guessed 42,900 tokens for a file of 95,041 (Chinese through an English tokenizer); it now renders a
    sample of the rows with the target's tokenizer and template, and warns when most rows will be cut at max_seq_len."""
    from dflash_nb.cli import main
    from dflash_nb.models import load_tokenizer
    from dflash_nb.plan import make_plan
    rows = _chats(tmp_path / 'my_chats.jsonl')
    out = tmp_path / 'my_run.yaml'
    assert main(['new', str(tmp_path / 'my_chats.jsonl'), '--target', 'smollm2', '--out', str(out)]) == 0
    tok = load_tokenizer('smollm2')
    want = sum(len(tok.apply_chat_template(r['messages'], tokenize=True, return_dict=True)['input_ids']) for r in rows)
    said = []   # the file as it is (its answers kept, no max_seq_len): exactly the target's tokens
    p = make_plan(out, ['regenerate.select=prompt_only', 'tokenization.max_seq_len=null'], echo=said.append)
    got = p['estimates']['per_source']['my_chats']
    assert got['measured']['sample'] == 33 and abs(got['tokens'] - want) <= 0.01 * want, (got['tokens'], want)
    assert "my_chats: tokens measured with the target's tokenizer on 33 of 33 rows" in said[0]
    said = []
    p = make_plan(out, echo=said.append)   # the real run's: every answer rewritten (at most 2,048 tokens), cut at 3,072
    m = p['estimates']['per_source']['my_chats']['measured']
    assert m['truncated_rows'] > 33 / 2 and p['estimates']['tokens'] <= 33 * 3072
    assert f"my_chats: {m['truncated_rows']} of 33 rows will be truncated at tokenization.max_seq_len 3,072 (measured with the target's" in said[0], said[0]

def test_the_template_report_names_rows_as_the_run_does(tmp_path, capsys):
    """Issue 46.6: `templates report` labelled rows by the file's `conversation_id` (not unique: five rows were `conv-0`)
    while a run names them by record index; it now names them as the run does, the file's own id beside."""
    from dflash_nb.cli import main
    from dflash_nb.sources import auto_source, normalize_stream
    _chats(tmp_path / 'my_chats.jsonl', n=7)
    run_ids = [r['id'] for r, _ in normalize_stream(auto_source(tmp_path / 'my_chats.jsonl', 'my_chats')) if r]
    assert run_ids == [f'my_chats/{i}' for i in range(7)]   # what 10_sources (and every later stage) calls them
    assert main(['templates', 'report', str(tmp_path / 'my_chats.jsonl'), '--target', 'smollm2', '--out', str(tmp_path / 'r.html')]) == 0
    text, page = capsys.readouterr().out, (tmp_path / 'r.html').read_text()
    for i, rid in enumerate(run_ids):
        assert f'{rid} (conv-{i % 5})' in text and f'<summary>{rid} — ' in page and f'line {i + 1}, file id conv-{i % 5}' in page, rid
