"`dflash-nb plan`: the production configuration validates and is estimated offline; bad settings are caught."
import json
from pathlib import Path
import pytest
from conftest import dflash, ROOT
from dflash_nb.core import PKG_DIR, fixtures_dir, load_config
from dflash_nb.plan import make_plan, estimate, validate
from dflash_nb.costs import target_dims, complete_config
from dflash_nb.core import read_json, ConfigError

PROD = PKG_DIR / 'configs' / 'qwen3_6_27b.yaml'
TCFG = PKG_DIR / 'configs' / 'qwen3_6_27b.target_config.json'

def test_plan_cli_offline(tmp_path):
    # the shipped config and target config named without a path, from a folder outside the checkout
    args = ['plan', 'qwen3_6_27b', '--target-config', 'qwen3_6_27b.target_config.json', '--out', tmp_path / 'plan.json']
    fx = fixtures_dir()
    if fx: args += ['--tokenizer', fx / 'tokenizers' / 'qwen3_6']
    r = dflash(*args, cwd=tmp_path)
    assert 'plan OK' in r.stdout and 'target_layer_ids: [1, 16, 31, 46, 61]' in r.stdout
    plan = json.loads((tmp_path / 'plan.json').read_text())
    assert plan['ok'] and plan['target']['num_hidden_layers'] == 64
    assert plan['estimates']['rows'] == 912_756 - (122_956 - 128_575 // 2)   # oasst2 gives at most one conversation per 2 messages
    assert not [c for c in plan['checks'] if c['check'].startswith('gated')]   # the config promises no gated source
    assert any(w.startswith('oasst2: quota 122,956 cannot be met') for w in plan['estimates']['warnings'])
    assert plan['estimates']['stages']['60_hidden_states']['bytes_per_token'] == 51_200
    if fx: assert any(c['check'] == 'mask token' and 'spare embedding row' in c['detail'] for c in plan['checks'])
    check_memory_output(r.stdout, plan)

def test_estimates_by_hand():
    dims = target_dims(read_json(TCFG))
    cfg = {'sources': {'sources': ['demo-alpaca', 'demo-sharegpt'], 'total': 300, 'quotas': {'demo-alpaca': 100}},
           'tokenization': {'max_seq_len': 512}, 'regenerate': {'max_new_tokens': 64},
           'train': {'source': 'online', 'epochs': 1}}
    e = estimate(complete_config(cfg), dims, {'tokens_per_row': {'general': [100, 200], 'multi-turn': [400, 400]}})
    # local files are counted: alpaca (general) gives all its 60 rows (quota 100) of 100 + min(200, 64) tokens;
    # sharegpt (multi-turn) its 40 rows (quota 200) of min(400 + 64, 512)
    assert e['per_source']['demo-alpaca'] == {**e['per_source']['demo-alpaca'], 'rows': 60, 'tokens': 60 * 164, 'supervised': 60 * 64}
    assert e['per_source']['demo-sharegpt']['rows'] == 40 and e['per_source']['demo-sharegpt']['tokens'] == 40 * 464
    assert e['per_source']['demo-sharegpt']['supervised'] == int(40 * 464 * 64 / 464)
    assert e['stages']['60_hidden_states']['disk_bytes'] == 0      # online: nothing stored
    assert e['stages']['60_hidden_states']['offline_would_need_bytes'] == (60 * 164 + 40 * 464) * 5 * 5120 * 2
    assert 'demo-sharegpt: 40 rows for a quota of 200 (counted: 40 records read)' in e['warnings']

def test_bad_settings_are_errors():
    dims = target_dims(read_json(TCFG))
    cfg = load_config(PROD, ['train.target_layer_ids=[2, 17, 32, 47, 64]', 'train.mask_token=250000'])
    checks = {c['check']: c for c in validate(complete_config(cfg), dims)}
    assert not checks['target_layer_ids']['ok'] and 'out of range' in checks['target_layer_ids']['detail']
    assert not checks['mask token']['ok'] and 'OUTSIDE' in checks['mask token']['detail']
    with pytest.raises(ConfigError, match='the plan has errors'):
        make_plan(cfg, target_config=TCFG, echo=lambda s: None)

def test_unknown_source_is_an_error():
    dims = target_dims(read_json(TCFG))
    cfg = load_config(PROD, ['sources.sources=[openorca, no-such-dataset]', 'sources.quotas={openorca: 10}'])
    bad = [c for c in validate(complete_config(cfg), dims) if not c['ok']]
    assert any('no-such-dataset' in c['check'] for c in bad)

# -- memory per GPU (issue 15) ------------------------------------------------------------------------------------------
from dflash_nb.costs import (memory_plan, train_memory, regen_memory, usable_bytes, recommend_train, drafter_params,
                             target_token_bytes, format_memory)

def test_training_memory_by_hand():
    "The production drafter (5 layers at width 5120) on Qwen3.6-27B, colocated, batch 4: every component worked by hand."
    dims = target_dims(read_json(TCFG)); cfg = complete_config(load_config(PROD))
    tr = cfg['train']; H, I, V = 5120, 17408, 248320
    # drafter: 5 × (q,o 2·5120·6144 + k,v 2·5120·1024 + MLP 3·5120·17408 + norms 2·5120 + q/k norms 2·256) + fc 5·5120² + 2 norms
    pd = 5 * (2 * H * 6144 + 2 * H * 1024 + 3 * H * I + 2 * H + 2 * 256) + 5 * H * H + 2 * H
    assert drafter_params(dims, tr) == pd and 1.8e9 < pd < 1.9e9
    m = train_memory(dims, tr, seq=3072, batch=4, ce='full')['trainer']
    assert m['target weights'] == 2 * dims['params_estimate']
    assert m['drafter parameters (fp32)'] + m['gradients (fp32)'] + m['AdamW states (fp32 m, v)'] == 16 * pd   # ~29 GB
    assert m['embedding + LM head (frozen)'] == 2 * V * H * 4                      # untied, fp32 as train loads them
    assert m['loss (logits)'] == 4 * 512 * 15 * V * 14                             # 30,720 block positions × vocab × 14 B
    per_q = 2 * (2 * 6144 + 2 * 1024 + 2 * H + 4 * I) + 8 * H                     # per layer and query token
    per_ctx = 5 * H * 2 + 2 * H * 4 + 5 * 2 * 1024 * 2
    assert m['drafter activations'] == 4 * (5 * 8192 * per_q + 3072 * per_ctx)
    assert m['target forward (features + one layer)'] == 4 * 3072 * (5 * H * 2 + (3 * I + 4 * H) * 2)
    assert sum(m.values()) > usable_bytes('B200')                                 # full logits: no GPU holds it
    # the chunked loss: one chunk of 2^26 logits (14 B each) + fp32 row gradients and bf16 rows of the 30,720 positions
    c = train_memory(dims, tr, seq=3072, batch=4)['trainer']
    assert c['loss (logits)'] == 2 ** 26 * 14 + 4 * 512 * 15 * H * 6
    assert usable_bytes('H200') < sum(c.values()) < usable_bytes('B200')
    # FSDP over 8 GPUs, checkpointed activations
    f = train_memory(dims, tr, seq=3072, batch=4, fsdp=True, grad_checkpoint=True, world=8)['trainer']
    assert f['AdamW states (fp32 m, v)'] == 8 * pd / 8
    assert f['drafter activations'] == 4 * (5 * 8192 * H * 4 + 8192 * per_q + 3072 * per_ctx)

def test_regeneration_memory_by_hand():
    dims = target_dims(read_json(TCFG))
    c = target_token_bytes(dims)
    assert c['kv_per_token'] == 16 * 2 * 4 * 256 * 2                              # 16 full-attention layers, bf16
    assert c['state_per_seq'] == 48 * (48 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 48 * 128) * 2)
    m = regen_memory(dims, batch=64, ctx=4096, prompt=2048, tp=4)
    assert m['KV cache (full-attention layers)'] == 64 * 4096 * c['kv_per_token'] / 4
    assert m['target weights'] == 2 * dims['params_estimate'] / 4

