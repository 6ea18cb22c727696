"The Qwen3.6-27B production configuration rehearsed end to end on CPU: tiny hybrid target, real Qwen3.6 tokenizer."
import json
import pytest
from conftest import dflash, ROOT
from dflash_nb.core import fixtures_dir
from dflash_nb.pipeline import discover_stages

@pytest.mark.skipif(fixtures_dir() is None or not (fixtures_dir() / 'tokenizers' / 'qwen3_6').exists(),
                    reason='the rehearsal needs the Qwen3.6 tokenizer and datasets of ../shared/fixtures')
def test_rehearsal_runs_every_stage(tmp_path):
    """The rehearsal config as shipped, on fewer rows and steps (what it checks is the production layout: the hybrid
    target, the real tokenizer, online features, the exported drafter, lossless evaluation, not how much it learns)."""
    r = dflash('run', ROOT / 'configs' / 'qwen3_6_27b_rehearsal.yaml', '--quiet', '--runs-dir', tmp_path,
               '--set', 'sources.total=60', '--set', 'train.max_steps=6', '--set', 'evaluate.max_prompts=1',
               env={'DFLASH_NB_FIXTURES': str(fixtures_dir())})
    run = tmp_path / 'qwen3_6_27b_rehearsal'
    info = json.loads((run / 'run.json').read_text())
    assert info['status'] == 'ok'
    status = {s['stage']: s['status'] for s in info['stages']}
    assert status.pop('60_hidden_states') == 'skipped'          # online features, as in production
    assert set(status.values()) == {'ran'}, status
    target = json.loads((run / '01_targets' / 'target.json').read_text())
    assert target['vocab_size'] == 248320 and target['tokenizer_len'] == 248070
    assert target['layer_types'].count('linear_attention') == 3
    cfg = json.loads((run / '80_train' / 'drafter' / 'config.json').read_text())
    assert cfg['dflash_config']['mask_token_id'] == 248070 and cfg['dflash_config']['target_layer_ids'] == [0, 1, 2]
    assert cfg['block_size'] == 16
    tok = json.loads((run / '50_tokenization' / 'manifest.json').read_text())
    assert tok['counts'].get('rows_out', 1) > 0
    ev = json.loads((run / '90_evaluate' / 'eval.json').read_text())
    rates = {(name, v): m['identical'] for name, r in ev['sets'].items() for v, m in (r.get('variants') or {}).items()}
    assert rates and set(rates.values()) == {1.0}, rates        # lossless on the hybrid target (rollback path)
