"The project's nbdev layout: settings keep papermill tags, every stage declares its parameters."
import configparser, json
from pathlib import Path
from dflash_nb.pipeline import discover_stages, parse_parameters

ROOT = Path(__file__).resolve().parents[1]

def test_settings_keep_parameters_tag():
    cfg = configparser.ConfigParser(delimiters=['=']); cfg.read(ROOT / 'settings.ini')
    d = cfg['DEFAULT']
    assert 'tags' in d['allowed_cell_metadata_keys'].split(',')
    assert d['lib_name'] == 'dflash_nb' and 'dflash-nb=dflash_nb.cli:main' in d['console_scripts']
    for pin in ('nbdev==2.4.14', 'fastcore>=1.12.3,<2', 'execnb>=0.1.12,<0.2', 'ghapi<2'):
        assert pin in d['requirements'], pin

def test_stage_notebooks_have_tagged_parameters_and_export_a_module():
    stages = discover_stages()
    assert stages
    for s in stages:
        assert 'run_dir' in s.defaults and s.defaults['run_dir'] is None, s.name
        src = json.loads(s.path.read_text())
        assert any('#| default_exp' in ''.join(c['source']) for c in src['cells']), s.name

def test_notebooks_are_clean():
    for nb in (ROOT / 'nbs').glob('*.ipynb'):
        d = json.loads(nb.read_text())
        for c in d['cells']:
            assert c.get('execution_count') is None, nb.name
            assert set(c.get('metadata', {})) <= {'tags'}, (nb.name, c.get('metadata'))
