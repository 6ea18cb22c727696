"`dflash-nb plan`: the production configuration validates and is estimated offline; bad settings are caught."
import json
from pathlib import Path
import pytest
from conftest import dflash, ROOT
from dflash_nb.core import PKG_DIR, fixtures_dir, load_config
from dflash_nb.plan import make_plan, target_dims, estimate, validate
from dflash_nb.core import read_json, ConfigError

PROD = PKG_DIR / 'configs' / 'qwen3_6_27b.yaml'
TCFG = PKG_DIR / 'configs' / 'qwen3_6_27b.target_config.json'

def test_plan_cli_offline(tmp_path):
    args = ['plan', ROOT / 'configs' / 'qwen3_6_27b.yaml', '--target-config', TCFG, '--out', tmp_path / 'plan.json']
    fx = fixtures_dir()
    if fx: args += ['--tokenizer', fx / 'tokenizers' / 'qwen3_6']
    r = dflash(*args)
    assert 'plan OK' in r.stdout and 'target_layer_ids: [1, 16, 31, 46, 61]' in r.stdout
    plan = json.loads((tmp_path / 'plan.json').read_text())
    assert plan['ok'] and plan['target']['num_hidden_layers'] == 64
    assert 900_000 < plan['estimates']['rows'] < 930_000
    assert plan['estimates']['stages']['60_hidden_states']['bytes_per_token'] == 51_200
    if fx: assert any(c['check'] == 'mask token' and 'spare embedding row' in c['detail'] for c in plan['checks'])

def test_estimates_by_hand():
    dims = target_dims(read_json(TCFG))
    cfg = {'sources': {'sources': ['demo-alpaca', 'demo-sharegpt'], 'total': 300, 'quotas': {'demo-alpaca': 100}},
           'tokenization': {'max_seq_len': 512}, 'regenerate': {'max_new_tokens': 64},
           'train': {'source': 'online', 'epochs': 1}}
    e = estimate(cfg, dims, {'tokens_per_row': {'general': [100, 200], 'multi-turn': [400, 400]}})
    # alpaca (general): 100 rows of 100 + min(200, 64) tokens; sharegpt (multi-turn): 200 rows of min(400 + 64, 512)
    assert e['per_source']['demo-alpaca'] == {**e['per_source']['demo-alpaca'], 'rows': 100, 'tokens': 16_400, 'supervised': 6_400}
    assert e['per_source']['demo-sharegpt']['rows'] == 200 and e['per_source']['demo-sharegpt']['tokens'] == 200 * 464
    assert e['per_source']['demo-sharegpt']['supervised'] == int(200 * 464 * 64 / 464)
    assert e['stages']['60_hidden_states']['disk_bytes'] == 0      # online: nothing stored
    assert e['stages']['60_hidden_states']['offline_would_need_bytes'] == (16_400 + 92_800) * 5 * 5120 * 2

def test_bad_settings_are_errors():
    dims = target_dims(read_json(TCFG))
    cfg = load_config(PROD, ['train.target_layer_ids=[2, 17, 32, 47, 64]', 'train.mask_token=250000'])
    checks = {c['check']: c for c in validate(cfg, dims)}
    assert not checks['target_layer_ids']['ok'] and 'out of range' in checks['target_layer_ids']['detail']
    assert not checks['mask token']['ok'] and 'OUTSIDE' in checks['mask token']['detail']
    with pytest.raises(ConfigError, match='the plan has errors'):
        make_plan(cfg, target_config=TCFG, echo=lambda s: None)

def test_unknown_source_is_an_error():
    dims = target_dims(read_json(TCFG))
    cfg = load_config(PROD, ['sources.sources=[openorca, no-such-dataset]', 'sources.quotas={openorca: 10}'])
    bad = [c for c in validate(cfg, dims) if not c['ok']]
    assert any('no-such-dataset' in c['check'] for c in bad)
