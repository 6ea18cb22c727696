"""Interop: every export of a real small run read by the other tool's own code (speculators 0.7.0.1 and 0.9.0,
SpecForge 0.2.0, transformers 4.57.1 and the installed 5.x), each in a small venv built once per cache
(tests/interop_venvs.py)."""
import json, shutil, sys, warnings
from pathlib import Path
import pytest, torch

sys.path.insert(0, str(Path(__file__).parent))
from interop_venvs import run_in, venv_python
from conftest import dflash
from dflash_nb.core import read_json, write_json
from dflash_nb.drafter import DFlashConfig, DFlashDrafter, export_drafter, load_drafter
from dflash_nb.export import export_hub_drafter, export_specforge, export_speculators

N_SAMPLES = 6

def _venv(name):
    try: return venv_python(name)
    except Exception as e: pytest.skip(f'the {name} venv cannot be built here (pip/PyPI): {str(e)[:300]}')

@pytest.fixture(scope='module')
def run(demo_run, tmp_path_factory):
    """A small run with the target's final layer stored: the smoke run's stages, with hidden states re-extracted for
    the first rows with `include_last: true` (speculators needs that layer)."""
    from dflash_nb.hidden_states import ExtractOptions, extract_to_disk
    smoke, _ = demo_run
    r = tmp_path_factory.mktemp('run')
    for s in ('01_targets', '10_sources', '30_convert', '40_regenerate', '50_tokenization', '80_train', '90_evaluate'):
        if (smoke / s).exists(): shutil.copytree(smoke / s, r / s, ignore=shutil.ignore_patterns('*.ipynb'))
    out = r / '60_hidden_states' / 'features'
    opts = ExtractOptions(include_last=True, max_samples=N_SAMPLES, shard_mb=1, max_batch_tokens=8192, max_batch_size=64,
                          label_topk=0)
    res = extract_to_disk(r / '50_tokenization' / 'dataset', 'smollm2', out, opts, progress=False)
    write_json(r / '60_hidden_states' / 'manifest.json', {'stage': '60_hidden_states', 'params': {'include_last': True},
                                                          'counts': {'samples': res['index']['n_samples']}})
    return r

SPEC_READER = r'''
import json, sys, torch
from speculators.train.data import ArrowDataset, CollateFn
path, H, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ds = ArrowDataset(max_len=4096, datapath=path, on_missing="raise")
rows = []
for i in range(len(ds)):
    x = ds[i]
    assert x is not None and not type(x).__name__ == "SampleUnavailable", f"row {i} unavailable"
    rows.append({"ids": x["input_ids"].tolist(), "mask": [int(v) for v in x["loss_mask"].tolist()],
                 "hs": list(x["hidden_states"].shape), "last": list(x["verifier_last_hidden_states"].shape),
                 "hs_sum": float(x["hidden_states"].double().sum()), "last_sum": float(x["verifier_last_hidden_states"].double().sum())})
batch = CollateFn(max_len=4096, hidden_size=H, num_target_layers=n)([ds[0], ds[1]])
out = {"n": len(ds), "rows": rows, "batch": {k: list(v.shape) for k, v in batch.items() if hasattr(v, "shape")}}
try:
    import numpy as np
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution
    tf = torch.load(path + "/token_freq.pt", weights_only=True)
    d2t, t2d = build_vocab_mappings_from_distribution(tf, int(sys.argv[4]), int(sys.argv[5]))
    out["d2t"], out["t2d"] = d2t.tolist(), int(t2d.sum())
except ImportError: pass
print("JSON" + json.dumps(out))
'''

def _json(stdout): return json.loads(stdout.split('JSON', 1)[1])