def test_memory_recommendations_fit():
    "H100 80 GB: target and drafter do not fit together -> separate placement; H200 and B200: colocated."
    dims = target_dims(read_json(TCFG)); tr = complete_config(load_config(PROD))['train']
    h100, h200 = recommend_train(dims, tr, 3072, 'H100', 8), recommend_train(dims, tr, 3072, 'H200', 8)
    assert h100['placement'] == 'separate' and h100['batch'] >= 1
    assert h100['trainer_bytes'] <= usable_bytes('H100') and h100['target_bytes'] <= usable_bytes('H100')
    assert h100['target_gpus'] + h100['trainer_gpus'] == 8
    assert h200['placement'] == 'colocated' and h200['batch'] == 4 and h200['trainer_bytes'] <= usable_bytes('H200')
    # a recommendation is what train_memory says fits, not a label
    m = train_memory(dims, tr, 3072, h200['batch'], world=8, **{k: h200[k] for k in ('placement', 'fsdp', 'grad_checkpoint', 'ce')})
    assert sum(m['trainer'].values()) == h200['trainer_bytes']

def check_memory_output(out, plan):
    "The memory table of the production plan (called from test_plan_cli_offline: one CLI run for both)."
    assert 'memory per GPU' in out and 'loss (logits)' in out and 'AdamW states' in out
    assert 'recommended on H100 80 GB: placement separate' in out
    assert 'recommended on H200 141 GB: placement colocated' in out
    assert 'OUT OF MEMORY' not in out             # the shipped config (colocated, parallel fsdp) fits its plan.gpu (H200)
    ddp = make_plan(load_config(PROD, ['train.parallel=ddp']), target_config=TCFG, echo=lambda s: None)
    assert any('80_train as configured needs' in w and 'OUT OF MEMORY' in w for w in ddp['memory']['warnings'])
    assert set(plan['memory']['stages']) == {'40_regenerate', '60_hidden_states', '80_train'}
    assert plan['memory']['stages']['40_regenerate']['fits']['H100']          # 4-way tensor parallel, 256 in flight

