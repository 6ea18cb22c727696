"bench/gpu_check.sh: the one-GPU check runs end to end on CPU with tiny shapes, and a section that overruns is boxed."
import json, subprocess, sys, time
import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / 'bench'))
import gpu_check

def test_gpu_check_cpu_tiny(tmp_path):
    out = tmp_path / 'gpu_check.json'
    r = subprocess.run(['bash', str(ROOT / 'bench' / 'gpu_check.sh'), '--device', 'cpu', '--tiny', '--out', str(out)],
                       capture_output=True, text=True, env={**__import__('os').environ, 'PYTHON': sys.executable, 'OMP_NUM_THREADS': '1'},
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res['errors'] == {}, res['errors']
    assert set(res['sections']) == {'env', 'matmul', 'train_step', 'regenerate', 'extract', 'lossless', 'benchmark_step'}
    step = res['sections']['train_step']['runs'][0]
    assert step['finite'] and step['tokens_per_s'] > 0 and step['flop_per_step'] > 0
    assert step['planned_peak_gb'] > 0                                          # the plan's memory model for the same step
    assert res['sections']['regenerate']['generated_tokens'] == 4 * 8          # every row forced to max_new_tokens
    assert res['sections']['extract']['features_shape'] == [2, 32, 2, 64]
    assert res['sections']['lossless']['identical'] is True                  # fp32: speculative == plain greedy

def test_section_time_box():
    t = time.time()
    with pytest.raises(gpu_check.SectionTimeout):
        with gpu_check.time_box(1):
            while True: time.sleep(0.01)
    assert time.time() - t < 5

def test_errors_are_recorded_not_fatal(tmp_path, monkeypatch):
    "A failing section is recorded in `errors`, the others still run, and the JSON is written."
    def boom(a, dev): raise RuntimeError('simulated out of memory')
    monkeypatch.setattr(gpu_check, 'SECTIONS', [('env', gpu_check.sec_env, 30), ('train_step', boom, 10),
                                                ('matmul', gpu_check.sec_matmul, 30)])
    out = tmp_path / 'g.json'
    assert gpu_check.main(['--device', 'cpu', '--tiny', '--out', str(out)]) == 0
    res = json.loads(out.read_text())
    assert 'simulated out of memory' in res['errors']['train_step'] and 'matmul' in res['sections']