@pytest.mark.parametrize('version,venv', [('0.7', 'spec07'), ('0.9', 'spec09')])
def test_speculators_reads_export(run, tmp_path, version, venv):
    import numpy as np
    from datasets import load_from_disk
    from dflash_nb.features import FeatureStore
    _venv(venv)
    out = tmp_path / f'spec{version}'
    s = export_speculators(run, out, version=version)
    store = FeatureStore(run / '60_hidden_states' / 'features')
    n, H = len(store.layer_ids), store.hidden_size
    assert s['rows'] == N_SAMPLES and s['rows'] + s['skipped'] == s['rows_in']
    K, V = s['draft_vocab_size'], s['target_vocab_size']
    d2t_name = 'd2t.npy' if version == '0.7' else f'd2t-{K}.npy'
    assert (out / d2t_name).exists() and (out / 'token_freq.pt').exists()
    got = _json(run_in(venv, SPEC_READER, out, H, n, K, V))
    assert got['n'] == N_SAMPLES                                     # every exported row available (on_missing="raise")
    ds = load_from_disk(str(run / '50_tokenization' / 'dataset'))
    ours = {str(r['id']): r for r in ds}
    for sid, g in zip(store.ids, got['rows']):
        f, r = store[sid], ours[sid]
        assert g['ids'] == list(r['input_ids']) and g['mask'] == list(r['loss_mask'])
        T = len(r['input_ids'])
        assert g['hs'] == [T, n * H] and g['last'] == [T, H]
        assert g['hs_sum'] == pytest.approx(float(f['hidden_states'].double().sum()), rel=1e-6)
        assert g['last_sum'] == pytest.approx(float(f['last_hidden'].double().sum()), rel=1e-6)
    assert got['batch']['hidden_states'] == [1, 4096, n * H] and got['batch']['verifier_last_hidden_states'] == [1, 4096, H]
    if 'd2t' in got:                                                 # the mapping speculators itself would build
        assert got['d2t'] == np.load(out / d2t_name).tolist() and got['t2d'] == K

def test_speculators_export_needs_last_layer(demo_run, tmp_path):
    smoke, _ = demo_run
    with pytest.raises(ValueError, match='include_last: true'): export_speculators(smoke, tmp_path / 'x')
    assert not (tmp_path / 'x').exists()

SF_READER = r'''
import json, sys, os
from specforge.runtime.data_plane.offline_reader import list_feature_files
from specforge.runtime.data_plane.feature_store import load_feature_file
from specforge.data.preprocessing import process_offline_dflash_sample
files = list_feature_files(sys.argv[1] + "/features")
rows = {}
for f in files:
    x = process_offline_dflash_sample(load_feature_file(f), max_len=4096)
    rows[os.path.basename(f)] = {"ids": x["input_ids"][0].tolist(), "mask": x["loss_mask"][0].tolist(),
                                 "hs": list(x["hidden_states"].shape), "sum": float(x["hidden_states"].double().sum())}
out = {"rows": rows}
from datasets import load_dataset
from transformers import AutoTokenizer
from specforge.data.preprocessing import build_eagle3_dataset
conv = load_dataset("json", data_files=sys.argv[1] + "/train.jsonl")["train"]
tok = AutoTokenizer.from_pretrained(sys.argv[2])
ds = build_eagle3_dataset(conv, tok, chat_template=sys.argv[3], max_length=4096, num_proc=None, cache_dir=sys.argv[1] + "/_cache", cache_key="dflash_nb")
out["jsonl"] = {"rows": len(conv), "tokenized": len(ds), "supervised": [int(r["loss_mask"].sum()) for r in ds]}
print("JSON" + json.dumps(out))
'''

def test_specforge_reads_export(run, tmp_path):
    from dflash_nb.features import FeatureStore
    from dflash_nb.models import resolve_target
    _venv('spec09')
    out = tmp_path / 'sf'
    s = export_specforge(run, out)
    assert s['chat_template'] == 'qwen' and s['samples'] + s['skipped'] == s['rows_in']
    store = FeatureStore(run / '60_hidden_states' / 'features')
    try: got = _json(run_in('spec09', SF_READER, out, resolve_target('smollm2'), s['chat_template']))
    except AssertionError as e:
        if 'build_eagle3_dataset' not in str(e) and 'JSON' not in str(e): raise
        pytest.fail(f"SpecForge's JSONL reader failed on our train.jsonl: {str(e)[-1500:]}")
    assert len(got['rows']) == s['samples'] == N_SAMPLES
    for i, sid in enumerate(store.ids):
        f, g = store[sid], got['rows'][f'data_{i}.ckpt']
        assert g['ids'] == f['input_ids'].tolist() and g['mask'] == f['loss_mask'].tolist()
        assert g['hs'] == [1, len(f['input_ids']), len(store.layer_ids) * store.hidden_size]
        assert g['sum'] == pytest.approx(float(f['hidden_states'].double().sum()), rel=1e-6)
    j = got['jsonl']
    assert j['rows'] == s['conversations'] and j['tokenized'] >= 1 and all(x >= 2 for x in j['supervised'])
    # train.jsonl is the tokenized conversations, whole: system / tool turns, tool calls, tools and reasoning kept
    from dflash_nb.core import iter_jsonl
    from dflash_nb.schema import to_speculators
    src = {r['id']: r for r in iter_jsonl(run / '40_regenerate' / 'regenerated.jsonl')}
    rows = list(iter_jsonl(out / 'train.jsonl'))
    assert rows and all(r == to_speculators(src[r['id']]) for r in rows)

