"`tools/compare_runs.py`: two runs' stage outputs, timing fields aside (issue 47: the demo's outputs unchanged by a refactor)."
import hashlib, json, subprocess, sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / 'tools' / 'compare_runs.py'

def _run(root: Path, report: dict) -> Path:
    "A run folder of one stage whose manifest names one JSON output."
    (root / '10_x').mkdir(parents=True)
    out = root / '10_x' / 'report.json'
    out.write_text(json.dumps({**report, 'path': str(root / '10_x')}))
    sha = hashlib.sha256(out.read_bytes()).hexdigest()
    (root / '10_x' / 'manifest.json').write_text(json.dumps({'outputs': [{'path': '10_x/report.json', 'sha256': sha}]}))
    return root

def test_timing_fields_and_the_run_folder_aside_an_output_is_the_same(tmp_path):
    a = _run(tmp_path / 'a', {'rows': 3, 'seconds': 1.5, 'tokens_per_s': 10.0})
    b = _run(tmp_path / 'b', {'rows': 3, 'seconds': 2.5, 'tokens_per_s': 7.0})
    r = subprocess.run([sys.executable, TOOL, a, b], capture_output=True, text=True)
    assert (r.returncode, r.stdout.strip()) == (0, '10_x/report.json: same but for timing fields'), r.stdout
    c = _run(tmp_path / 'c', {'rows': 4, 'seconds': 1.5, 'tokens_per_s': 10.0})
    r = subprocess.run([sys.executable, TOOL, a, c], capture_output=True, text=True)
    assert (r.returncode, r.stdout.strip()) == (1, '10_x/report.json: DIFFERS'), r.stdout