# -- what the config really does ---------------------------------------------------------------------------------------
def test_total_scales_quotas():
    "`--set sources.total=2000` plans 2,000 rows (quotas scaled), with the rows each source gives and a line saying so."
    from dflash_nb.sources import allocate, get_source
    cfg = load_config(PROD, ['sources.total=2000'])
    plan = make_plan(cfg, target_config=TCFG, echo=lambda s: None)
    e = plan['estimates']
    assert e['rows'] == 2000 and sum(v['rows'] for v in e['per_source'].values()) == 2000
    srcs = [get_source(n) for n in cfg['sources']['sources']]
    assert {k: v['rows'] for k, v in e['per_source'].items()} == allocate(2000, srcs, cfg['sources']['quotas'], {})
    assert e['per_source']['openorca']['rows'] == round(371000 * 2000 / 912756)   # 813: the mix's proportions kept
    assert any('scaled by' in w for w in e['warnings'])
    full = make_plan(PROD, target_config=TCFG, echo=lambda s: None)['estimates']
    assert sum(v['quota'] for v in full['per_source'].values()) == 912756 and not any('scaled by' in w for w in full['warnings'])

def test_quotas_short_of_total_are_reported():
    dims = target_dims(read_json(TCFG))
    cfg = {'sources': {'sources': ['demo-alpaca'], 'total': 100, 'quotas': {'demo-alpaca': 40}}}
    e = estimate(complete_config(cfg), dims)
    assert e['rows'] == 40 and any('fewer than sources.total' in w for w in e['warnings'])

def test_offline_hub_target_fails_at_once(tmp_path):
    import time
    t = time.time()
    r = dflash('plan', PROD, check=False, env={'HF_HUB_OFFLINE': '1'})
    assert r.returncode != 0 and time.time() - t < 20
    err = (r.stdout + r.stderr).strip().splitlines()
    assert any('hub is out of reach' in l and '--target-config' in l for l in err)