HUB_CHECK = r'''
import json, sys, torch, transformers
from transformers import AutoModel, AutoModelForCausalLM
def hub_check(path, target_dir, inputs, n_prompts):
    draft = AutoModel.from_pretrained(path, trust_remote_code=True, dtype=torch.float32).eval()
    x = torch.load(inputs, weights_only=True)
    with torch.no_grad():
        h = draft(position_ids=x["pos"], noise_embedding=x["noise"], target_hidden=x["feat"])
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    res = []
    for p in x["prompts"][:n_prompts]:
        ids = torch.tensor([p])
        ref = target.generate(ids, max_new_tokens=24, do_sample=False, eos_token_id=x["eos"], pad_token_id=x["eos"])
        out, st = draft.spec_generate(input_ids=ids, max_new_tokens=24, temperature=0.0, target=target,
                                      stop_token_ids=[x["eos"]], return_stats=True)
        res.append({"same": out.tolist() == ref.tolist(), "tau": st["tau"], "n": out.shape[1] - ids.shape[1]})
    return {"version": transformers.__version__, "class": type(draft).__name__,
            "diff": float((h - x["ref"]).abs().max()), "gen": res}
if __name__ == "__main__":
    print("JSON" + json.dumps(hub_check(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))))
'''

def _hub_inputs(drafter, tmp_path, prompts, eos):
    cfg = drafter.config
    g = torch.Generator().manual_seed(0)
    T, B = 7, cfg.block_size
    feat = torch.randn(1, T, cfg.n_features * cfg.hidden_size, generator=g)
    noise = torch.randn(1, B, cfg.hidden_size, generator=g)
    with torch.no_grad(): ref = drafter(noise, feat, torch.arange(T)[None], torch.arange(T, T + B)[None])
    p = tmp_path / 'inputs.pt'
    torch.save({'pos': torch.arange(T + B)[None], 'noise': noise, 'feat': feat, 'ref': ref, 'prompts': prompts, 'eos': eos}, p)
    return p

def test_hub_drafter_loads_and_decodes_losslessly(run, tmp_path):
    from dflash_nb.models import load_tokenizer, resolve_target
    out = tmp_path / 'hub'
    r = dflash('export', 'drafter', run, out)
    assert '"num_speculative_tokens": 15' in r.stdout and '--speculative-num-draft-tokens 16' in r.stdout
    cj = read_json(out / 'config.json')
    assert cj['auto_map'] == {'AutoModel': 'modeling_dflash.DFlashDraftModel'} and (out / 'modeling_dflash.py').exists()
    assert cj['eos_token_id'] == 2 and cj['bos_token_id'] == 1 and cj['dflash_config']['causal'] is False and cj['is_causal'] is False
    assert '/root' not in (out / 'config.json').read_text() and 'dflash_nb_target' not in cj
    card = (out / 'README.md').read_text()
    assert 'base_model: HuggingFaceTB/SmolLM2-135M-Instruct' in card and '## Evaluation' in card and 'license:' in card
    assert sorted(p.name for p in out.iterdir()) == ['README.md', 'config.json', 'model.safetensors', 'modeling_dflash.py']
    ours = load_drafter(out)                       # our loader reads the hub folder too
    tok = load_tokenizer('smollm2')
    prompts = [tok.apply_chat_template([{'role': 'user', 'content': q}], add_generation_prompt=True)
               for q in ('What is the capital of France?', 'Write a Python function that adds two numbers.')]
    prompts = [list(p['input_ids'] if isinstance(p, dict) or hasattr(p, 'keys') else p) for p in prompts]
    inputs = _hub_inputs(ours, tmp_path, prompts, tok.eos_token_id)
    ns = {}
    exec(compile(HUB_CHECK, 'hub_check', 'exec'), ns)        # transformers 5.x, in this process
    for venv in ('main', 'spec07'):                          # and 4.57.1 in the spec07 venv (one prompt)
        if venv == 'main': got = ns['hub_check'](out, resolve_target('smollm2'), inputs, 2)
        else:
            _venv('spec07')
            got = _json(run_in('spec07', HUB_CHECK, out, resolve_target('smollm2'), inputs, 1))
            assert got['version'].startswith('4.57')
        assert got['class'] == 'DFlashDraftModel' and got['diff'] < 1e-4, got
        assert all(g['same'] for g in got['gen']), got           # spec_generate == the target's greedy decoding
        print(venv, got['version'], 'tau', [g['tau'] for g in got['gen']])

