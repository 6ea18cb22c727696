"""A new user's own data, end to end (issue 30, items 1, 2 and 7): `examples/own_data.jsonl` (OpenAI `messages` with a
tool call, a mid-conversation system message, reasoning, content parts, an image, an assistant-first greeting, an
empty answer, one ShareGPT row) through `dflash-nb new`, `plan`, the chain's first stages and a stage run by hand
with papermill."""
import json, os
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

# --- 7. a stage run by hand with papermill and the chain agree -----------------------------------------------------

def _papermill(out, run, **params):
    import papermill as pm
    env = os.environ.pop('DFLASH_NB_STAGE_LOG', None)
    try: pm.execute_notebook(str(ROOT / 'nbs' / '30_convert.ipynb'), str(out), parameters={'run_dir': str(run), **params},
                             kernel_name='python3', cwd=str(ROOT / 'nbs'), progress_bar=False)
    finally:
        if env is not None: os.environ['DFLASH_NB_STAGE_LOG'] = env

def _header(nb) -> str:
    "The run record header of an executed notebook: a markdown cell (the chain) or a display (a run by hand)."
    for c in json.loads(Path(nb).read_text())['cells']:
        texts = [''.join(c['source'])] if c['cell_type'] == 'markdown' else \
                [''.join(o.get('data', {}).get('text/markdown', '')) for o in c.get('outputs', [])]
        for t in texts:
            if t.startswith('**Run record**'): return t   # '**Run record** (by hand)' too
    return ''

def test_a_stage_run_by_hand_with_papermill_is_what_the_chain_sees(tmp_path):
    from dflash_nb.core import load_config
    from dflash_nb.pipeline import chain_status, check_config, discover_stages
    runs = tmp_path / 'runs'; run = runs / 'own'
    cfg = _config(tmp_path, repairs=['prepend_user'])
    dflash('run', cfg, '--runs-dir', runs, '--until', 'regenerate')
    rec = run / '30_convert' / '30_convert.ipynb'
    assert 'max_chars=5000' not in _header(rec)
    _papermill(rec, run, max_chars=5000)   # into the run folder's record, as the README says
    m = json.loads((run / '30_convert' / 'manifest.json').read_text())
    assert m['params']['max_chars'] == 5000 and m['run_by']
    assert m['params']['repairs'] == ['prepend_user']   # what was not passed comes from the run's config, not the notebook
    h = _header(rec)
    assert '`max_chars=5000`' in h and '30_convert/conversations.jsonl' in h and 'adopted into' in h, h
    assert yaml.safe_load((run / 'config.yaml').read_text())['convert']['max_chars'] == 5000   # the chain adopts it, and says so
    assert 'with convert.max_chars=5000 (was 200000): adopted into' in (run / '30_convert' / 'log.txt').read_text()
    stages = discover_stages()
    def status(cfg):
        return {n: (s, why) for n, s, why in chain_status(run, stages, check_config(cfg, stages), skip=cfg['run']['skip'])}
    assert status(load_config(run))['30_convert'][0] == 'fresh', status(load_config(run))
    r = dflash('stages', run)
    assert any(l.startswith('30_convert') and ' fresh ' in l for l in r.stdout.splitlines()), r.stdout
    r = dflash('run', run, '--until', 'regenerate')   # the next chain run keeps the hand run's result
    assert '30_convert: skipped (manifest matches' in r.stdout, r.stdout
    # with the original config the stage is stale, and the reason names the hand run
    st = status(load_config(cfg))['30_convert']
    assert st[0] == 'stale' and st[1].startswith('parameters changed: max_chars (') and 'run by hand' in st[1], st
    # papermill's notebook written elsewhere: the run folder no longer shows the earlier run's record as this one
    _papermill(tmp_path / 'out.ipynb', run, max_chars=6000)
    assert not rec.exists() and (run / '30_convert' / '30_convert.earlier.ipynb').exists()
    assert '`max_chars=6000`' in _header(tmp_path / 'out.ipynb')
