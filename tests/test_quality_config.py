"configs/smollm2_quality.yaml: a valid chain config that self-distils, keeps eval prompts out of training and evaluates as the issue asks."
import json, re
from dflash_nb.core import PKG_DIR, load_config, read_prompt_file
from dflash_nb.pipeline import check_config, discover_stages
from dflash_nb.sources import REGISTRY

CFG = PKG_DIR / 'configs' / 'smollm2_quality.yaml'
UNSEEN = PKG_DIR / 'data' / 'unseen_prompts.jsonl'

def test_quality_config_resolves():
    p = check_config(load_config(CFG), discover_stages())   # every key is a real stage parameter
    reg, train, ev = p['40_regenerate'], p['80_train'], p['90_evaluate']
    assert (reg['select'], reg['mode'], reg['temperature']) == ('all', 'all', 0.0)   # every turn by the target, greedy
    assert reg['max_new_tokens'] == ev['max_new_tokens'] == 128 and ev['temperature'] == 0.0
    srcs = p['10_sources']['sources']
    assert not [s for s in srcs if REGISTRY[s].category == 'eval' or re.search('mt.?bench|humaneval', s)]
    assert train['keep_checkpoints'] >= 4 and train['max_steps'] // train['ckpt_every'] >= 4
    assert ev['max_prompts'] >= 20 and {'mt_bench', 'humaneval'} <= set(ev['prompt_sets'])
    assert {'trained', 'untrained', 'zeroed', 'served_late', 'prompt_lookup'} <= set(ev['variants'])
    assert [f.endswith('unseen_prompts.jsonl') for f in ev['prompt_files']] == [True]
    from dflash_nb.core import expand_path
    from pathlib import Path
    assert all(Path(expand_path(f)).is_file() for f in ev['prompt_files'])   # the stage reads them (pkg: = dflash_nb/data)

def test_unseen_prompts():
    recs = read_prompt_file(UNSEEN)
    assert len(recs) >= 20 and len({r['id'] for r in recs}) == len(recs)
    texts = [r['messages'][-1]['content'] for r in recs]
    assert all(len(t) > 20 for t in texts) and len(set(texts)) == len(texts)

def test_quality_training_length_binds():
    "max_steps ends the training, not epochs: even if only half the prompts became training rows (1,829 of 2,000 did)."
    import math
    p = check_config(load_config(CFG), discover_stages())
    train, rows = p['80_train'], p['10_sources']['total'] // 2
    assert train['epochs'] * math.ceil(rows / train['batch_size'] / train['grad_accum']) >= train['max_steps']