def test_scale_quotas():
    from dflash_nb.sources import scale_quotas
    assert scale_quotas(100, {'a': 30, 'b': 20}) == {'a': 30, 'b': 20}               # they fit: unchanged
    assert scale_quotas(10, {'a': 300, 'b': 100, 'c': 100}) == {'a': 6, 'b': 2, 'c': 2}
    assert sum(scale_quotas(7, {'a': 1, 'b': 1, 'c': 1, 'd': 1, 'e': 5}).values()) == 7
    assert scale_quotas(0, {'a': 5}) == {'a': 5} and scale_quotas(None, {'a': 5}) == {'a': 5}   # no total: face value

def test_sources_stage_uses_the_same_rule():
    "The mix builder scales the quotas as the plan does: 30 + 10 asked, total 8 -> 6 + 2 rows."
    from dflash_nb.sources import MixOptions, build_mix, get_source
    srcs = [get_source('demo-alpaca'), get_source('demo-sharegpt')]
    mix = MixOptions(total=8, quotas={'demo-alpaca': 30, 'demo-sharegpt': 10}, min_user_chars=1, max_chars=None, category_weights={})
    rows, counts = build_mix(srcs, mix, log=lambda m: None)
    assert (counts['demo-alpaca']['quota'], counts['demo-sharegpt']['quota']) == (6, 2)
    assert len(rows) == 8

def test_stage_defaults_fill_the_config():
    """The demo config lists no sources: the plan uses the stage notebooks' declared defaults where the config is silent,
    as the chain does (56 rows, not 0), and the config's values where it speaks (the demo's 16 anchors)."""
    from dflash_nb.pipeline import discover_stages
    plan = make_plan(None, target_config=TCFG, echo=lambda s: None)      # the demo's sections, Qwen3.6's shape
    e = plan['estimates']
    assert plan['ok'] and e['rows'] == 56 and len(e['per_source']) == 10 and e['tokens'] > 0
    from dflash_nb.params import resolve_params
    from dflash_nb.core import load_config
    train = resolve_params(next(s for s in discover_stages() if s.short == 'train'), load_config())
    A, B, epochs = train['num_anchors'], train['block_size'], train['epochs']
    assert e['stages']['80_train']['trained_block_tokens'] == 56 * min(A * B, e['tokens'] / 56 * B) * epochs
    assert plan['memory']['stages']['80_train']['setting']['batch'] == train['batch_size']

# -- what the plan must not call OK (issues 22, 23) ---------------------------------------------------------------------
def test_a_mix_of_no_rows_or_no_tokens_is_an_error(tmp_path):
    cfg = tmp_path / 'c.yaml'
    cfg.write_text('run: {name: c, target: Qwen/Qwen3.6-27B}\nsources: {sources: [demo-alpaca], quotas: {demo-alpaca: 0}}\n')
    r = dflash('plan', cfg, '--target-config', TCFG, check=False)
    assert r.returncode == 2 and 'plan OK' not in r.stdout and 'plan HAS ERRORS' in r.stdout
    assert 'mix: the mix gives 0 rows: no source is allocated a row' in r.stderr
    r = dflash('plan', cfg, '--target-config', TCFG, '--set', 'sources.quotas={}',
               '--set', 'plan.tokens_per_row={general: [0, 0]}', check=False)
    assert r.returncode == 2 and 'mix: mean sequence length 0 tokens' in r.stderr

def test_gated_sources_warn_and_fail_where_the_config_promises_none():
    dims = target_dims(read_json(TCFG))
    cfg = complete_config(load_config(PROD, ['sources.sources=[openorca, lima]', 'sources.quotas={openorca: 10}']))
    gated = {c['check']: c for c in validate(cfg, dims)}['gated source lima']
    assert not gated['ok'] and gated['level'] == 'error' and 'plan.allow_gated is false' in gated['detail']
    cfg['plan'] = {**cfg['plan'], 'allow_gated': True}
    gated = {c['check']: c for c in validate(cfg, dims)}['gated source lima']
    assert gated['level'] == 'warning' and 'huggingface-cli login' in gated['detail']
    with pytest.raises(ConfigError, match='unknown key plan.alow_gated'):
        make_plan(load_config(PROD, ['plan.alow_gated=false']), target_config=TCFG, echo=lambda s: None)

