"""Issue 46 item 4: a first, cheap pass over your own data (`--rehearsal`: your config at the demo's sizes, in a run folder
of its own), and a stage run by hand with papermill recorded beside the run (`hand_overrides` in its manifest) instead
of rewritten into the run's config.yaml, so that your YAML and the run folder agree about what is stale."""
import json, os, time
from pathlib import Path
import yaml
from conftest import dflash, ROOT
from test_own_data import _chats, _config

# --- 1. `dflash-nb run my_run.yaml --rehearsal`: one flag instead of a dozen `--set` on every command ---------------

def test_a_rehearsal_runs_your_file_end_to_end_in_a_folder_of_its_own(tmp_path):
    """Issue 46's user: a chat file like theirs, `dflash-nb new`, then one flag; every stage to 90_evaluate on a CPU.
    4 rows (20 answers of 16 tokens, one prompt set) keep the test to minutes; the issue's 30 rows are timed by
    bench/bench_rehearsal.py."""
    _chats(tmp_path / 'my_chats.jsonl', n=4)
    cfg, runs = tmp_path / 'my_run.yaml', tmp_path / 'runs'
    dflash('new', tmp_path / 'my_chats.jsonl', '--target', 'smollm2', '--out', cfg)
    mine = cfg.read_text()
    p = dflash('plan', cfg, '--rehearsal', '--runs-dir', runs).stdout   # what the rehearsal will do
    assert p.startswith("[rehearsal] my_chats_rehearsal: my_chats at the demo's sizes") and 'train.num_hidden_layers=1' in p, p
    assert 'sources.total' not in p.splitlines()[0]   # 4 rows: fewer than the demo's 56, all of them kept
    t = time.time()
    mine_too = ('--set', 'train.max_steps=20', '--set', 'evaluate.max_prompts=1', '--set', 'evaluate.prompt_sets=[mt_bench]',
                '--set', 'regenerate.max_new_tokens=16')   # yours, on the same line: they win over the demo's sizes
    r = dflash('run', cfg, '--rehearsal', '--quiet', '--runs-dir', runs, *mine_too)
    print(f'rehearsal of 4 rows: {time.time() - t:.0f} s wall ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})')
    run = runs / 'my_chats_rehearsal'
    info = json.loads((run / 'run.json').read_text())
    assert (info['status'], info['rehearsal'], info['rehearsal_of']) == ('ok', True, 'my_chats'), info
    status = {s['stage']: s['status'] for s in info['stages']}
    assert set(status.values()) == {'ran'} and '90_evaluate' in status, status
    over = info['rehearsal_overrides']
    assert (over['run.device'], over['train.num_hidden_layers'], over['tokenization.max_seq_len']) == ('cpu', 1, 1024), over
    assert not {'train.max_steps', 'evaluate.max_prompts', 'regenerate.max_new_tokens'} & set(over), over
    assert json.loads((run / '90_evaluate' / 'eval.json').read_text())['sets']
    saved = yaml.safe_load((run / 'config.yaml').read_text())   # the run's config records it; your data and target stay yours
    assert (saved['train']['max_steps'], saved['evaluate']['max_prompts'], saved['regenerate']['max_new_tokens']) == (20, 1, 16)
    assert saved['rehearsal'] == {'of': 'my_chats', 'config': str(cfg), 'overrides': over}
    real = yaml.safe_load(mine)
    assert (saved['sources']['extra_sources'], saved['run']['target'], saved['regenerate']['select']) == \
           (real['sources']['extra_sources'], 'smollm2', 'all')
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith('rehearsal of my_chats done in ') and last.endswith(f'the real run: dflash-nb run {cfg}'), last
    # the real run is untouched: its config as written, no folder, every stage still to run
    assert cfg.read_text() == mine and not (runs / 'my_chats').exists()
    s = dflash('stages', cfg, '--runs-dir', runs).stdout
    assert s.count('no manifest (never ran') == len(status), s
    s = dflash('stages', cfg, '--rehearsal', '--runs-dir', runs, *mine_too).stdout   # the rehearsal's own folder: all fresh
    assert ' stale ' not in s and str(run) in s, s

# --- 2. a stage run by hand: its overrides beside the run, the run's config unchanged --------------------------------

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

def _line(out: str, stage: str) -> str:
    "A stage's lines in `dflash-nb stages` (its state line and the indented ones below it)."
    lines = out.splitlines()
    i = next(i for i, l in enumerate(lines) if l.startswith(stage))
    return '\n'.join([lines[i], *[l for l in lines[i + 1:i + 4] if l.startswith(' ' * 31)]])

def test_a_stage_run_by_hand_is_recorded_beside_the_run_and_rerun_by_the_chain(tmp_path):
    runs = tmp_path / 'runs'; run = runs / 'own'
    dflash('run', _config(tmp_path, repairs=['prepend_user']), '--runs-dir', runs, '--until', 'regenerate')
    config, rec, man = (run / 'config.yaml').read_text(), run / '30_convert' / '30_convert.ipynb', run / '30_convert' / 'manifest.json'
    _papermill(rec, run, max_chars=5000)   # into the run folder's record, as the README says
    assert (run / 'config.yaml').read_text() == config   # the run's config is the user's: never rewritten
    m = json.loads(man.read_text())
    assert (m['params']['max_chars'], m['params']['repairs']) == (5000, ['prepend_user'])   # the rest from the run's config
    assert m['run_by'] and m['hand_overrides'] == {'max_chars': {'config': 200000, 'hand': 5000}}, m
    h = _header(rec)
    assert '`max_chars=5000`' in h and '30_convert/conversations.jsonl' in h and 'recorded as hand_overrides' in h, h
    assert "with convert.max_chars=5000 (the run's config: 200000): recorded as hand_overrides" in (run / '30_convert' / 'log.txt').read_text()
    s = _line(dflash('stages', run).stdout, '30_convert')   # shown with its value beside the config's, and stale
    assert ' stale ' in s and 'run by hand at ' in s and 'with max_chars=5000 (the config: 200000)' in s, s
    r = dflash('run', run, '--until', 'regenerate')          # the next run reruns it with the config's values, and says why
    assert '30_convert: running (parameters changed: max_chars (run by hand at ' in r.stdout, r.stdout
    m = json.loads(man.read_text())
    assert m['params']['max_chars'] == 200000 and 'run_by' not in m
    assert 'max_chars' not in (yaml.safe_load((run / 'config.yaml').read_text()).get('convert') or {})
    # a hand run with the config's own values is what the chain would have made: fresh, kept, shown as a hand run
    _papermill(rec, run)
    assert json.loads(man.read_text())['hand_overrides'] == {}
    s = _line(dflash('stages', run).stdout, '30_convert')
    assert ' fresh ' in s and "with the config's values" in s, s
    assert '30_convert: skipped (manifest matches' in dflash('run', run, '--until', 'regenerate').stdout
    # papermill's notebook written elsewhere: the run folder no longer shows the earlier run's record as this one
    _papermill(tmp_path / 'out.ipynb', run, max_chars=6000)
    assert not rec.exists() and (run / '30_convert' / '30_convert.earlier.ipynb').exists()
    assert '`max_chars=6000`' in _header(tmp_path / 'out.ipynb')
