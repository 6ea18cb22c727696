"bench/gpu_quality.sh: the quality chain's one-GPU run goes end to end on CPU with tiny sizes, every stage through `run_chain`."
import json, os, subprocess, sys
import pytest
from conftest import ROOT

STAGES = ['01_targets', '10_sources', '20_templates', '30_convert', '40_regenerate', '50_tokenization', '60_hidden_states',
          '80_train', '90_evaluate']

def test_gpu_quality_cpu_tiny(tmp_path):
    from dflash_nb.core import fixtures_dir
    if fixtures_dir() is None: pytest.skip('the quality config reads the fixture data (DFLASH_NB_FIXTURES)')
    out = tmp_path / 'gpu_quality.json'
    r = subprocess.run(['bash', str(ROOT / 'bench' / 'gpu_quality.sh'), '--device', 'cpu', '--tiny', '--out', str(out)],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, 'PYTHON': sys.executable, 'OMP_NUM_THREADS': '1', 'DFLASH_NB_FIXTURES': str(fixtures_dir())})
    assert out.exists(), r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res['errors'] == {}, (res['errors'], r.stdout[-3000:] + r.stderr[-3000:])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert {'started', 'device', 'target', 'overrides', 'stages', 'summary', 'plan', 'errors', 'seconds'} <= set(res)
    dev = res['device']
    assert dev['device'] == 'cpu' and dev['name'] and isinstance(dev['flags'], list)
    assert dev['matmul_gflops']['gflops']['float32'] > 0 and 'bfloat16' in dev['matmul_gflops']['gflops']
    assert list(res['stages']) == STAGES                                       # every stage of the chain, in order
    for name, st in res['stages'].items():
        assert st['status'] == 'ran' and st['seconds'] > 0, (name, st)
        assert 'predicted_minutes' in st and 'plan_gpu_minutes' in st
    assert set(res['plan']['predicted_minutes']) == set(STAGES)                # costs.predict_minutes, beside each stage
    assert all(res['stages'][k]['predicted_minutes'] == v for k, v in res['plan']['predicted_minutes'].items())
    reg, tr, ev = (res['stages'][k] for k in ('40_regenerate', '80_train', '90_evaluate'))
    assert reg['backend'] == 'hf' and reg['decoder'].startswith('greedy_decode')     # the stage's loop, not generate
    assert reg['tokens_per_s'] > 0 and reg['new_tokens'] > 0
    assert tr['steps'] == 8 and tr['steps_per_s'] > 0                              # train.max_steps binds in --tiny
    assert 'train.max_steps=8' in res['overrides'] and any(o.startswith('sources.quotas=') for o in res['overrides'])
    s = res['summary']
    assert set(s['tau']) == {'mt_bench', 'humaneval', 'unseen_prompts'} == set(ev['sets'])
    assert all(t >= 1 for t in s['tau'].values())                                  # accepted tokens per cycle
    assert all(v > 0 for v in s['tokens_per_s'].values()) and all(v > 0 for v in s['plain_tokens_per_s'].values())
    assert all(v == 1.0 for v in s['identical'].values())                          # fp32 on CPU: speculative == plain
    assert s['train_steps'] == 8 and s['regenerate_tokens_per_s'] == reg['tokens_per_s']
