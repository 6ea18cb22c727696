"Hidden-state extraction: layer convention, padding, validation, resume after a crash, 2-process sharding."
import dataclasses, json, os, shutil, subprocess, sys
from pathlib import Path

import pytest
import torch

from dflash_nb import hidden_states as H, features as F
from dflash_nb.core import from_aux_layer_ids, to_aux_layer_ids
from dflash_nb.models import decoder_layers, load_target

ROOT = Path(__file__).resolve().parents[1]

@pytest.fixture(scope='module')
def tiny():
    return load_target('tiny-qwen3')

def _hook_reference(model, ids):
    "Each decoder layer's output and the final norm's output via forward hooks, plus the model's own hidden_states."
    dec, layers = decoder_layers(model)
    outs = {}
    def hook(k):
        def f(mod, args, out): outs[k] = (out[0] if isinstance(out, tuple) else out).detach().clone()
        return f
    hs = [l.register_forward_hook(hook(i)) for i, l in enumerate(layers)] + [dec.norm.register_forward_hook(hook('norm'))]
    try:
        with torch.inference_mode(): res = model(ids, output_hidden_states=True)
    finally:
        for h in hs: h.remove()
    return outs, res.hidden_states

@pytest.mark.parametrize('spec', ['tiny-qwen3', 'tiny-qwen3_5', 'smollm2'])
def test_layer_convention(spec):
    model, _ = load_target(spec)
    N = model.config.num_hidden_layers
    ids = torch.randint(5, model.config.vocab_size, (2, 11), generator=torch.Generator().manual_seed(1))
    outs, hs = _hook_reference(model, ids)
    assert len(hs) == N + 1
    for L in range(N - 1):   # DFlash id L == output of decoder layer L == hidden_states[L+1]
        assert torch.equal(hs[L + 1], outs[L]), L
    assert torch.equal(hs[N], outs['norm']) and not torch.allclose(hs[N], outs[N - 1])   # last entry is post-norm
    layer_ids = list(range(N))
    feats, last = F.extract_features(model, ids, layer_ids, include_last=True)
    assert feats.shape == (2, 11, N, model.config.hidden_size)
    for j, L in enumerate(layer_ids): assert torch.equal(feats[:, :, j], outs[L]), L
    assert torch.equal(last, outs[N - 1])
    # the default ids, and the aux convention round trip
    d = H.resolve_layer_ids(N)
    f = F.extract_features(model, ids, d)
    for j, L in enumerate(d): assert torch.equal(f[:, :, j], hs[L + 1])
    assert from_aux_layer_ids(to_aux_layer_ids(d)) == d and to_aux_layer_ids(d) == [L + 1 for L in d]

def test_early_stop_skips_upper_layers(tiny):
    model, _ = tiny
    dec, layers = decoder_layers(model)
    ran = []
    hs = [l.register_forward_pre_hook(lambda m, a, i=i: ran.append(i)) for i, l in enumerate(layers)]
    hs.append(dec.norm.register_forward_pre_hook(lambda m, a: ran.append('norm')))
    try: F.extract_features(model, torch.tensor([[5, 6, 7]]), [0, 1])
    finally:
        for h in hs: h.remove()
    assert ran == [0, 1]

@pytest.mark.parametrize('spec', ['tiny-qwen3', 'tiny-qwen3_5'])
def test_right_padded_batch_equals_unbatched(spec):
    model, _ = load_target(spec)
    g = torch.Generator().manual_seed(2)
    rows = [{'input_ids': torch.randint(5, model.config.vocab_size, (n,), generator=g).tolist()} for n in (70, 3, 33, 129)]
    x, am, lens = H.collate(rows)
    assert am.sum(1).tolist() == lens and (x[1, 3:] == 0).all()
    fb, lb = F.extract_features(model, x, [0, 2], attention_mask=am, include_last=True)
    for j, r in enumerate(rows):
        f1, l1 = F.extract_features(model, torch.tensor([r['input_ids']]), [0, 2], include_last=True)
        scale = f1.abs().max()
        assert ((fb[j, :lens[j]] - f1[0]).abs().max() / scale) < 1e-5, (spec, j)
        assert ((lb[j, :lens[j]] - l1[0]).abs().max() / l1.abs().max()) < 1e-5, (spec, j)

def test_online_features_train(tiny):
    "The online path: features feed a trainable layer (not inference tensors) and gradients flow."
    model, _ = tiny
    f = F.extract_features(model, torch.tensor([[5, 6, 7, 8]]), [0, 1, 2])
    assert not f.is_inference() and not f.requires_grad
    fc = torch.nn.Linear(3 * model.config.hidden_size, 8)
    fc(f.flatten(2)).sum().backward()
    assert fc.weight.grad is not None and torch.isfinite(fc.weight.grad).all()