# -- precision and minutes on this machine (issue 45) -------------------------------------------------------------------
from dflash_nb.plan import format_plan
from dflash_nb.costs import computing_stages

def test_demo_plan_says_dtypes_and_minutes_here():
    "`make_plan('demo')`: each computing stage's dtype on this machine and why, and positive minutes for each."
    plan = make_plan('demo', echo=lambda s: None)
    stages = ['40_regenerate', '60_hidden_states', '80_train', '90_evaluate']
    assert computing_stages(complete_config(load_config('demo'))) == stages
    assert plan['machine']['device'] == 'cpu' and plan['machine']['gflops']['float32'] > 0
    assert list(plan['precision']) == stages
    for s in stages:
        assert plan['precision'][s]['dtype'] in ('float32', 'bfloat16') and plan['precision'][s]['why'], s
        assert plan['minutes']['stages'][s]['minutes'] > 0, (s, plan['minutes']['stages'][s])
    assert plan['minutes']['unmodeled'] == [] and plan['minutes']['total'] >= sum(
        plan['minutes']['stages'][s]['minutes'] for s in stages)
    text = format_plan(plan)
    assert 'precision on this machine (' in text and 'min here' in text and '80_train: 200 steps x' in text


def test_run_fits_its_budget_here(tmp_path):
    """`run.budget_minutes` shorter than the plan's prediction on this machine: `dflash-nb run` scales the rows and
    training's minutes (said, and kept in run.json), runs with them, and compares its stages with the new prediction.
    The budget is set between the plan's fixed part and its total, from the probe the run's folder keeps (which the
    run plans with too), so the outcome does not depend on how fast or how loaded this CPU is."""
    from dflash_nb.plan import SCALED
    from dflash_nb.precision import PROBE_FILE, probe
    probe('cpu', cache=tmp_path / 'demo' / PROBE_FILE)
    st = make_plan(echo=lambda *a: None, runs_dir=tmp_path)['minutes']['stages']
    scaled = sum(st[s]['minutes'] for s in (*SCALED, '80_train'))
    budget = round(sum(v['minutes'] for v in st.values()) - scaled / 2, 2)
    r = dflash('run', '--runs-dir', tmp_path, '--set', f'run.budget_minutes={budget}', '--until', 'templates')
    assert f'[run] run.budget_minutes {budget:g}: ' in r.stdout and 'scales the rows and training by' in r.stdout, r.stdout[-2000:]
    run = json.loads((tmp_path / 'demo' / 'run.json').read_text())
    fit = run['budget']
    assert fit['budget'] == budget and fit['predicted'] > budget and 0 < fit['factor'] < 1, fit
    total = int(next(o for o in fit['overrides'] if o.startswith('sources.total=')).split('=')[1])
    assert run['config']['sources']['total'] == total < 56                       # the run used the scaled rows
    assert all(s['predicted_s'] is not None for s in run['stages'] if s['status'] == 'ran')
    assert 'seconds measured/predicted by plan on this machine: 01_targets' in r.stdout

def test_the_embedded_targets_own_tokenizer_resolves_the_mask_token():
    """Issue 46.6: `plan` said it could not resolve the embedded smollm2's mask token (`<empty_output>`, given by name):
    it loaded a tokenizer only from --tokenizer or plan.tokenizer. A target on this machine now brings its own."""
    plan = make_plan(echo=lambda s: None)   # the demo: smollm2, no --tokenizer
    mask = next(c for c in plan['checks'] if c['check'] == 'mask token')
    assert mask['ok'] and mask['level'] == 'error' and mask['detail'].startswith('id 16 inside the vocabulary'), mask