def _tiny_run(tmp_path, **cfg_kw):
    "A run folder holding only a (random) drafter of `cfg_kw` as its 80_train output."
    cfg = DFlashConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                       vocab_size=96, num_target_layers=4, target_layer_ids=[0, 2], mask_token_id=95, num_hidden_layers=2,
                       block_size=4, **cfg_kw)
    r = tmp_path / 'run'
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        export_drafter(DFlashDrafter(cfg).init_weights(0), r / '80_train' / 'drafter', dtype='float32')
    write_json(r / '80_train' / 'manifest.json', {'stage': '80_train', 'params': {'target': 'Org/Some-Model'}})
    return r

def test_hub_export_refuses_engine_mismatch(tmp_path):
    r = _tiny_run(tmp_path, layer_types=['sliding_attention', 'full_attention'], sliding_window=3, sliding_window_causal=False)
    cj = read_json(r / '80_train' / 'drafter' / 'config.json')
    assert cj['dflash_config']['causal'] is False                # vLLM then serves every layer bidirectionally, as trained
    with pytest.raises(ValueError, match='SGLang serves sliding_attention layers causally'):
        export_hub_drafter(r, tmp_path / 'hub', echo=lambda m: None)
    assert not (tmp_path / 'hub').exists()
    with pytest.warns(UserWarning):
        res = export_hub_drafter(r, tmp_path / 'hub', allow_engine_mismatch=True, echo=lambda m: None)
    assert res['base_model'] == 'Org/Some-Model' and 'SGLang' in (tmp_path / 'hub' / 'README.md').read_text()
    # a causal sliding + full mix carries no global switch: vLLM's per-layer default is the trained behaviour
    r2 = _tiny_run(tmp_path / 'b', layer_types=['sliding_attention', 'full_attention'], sliding_window=3)
    assert 'causal' not in read_json(r2 / '80_train' / 'drafter' / 'config.json')['dflash_config']

def test_hub_model_matches_ours_with_sliding_layers(tmp_path):
    "The standalone model file gives our drafter's outputs for a sliding + full drafter too (in-process, 5.x)."
    from transformers import AutoModel
    from dflash_nb.drafter import DraftCache, inference_masks
    r = _tiny_run(tmp_path, layer_types=['sliding_attention', 'full_attention'], sliding_window=3)
    export_hub_drafter(r, tmp_path / 'hub', echo=lambda m: None)
    hub = AutoModel.from_pretrained(tmp_path / 'hub', trust_remote_code=True, dtype=torch.float32).eval()
    ours = load_drafter(tmp_path / 'hub')
    g = torch.Generator().manual_seed(1)
    feat, noise = torch.randn(1, 6, 64, generator=g), torch.randn(1, 4, 32, generator=g)
    ctx, blk = torch.arange(6)[None], torch.arange(6, 10)[None]
    with torch.no_grad():
        a = ours(noise, feat, ctx, blk, inference_masks(ours.config, ctx, 6), cache=DraftCache())
        b = hub(position_ids=torch.cat([ctx, blk], 1), noise_embedding=noise, target_hidden=feat)
    assert (a - b).abs().max() < 1e-5

CONVERT = r'''
import sys
from speculators.convert.dflash.converter import DFlashConverter
DFlashConverter().convert(sys.argv[1], sys.argv[2], base_model=sys.argv[3], validate=False)
print("JSONnull")
'''

def test_load_drafter_reads_speculators_conversion(run, tmp_path):
    "speculators' own DFlashConverter turns our drafter folder into its format; load_drafter reads that back unchanged."
    from dflash_nb.models import resolve_target
    _venv('spec09')
    src = run / '80_train' / 'drafter'
    run_in('spec09', CONVERT, src, tmp_path / 'conv', resolve_target('smollm2'))
    cj = read_json(tmp_path / 'conv' / 'config.json')
    assert cj.get('speculators_model_type') == 'dflash'
    a, b = load_drafter(src), load_drafter(tmp_path / 'conv')
    assert b.source_format == 'speculators' and b.config.target_layer_ids == a.config.target_layer_ids
    assert b.config.block_size == a.config.block_size and b.config.mask_token_id == a.config.mask_token_id
    for (k, x), (k2, y) in zip(sorted(a.state_dict().items()), sorted(b.state_dict().items())):
        assert k == k2 and torch.equal(x, y), k