def _opts(**kw):
    "The settings these tests were written with (whole-row batches up to 8192 tokens x 64 rows, no labels), and `kw`."
    return H.ExtractOptions(**{'max_batch_tokens': 8192, 'max_batch_size': 64, 'label_topk': 0, **kw})

def _synth(tiny, n=12, seed=0):
    return H.synthetic_dataset(tiny[1], n=n, seed=seed)

def _store_tensors(path):
    s = F.FeatureStore(path)
    return {sid: s[sid] for sid in s.ids}

def test_store_roundtrip_and_values(tiny, tmp_path):
    model, tok = tiny
    ds = _synth(tiny)
    res = H.extract_to_disk(ds, 'tiny-qwen3', tmp_path / 'features',
                            _opts(layer_ids=[0, 1, 3], include_last=True, storage_dtype='float32', shard_mb=0.05),
                            model=model, ranks=(0, 1), progress=False)
    idx = res['index']
    assert idx['n_samples'] == len(ds) and idx['n_quarantined'] == 0 and len(idx['shards']) > 1
    assert idx['target_layer_ids'] == [0, 1, 3] and idx['aux_layer_ids'] == [1, 2, 4] and idx['include_last']
    s = F.FeatureStore(tmp_path)          # accepts the stage folder's parent layout too
    assert len(s) == len(ds) and s.ids == list(ds['id'])
    for row in ds:
        got = s[row['id']]
        assert got['input_ids'].tolist() == row['input_ids'] and got['loss_mask'].tolist() == row['loss_mask']
        f, l = F.extract_features(model, torch.tensor([row['input_ids']]), [0, 1, 3], include_last=True)
        assert torch.allclose(got['hidden_states'], f[0], atol=1e-5) and torch.allclose(got['last_hidden'], l[0], atol=1e-5)
    assert [d['id'] for d in s] == s.ids and s[0]['id'] == s.ids[0]
    with pytest.raises(KeyError): s['nope']
    stats = json.loads((tmp_path / 'features' / 'stats.json').read_text())
    assert [l['name'] for l in stats['layers']] == ['layer0', 'layer1', 'layer3', 'last'] and all(l['mean_norm'] > 0 for l in stats['layers'])
    H.plot_layer_norms(stats, tmp_path / 'norms.png'); assert (tmp_path / 'norms.png').stat().st_size > 1000
    # a missing shard is noticed when the store opens
    (tmp_path / 'features' / idx['shards'][0]['name']).unlink()
    with pytest.raises(FileNotFoundError, match='missing'): F.FeatureStore(tmp_path / 'features')

def test_validation_quarantines_bad_rows(tiny, tmp_path, monkeypatch):
    from datasets import Dataset
    model, tok = tiny
    rows = list(_synth(tiny, n=10))
    V = model.config.vocab_size
    rows[1]['input_ids'] = rows[1]['input_ids'][:-1] + [V + 5]              # token outside the vocabulary
    rows[2]['loss_mask'] = rows[2]['loss_mask'][:-1]                          # mask length mismatch
    rows[3]['seq_len'] += 1                                                   # seq_len disagrees
    rows[4]['id'] = rows[0]['id']                                             # duplicate id
    NAN_TOK, ZERO_TOK, BIG_TOK = V - 1, V - 2, V - 3     # ids the tokenizer never produces
    rows[5]['input_ids'][0] = NAN_TOK; rows[6]['input_ids'][0] = ZERO_TOK; rows[7]['input_ids'][0] = BIG_TOK
    ds = Dataset.from_list(rows)
    dec, layers = decoder_layers(model)
    state = {}
    def grab(m, args, kwargs): state['ids'] = kwargs['input_ids']
    def corrupt(m, args, out):   # fault injection inside layer 1, keyed by each sample's first token
        out = out.clone()
        for b in range(out.shape[0]):
            t = int(state['ids'][b, 0])
            if t == NAN_TOK: out[b, 2] = float('nan')
            if t == ZERO_TOK: out[b, 1] = 0
            if t == BIG_TOK: out[b, 0] = 1e6        # overflows float16 storage -> inf
        return out
    real_collate = H.collate
    def bad_collate(rs):                          # a collation bug: the model sees other ids for one sample
        x, am, lens = real_collate(rs)
        for j, r in enumerate(rs):
            if r['id'] == rows[8]['id']: x[j, 1] = (x[j, 1] + 1) % V
        return x, am, lens
    monkeypatch.setattr(H, 'collate', bad_collate)
    h1 = dec.register_forward_pre_hook(grab, with_kwargs=True); h2 = layers[1].register_forward_hook(corrupt)
    try:
        res = H.extract_to_disk(ds, 'tiny-qwen3', tmp_path / 'f', _opts(layer_ids=[1, 2], storage_dtype='float16'),
                                model=model, ranks=(0, 1), progress=False)
    finally: h1.remove(); h2.remove()
    idx = res['index']
    q = [json.loads(l) for l in (tmp_path / 'f' / 'quarantine.jsonl').read_text().splitlines()]
    kinds = {r['row']['index']: r['reason'] for r in q}
    assert kinds[1].startswith('token_range') and kinds[2].startswith('mask_length') and kinds[3].startswith('seq_len')
    assert kinds[4].startswith('duplicate_id')
    assert kinds[5].startswith('nonfinite') and 'layer1' in kinds[5]
    assert kinds[6].startswith('zero: 1 all-zero') and 'layer1' in kinds[6]
    assert kinds[7].startswith('nonfinite') and 'layer1' in kinds[7]     # finite in fp32, inf once stored as fp16
    assert kinds[8].startswith('ids_mismatch')
    assert sorted(kinds) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert idx['n_samples'] == 2 and idx['n_samples'] + idx['n_quarantined'] == len(rows)
    assert set(F.FeatureStore(tmp_path / 'f').ids) == {rows[0]['id'], rows[9]['id']}

