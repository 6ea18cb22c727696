"""One declaration each (issue 47): the CLI's `--layer-ids` is the `target_layer_ids` declaration of 60_hidden_states, and
the keys of a config's `plan:` section are declared as stage parameters are, and checked the same way."""
import pytest
from dflash_nb.core import ConfigError, PKG_DIR, load_config
from dflash_nb.params import find_stage

def _extract_parser():
    from dflash_nb.cli import build_parser
    p = build_parser()
    hs = next(a for a in p._actions if a.__class__.__name__ == '_SubParsersAction').choices['hidden-states']
    return next(a for a in hs._actions if a.__class__.__name__ == '_SubParsersAction').choices['extract']

def test_layer_ids_option_is_the_declaration():
    decl = find_stage('hidden_states').params['target_layer_ids']
    act = next(a for a in _extract_parser()._actions if '--layer-ids' in a.option_strings)
    assert act.dest == 'target_layer_ids' and act.default == decl.default and decl.help in act.help
    a = _extract_parser().parse_args(['--dataset', 'd', '--target', 't', '--out', 'o', '--layer-ids', '0,2'])
    assert a.target_layer_ids == ['0', '2']
    a = _extract_parser().parse_args(['--dataset', 'd', '--target', 't', '--out', 'o', '--target-layer-ids', '1', '3'])
    assert a.target_layer_ids == ['1', '3']

def test_plan_keys_are_declared_and_checked():
    from dflash_nb.costs import MEM_DEFAULTS, PLAN_DEFAULTS, PLAN_FILES, PLAN_KEYS, plan_assumptions
    assert set(PLAN_KEYS) == {*PLAN_DEFAULTS, *MEM_DEFAULTS, *PLAN_FILES}
    assert all(p.help for p in PLAN_KEYS.values())
    for cfg in sorted((PKG_DIR / 'configs').glob('*.yaml')):   # every shipped plan section: declared keys, allowed values
        section = load_config(cfg).get('plan') or {}
        assert set(section) <= set(PLAN_KEYS), cfg.name
        plan_assumptions(section)
    with pytest.raises(ConfigError, match=r'plan\.mem_headroom: 1\.5 is not allowed'): plan_assumptions({'mem_headroom': 1.5})
    with pytest.raises(ConfigError, match=r'plan\.allow_gated'): plan_assumptions({'allow_gated': 'no'})
    with pytest.raises(ConfigError, match='unknown key plan.gpus'): plan_assumptions({'gpus': 4})
