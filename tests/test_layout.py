"The project's nbdev layout: settings keep papermill tags, every stage declares its parameters."
import configparser, json
from pathlib import Path
from dflash_nb.pipeline import discover_stages

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

def test_notebook_defaults_are_the_demo_values():
    "Each stage notebook's defaults equal the embedded demo's values, so a notebook run alone reuses the demo's smoke run."
    from dflash_nb.core import load_config
    from dflash_nb.pipeline import check_config
    stages = discover_stages()
    params = check_config(load_config(), stages)
    for s in stages:
        defaults = {k: v for k, v in s.defaults.items() if k != 'run_dir'}
        assert defaults == params[s.name], (s.name, {k: (defaults.get(k), params[s.name].get(k)) for k in defaults if defaults.get(k) != params[s.name].get(k)})

def test_shipped_configs_check():
    "Every shipped run config names only known stages and declared parameters."
    from dflash_nb.core import load_config, PKG_DIR
    from dflash_nb.pipeline import check_config
    for p in sorted((PKG_DIR / 'configs').glob('*.yaml')):
        check_config(load_config(p), discover_stages())


def test_papermill_parses_every_parameter():
    "papermill reads each `name: type = value  # help` line of a parameters cell; one it cannot parse ('=' in the comment) is warned about as unknown."
    from papermill.translators import PythonTranslator
    NBS = Path(__file__).resolve().parents[1] / 'nbs'
    bad = {}
    for nb in sorted(NBS.glob('*.ipynb')):
        for c in json.loads(nb.read_text())['cells']:
            if 'parameters' not in c.get('metadata', {}).get('tags', []): continue
            src = ''.join(c['source'])
            names = {p.name for p in PythonTranslator.inspect({'source': src})}
            want = {l.split('=')[0].split(':')[0].strip() for l in src.splitlines() if l[:1].isalpha() and '=' in l}
            if want - names: bad[nb.name] = sorted(want - names)
    assert not bad, bad