def test_refuses_when_disk_is_full(tiny, tmp_path, monkeypatch):
    model, _ = tiny
    monkeypatch.setattr(H.shutil, 'disk_usage', lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 100, 100))
    with pytest.raises(H.InsufficientDiskError, match='B/token'):
        H.extract_to_disk(_synth(tiny), 'tiny-qwen3', tmp_path / 'f', _opts(layer_ids=[0, 1]), model=model, ranks=(0, 1))
    assert not (tmp_path / 'f' / 'plan.json').exists()

class Crash(Exception): pass

def test_resume_after_crash_equals_uninterrupted(tiny, tmp_path):
    model, _ = tiny
    ds = _synth(tiny, n=14)
    opts = _opts(layer_ids=[0, 2], include_last=True, shard_mb=0.04, label_topk=3)
    kw = dict(model=model, ranks=(0, 1), progress=False)
    ref = H.extract_to_disk(ds, 'tiny-qwen3', tmp_path / 'a', opts, **kw)['index']
    n_shards = len(ref['shards']); assert n_shards >= 4
    out = tmp_path / 'b'
    def crash(k):
        if k == 1: raise Crash(f'killed after shard {k}')
    with pytest.raises(Crash): H.extract_to_disk(ds, 'tiny-qwen3', out, opts, on_shard=crash, **kw)
    assert not (out / 'index.json').exists()
    done = sorted(p.name for p in out.glob('shard-*.json')); assert done == ['shard-00000.json', 'shard-00001.json']
    mtimes = {p.name: p.stat().st_mtime_ns for p in out.glob('shard-*')}
    # a partial shard: its tensors written, its record not; plus a stray temporary file
    shutil.copy(tmp_path / 'a' / 'shard-00002.safetensors', out / 'shard-00002.safetensors')
    (out / '.shard-00003.safetensors.tmp').write_bytes(b'partial')
    res = H.extract_to_disk(ds, 'tiny-qwen3', out, opts, **kw)
    assert res['summary']['shards_skipped'] == 2 and res['summary']['shards_done'] == n_shards - 2
    assert all((out / n).stat().st_mtime_ns == t for n, t in mtimes.items())     # completed shards kept as they were
    assert not list(out.glob('.*.tmp'))
    idx = res['index']
    assert idx['samples'] == ref['samples'] and idx['shards'] == ref['shards']
    a, b = _store_tensors(tmp_path / 'a'), _store_tensors(out)
    assert a.keys() == b.keys()
    for sid in a:
        for k in ('hidden_states', 'last_hidden', 'input_ids', 'loss_mask', 'target_ids', 'target_logp'):
            assert torch.equal(a[sid][k], b[sid][k]), (sid, k)
    # other settings: stale shards are replaced, not mixed
    res2 = H.extract_to_disk(ds, 'tiny-qwen3', out, dataclasses.replace(opts, layer_ids=[1, 2]), **kw)
    assert res2['index']['target_layer_ids'] == [1, 2] and res2['summary']['shards_skipped'] == 0

def test_two_process_sharding_with_torchrun(tiny, tmp_path):
    "torchrun with 2 CPU processes (gloo) through the CLI: each rank writes its shards, rank 0 merges one index."
    model, tok = tiny
    ds_dir = tmp_path / 'dataset'
    ds = H.synthetic_dataset(tok, n=14, seed=3, path=ds_dir)
    exe = shutil.which('dflash-nb') or str(Path(sys.executable).parent / 'dflash-nb')
    args = ['--dataset', ds_dir, '--target', 'tiny-qwen3', '--layer-ids', '0,2', '--shard-mb', '0.03',
            '--device', 'cpu', '--max-batch-tokens', '256', '--max-batch-size', '64', '--label-topk', '0']
    env = {**os.environ, 'OMP_NUM_THREADS': '1'}
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc-per-node', '2',
           exe, 'hidden-states', 'extract', *args, '--out', tmp_path / 'dist']
    r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    recs = [json.loads(p.read_text()) for p in sorted((tmp_path / 'dist').glob('shard-*.json'))]
    assert len(recs) >= 4 and {x['rank'] for x in recs} == {0, 1}
    assert all(x['rank'] == x['shard'] % 2 for x in recs)
    single = H.extract_to_disk(ds_dir, 'tiny-qwen3', tmp_path / 'one', _opts(layer_ids=[0, 2], shard_mb=0.03, max_batch_tokens=256),
                               model=model, ranks=(0, 1), progress=False)['index']
    dist_idx = json.loads((tmp_path / 'dist' / 'index.json').read_text())
    assert dist_idx['samples'] == single['samples'] and dist_idx['n_samples'] == len(ds)
    a, b = _store_tensors(tmp_path / 'one'), _store_tensors(tmp_path / 'dist')
    for sid in a: assert torch.equal(a[sid]['hidden_states'], b[sid]['hidden_states']), sid


def _greedy_rows(model, tok, prompts, new_tokens):
    "Rows whose answers the model wrote itself: greedy, one prompt at a time (no padding), in the model's dtype."
    from datasets import Dataset
    rows = []
    for i, q in enumerate(prompts):
        p = tok.apply_chat_template([{'role': 'user', 'content': q}], add_generation_prompt=True, return_dict=True)['input_ids']
        with torch.inference_mode():
            out = model.generate(torch.tensor([p]), max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                                 pad_token_id=tok.pad_token_id or 0)[0].tolist()
        rows.append({'id': f'g{i}', 'input_ids': out, 'loss_mask': [0] * len(p) + [1] * (len(out) - len(p)), 'seq_len': len(out)})
    return Dataset.from_list(rows)

@pytest.mark.parametrize('spec,dtype', [('tiny-qwen3', torch.float32), ('smollm2', torch.bfloat16)])
def test_target_labels_equal_the_targets_greedy_text(spec, dtype, tmp_path):
    """On answers the target generated greedily in the same dtype, the stored argmax label at position p is the text's
    token at p + 1 (wherever the cached decode and the batched features pass agree on a near-tie: all but a few)."""
    model, tok = load_target(spec, dtype=dtype)
    prompts = ['What is the capital of France?', 'Write a Python function that reverses a string.',
               'Name three colours.', 'Explain recursion in one sentence.']
    ds = _greedy_rows(model, tok, prompts, 24)
    res = H.extract_to_disk(ds, spec, tmp_path / 'f', _opts(layer_ids=[0, 1], label_topk=4, storage_dtype='float32'),
                            model=model, ranks=(0, 1), progress=False)
    s = F.FeatureStore(tmp_path / 'f')
    agree = total = 0
    for sid in s.ids:
        r = s[sid]
        sup = r['loss_mask'][1:].bool()
        hit = r['target_ids'][:-1, 0] == r['input_ids'][1:]
        agree += int((hit & sup).sum()); total += int(sup.sum())
        assert (r['target_logp'][:, 0] >= r['target_logp'][:, 1]).all()
    assert total == 4 * 24
    assert agree / total >= (1.0 if dtype == torch.float32 else 0.95), (agree, total)
    ag = json.loads((tmp_path / 'f' / 'stats.json').read_text())['label_agreement']
    assert (ag['agree'], ag['supervised']) == (agree, total)
    assert res['index']['label_topk'] == 4 and s.label_topk == 4

def test_label_validation_quarantines(tiny, tmp_path, monkeypatch):
    "A sample whose target logits hold a NaN is quarantined with a reason; the others keep their labels."
    model, _ = tiny
    ds = _synth(tiny, n=6)
    real = F.head_topk
    def bad(m, last, k, **kw):
        ids, lp = real(m, last, k, **kw)
        lp[0, 1, 0] = float('nan')                # the first sample of each batch
        return ids, lp
    monkeypatch.setattr(F, 'head_topk', bad)
    res = H.extract_to_disk(ds, 'tiny-qwen3', tmp_path / 'f', _opts(layer_ids=[0], label_topk=2, max_batch_size=3),
                            model=model, ranks=(0, 1), progress=False)
    q = [json.loads(l) for l in (tmp_path / 'f' / 'quarantine.jsonl').read_text().splitlines()]
    assert len(q) == 2 and all(r['reason'].startswith('label_nonfinite') for r in q)
    assert res['index']['n_samples'] == 4 and res['index']['n_samples'] + res['index']['n_quarantined'] == len(ds)
