"""Interop for the drafter kinds: tiny DFlash2 and DSpark drafters trained on tiny-qwen3, exported, and read back by
the other tools' own code: speculators 0.9.0 (both kinds, its checkpoint layout), z-lab's dflash 0.1.0 (DFlash2's hub
layout) and SpecForge 0.2.0 (DSpark's hub layout), each in a small venv (tests/interop_venvs.py). DeepSpec's DSpark
reader is not a published wheel: its field list and tensor names are checked here directly."""
import json, sys
from pathlib import Path
import pytest, torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).parent))
from interop_venvs import run_in, venv_python
from dflash_nb.core import read_json, write_json
from dflash_nb.drafter import DFlashConfig, DFlashDrafter, export_drafter
from dflash_nb.export import export_hub_drafter, export_speculators_drafter
from dflash_nb.kinds import draft_from_hidden
from dflash_nb.models import ensure_tiny
from dflash_nb.train import Trainer, TrainConfig
from dflash_nb.target_weights import load_target_head

B = 8     # not the readers' default 16: a reader falling back to 16 would fail the block-size checks

def _venv(name):
    try: return venv_python(name)
    except Exception as e: pytest.skip(f'the {name} venv cannot be built here (pip/PyPI): {str(e)[:300]}')

def _json(stdout): return json.loads(stdout.split('JSON', 1)[1])

@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    "{kind: run folder}: a drafter of each kind trained 12 steps on tiny-qwen3's own embed / head, as 80_train writes it."
    target = ensure_tiny('tiny-qwen3')
    emb, head = load_target_head(target)
    g = torch.Generator().manual_seed(0)
    data = [{'input_ids': torch.randint(0, 600, (24,), generator=g), 'loss_mask': torch.tensor([0] * 4 + [1] * 20),
             'hidden_states': torch.randn(24, 2, 64, generator=g), 'target_last': torch.randn(24, 64, generator=g)} for _ in range(6)]
    tc = TrainConfig(epochs=2, num_anchors=2, lr=1e-2, log_every=100, ckpt_every=0, warmup_ratio=0.0, optimizer='adamw', amp='none',
                     gamma=None, loss_slots=None, max_steps=None, max_minutes=None)
    out = {}
    for kind in ('dflash2', 'dspark'):
        cfg = DFlashConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                           vocab_size=640, num_target_layers=4, target_layer_ids=[0, 2], mask_token_id=639, num_hidden_layers=1,
                           block_size=B, rope_theta=10000.0, kind=kind, selector_rank=8, selector_top_k=4, markov_rank=8)
        r = tmp_path_factory.mktemp(kind)
        tr = Trainer(DFlashDrafter(cfg).init_weights(0), emb, head, data, tc, out_dir=r / 'ckpt', log=lambda m: None)
        tr.fit()
        export_drafter(tr.model, r / '80_train' / 'drafter', dtype='float32')
        write_json(r / '80_train' / 'manifest.json', {'stage': '80_train', 'params': {'target': 'tiny-qwen3'}})
        write_json(r / '01_targets' / 'target.json', {'spec': 'tiny-qwen3', 'path': str(target)})
        out[kind] = r
    return out

def _ours(run): return load_file(str(run / '80_train' / 'drafter' / 'model.safetensors'))

def _trained(sd, kind):
    "The kind's zero-initialized tensors moved in training, so the equality checks below compare real values."
    for k in {'dflash2': ['candidate_selector.successor_codebook', 'layers.0.mlp_conv.kernel_projection.weight'],
              'dspark': ['markov_head.markov_w2.weight', 'confidence_head.proj.bias']}[kind]:
        assert sd[k].abs().sum() > 0, k

SPEC_KIND = r'''
import json, sys, torch
from speculators.model import SpeculatorModel
m = SpeculatorModel.from_pretrained(sys.argv[1]).eval()
ref = torch.load(sys.argv[2], weights_only=True)
sd = m.state_dict()
out = {"model": type(m).__name__, "config": type(m.config).__name__, "block_size": m.block_size,
       "aux": m.config.aux_hidden_state_layer_ids, "mask": m.config.mask_token_id, "anchor": m.config.sample_from_anchor,
       "equal": {k: bool(k in sd and torch.equal(sd[k], v)) for k, v in ref["weights"].items()},
       "embed": bool(torch.equal(m.embed_tokens.weight, ref["embed"])), "head": bool(torch.equal(m.lm_head.weight, ref["head"]))}
with torch.no_grad():
    if m.config.speculators_model_type == "dflash2":
        conv = m.layers[0].mlp_conv
        y, k = conv.prepare(ref["x"])
        out["conv"] = float((conv.finish(torch.tanh(y), k) - ref["conv"]).abs().max())
        s = m.candidate_selector.transition_scores(ref["h"], ref["prev"], ref["cand"])
        out["select"] = float((s - ref["scores"]).abs().max())
    else:
        e = m.markov_head.prev_embeddings(ref["prev"][None])
        bias = m.markov_head.block_bias(prev_token_ids=ref["prev"][None], hidden_states=ref["h"][None], prev_emb=e)
        out["bias"] = float((bias[0] - ref["bias"]).abs().max())
        c = m.confidence_head(torch.cat([ref["h"], e[0]], -1))
        out["conf"] = float((c - ref["conf"]).abs().max())
print("JSON" + json.dumps(out))
'''

def _module_ref(run, kind, p):
    "Our kind modules' outputs on fixed inputs, with the weights and the target's embed / head, saved for a venv script."
    from dflash_nb.drafter import load_drafter
    m, (E, W) = load_drafter(run / '80_train' / 'drafter'), load_target_head(ensure_tiny('tiny-qwen3'))
    g = torch.Generator().manual_seed(1)
    ref = {'weights': _ours(run), 'embed': E.weight.detach(), 'head': W.weight.detach(), 'x': torch.randn(1, 2 * B, 64, generator=g),
           'h': torch.randn(B, 64, generator=g), 'prev': torch.randint(0, 640, (B,), generator=g)}
    with torch.no_grad():
        if kind == 'dflash2':
            ref['conv'] = m.layers[0].mlp_conv(ref['x'], torch.tanh)
            ref['cand'] = torch.randint(0, 640, (B, 4), generator=g)
            ref['scores'] = m.candidate_selector.scores(ref['h'], torch.zeros(B, 4), ref['prev'], ref['cand'])
        else:
            ref['bias'], e = m.markov_head(ref['prev'])
            ref['conf'] = m.confidence_head(ref['h'], e)
    torch.save(ref, p)
    return ref

@pytest.mark.parametrize('kind', ['dflash2', 'dspark'])
def test_speculators_reads_each_kind(runs, tmp_path, kind):
    "speculators 0.9.0's own from_pretrained reads our checkpoint: its classes, block size, every tensor, its heads' outputs."
    _venv('spec09')
    run = runs[kind]
    s = export_speculators_drafter(run, tmp_path / 'spec', verifier=str(ensure_tiny('tiny-qwen3')))
    assert (s['kind'], s['block_size'], s['speculative_tokens']) == (kind, B, B if kind == 'dspark' else B - 1)
    from dflash_nb.drafter import load_drafter   # and our own reader reads it back: the kind, its fields, every tensor
    ours, back = load_drafter(run / '80_train' / 'drafter'), load_drafter(tmp_path / 'spec')
    assert back.source_format == 'speculators' and back.config == ours.config, (back.config, ours.config)
    a, b = ours.state_dict(), back.state_dict()
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    ref = _module_ref(run, kind, tmp_path / 'ref.pt')
    _trained(ref['weights'], kind)
    got = _json(run_in('spec09', SPEC_KIND, tmp_path / 'spec', tmp_path / 'ref.pt'))
    assert (got['model'], got['config']) == {'dflash2': ('DFlash2DraftModel', 'DFlash2SpeculatorConfig'),
                                             'dspark': ('DSparkDraftModel', 'DSparkSpeculatorConfig')}[kind]
    assert (got['block_size'], got['aux'], got['mask'], got['anchor']) == (B, [1, 3], 639, kind == 'dspark')
    assert got['equal'] and all(got['equal'].values()), [k for k, v in got['equal'].items() if not v]
    assert got['embed'] and got['head']                              # rebuilt from the verifier: the target's own
    for k in ('conv', 'select') if kind == 'dflash2' else ('bias', 'conf'): assert got[k] < 1e-5, (k, got[k])

ZLAB = r'''
import json, sys, torch
from dflash.model import DFlash2DraftModel
m = DFlash2DraftModel.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
ref = torch.load(sys.argv[2], weights_only=True)
sd = {k.replace("_codebook.weight", "_codebook"): v for k, v in m.state_dict().items()}
with torch.no_grad():
    h = m(position_ids=ref["pos"], noise_embedding=ref["noise"], target_hidden=ref["feat"])
    logits = m.compute_logits(h[:, 1:], lambda x: x @ ref["head"].t())
    toks = m.candidate_selector.select(h[:, 1:], logits, ref["anchor"], 0.0)[0]
print("JSON" + json.dumps({"block_size": m.block_size, "ids": list(m.target_layer_ids), "mask": m.mask_token_id,
      "top_k": m.candidate_selector.top_k, "names": sorted(sd) == sorted(ref["weights"]),
      "equal": all(torch.equal(sd[k], v) for k, v in ref["weights"].items() if k in sd),
      "diff": float((h - ref["h"]).abs().max()), "tokens": toks.tolist()}))
'''

def test_zlab_reads_the_dflash2_hub_folder(runs, tmp_path):
    "z-lab's own DFlash2DraftModel (dflash 0.1.0) loads our hub folder: block size 8 (not 16), every tensor, the same states and drafts."
    from dflash_nb.drafter import load_drafter
    _venv('zlab')
    run = runs['dflash2']
    res = export_hub_drafter(run, tmp_path / 'hub', base_model='Org/T', echo=lambda m: None)
    assert '"num_speculative_tokens": 7' in res['commands']['vllm']
    m = load_drafter(run / '80_train' / 'drafter')
    _, W = load_target_head(ensure_tiny('tiny-qwen3'))
    g = torch.Generator().manual_seed(2)
    T = 7
    feat, noise = torch.randn(1, T, 2 * 64, generator=g), torch.randn(1, B, 64, generator=g)
    anchor = torch.tensor([5])
    with torch.no_grad():
        h = m(noise, feat, torch.arange(T)[None], torch.arange(T, T + B)[None])
        ours = draft_from_hidden(m, W, h, anchor)['tokens']
    torch.save({'pos': torch.arange(T + B)[None], 'noise': noise, 'feat': feat, 'h': h, 'anchor': anchor, 'head': W.weight.detach(),
                'weights': load_file(str(tmp_path / 'hub' / 'model.safetensors'))}, tmp_path / 'ref.pt')
    got = _json(run_in('zlab', ZLAB, tmp_path / 'hub', tmp_path / 'ref.pt'))
    assert (got['block_size'], got['ids'], got['mask'], got['top_k']) == (B, [0, 2], 639, 4)
    assert got['names'] and got['equal']
    assert got['diff'] < 1e-4, got['diff']
    assert got['tokens'] == ours.tolist()                           # z-lab's selector walk drafts what ours drafts

SF_DSPARK = r'''
import json, sys, torch
from specforge.modeling.draft.dspark import DSparkDraftModel
m = DSparkDraftModel.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
ref = torch.load(sys.argv[2], weights_only=True)
sd = m.state_dict()
print("JSON" + json.dumps({"block_size": m.block_size, "ids": list(m.target_layer_ids), "mask": m.mask_token_id,
      "rank": m.markov_head.markov_rank, "conf_in": m.confidence_head.proj.in_features,
      "missing": sorted(k for k in ref if k not in sd), "equal": all(torch.equal(sd[k], v) for k, v in ref.items() if k in sd)}))
'''

def test_specforge_reads_the_dspark_hub_folder(runs, tmp_path):
    "SpecForge 0.2.0's DSparkDraftModel loads our DSpark hub folder: block size 8 from the top level, every draft tensor."
    _venv('spec09')
    run = runs['dspark']
    res = export_hub_drafter(run, tmp_path / 'hub', base_model='Org/T', echo=lambda m: None)
    assert res['commands'] == {} and any('SpecForge' in n for n in res['warnings'])      # no engine runs its Markov head
    ours = _ours(run)
    _trained(ours, 'dspark')
    torch.save(ours, tmp_path / 'ref.pt')
    got = _json(run_in('spec09', SF_DSPARK, tmp_path / 'hub', tmp_path / 'ref.pt'))
    assert (got['block_size'], got['ids'], got['mask'], got['rank'], got['conf_in']) == (B, [0, 2], 639, 8, 64 + 8)
    assert got['missing'] == [] and got['equal']

DFLASH2_FIELDS = ('block_size', 'mask_token_id', 'target_layer_ids', 'conv_kernel_size', 'conv_group_size', 'selector_rank', 'selector_top_k')
DSPARK_TOP = ('block_size', 'mask_token_id', 'target_layer_ids', 'num_target_layers', 'markov_rank', 'markov_head_type',
              'enable_confidence_head', 'confidence_head_with_markov', 'tie_word_embeddings', 'layer_types')

def test_hub_layouts_match_the_reference_fields(runs, tmp_path):
    """Without any venv: z-lab's DFlash2 fields (dflash_config, block_size also top level, codebooks without `.weight`, no
    embed / lm_head) and DeepSpec's DSpark fields (top level) and tensors (its frozen embed / lm_head: the target's)."""
    hub = {}
    for kind in ('dflash2', 'dspark'):
        export_hub_drafter(runs[kind], tmp_path / kind, base_model='Org/T', echo=lambda m: None)
        hub[kind] = read_json(tmp_path / kind / 'config.json'), load_file(str(tmp_path / kind / 'model.safetensors'))
    c, w = hub['dflash2']
    assert c['architectures'] == ['DFlash2DraftModel'] and c['block_size'] == c['dflash_config']['block_size'] == B
    assert all(k in c['dflash_config'] for k in DFLASH2_FIELDS) and 'auto_map' not in c
    assert {'candidate_selector.predecessor_codebook', 'candidate_selector.successor_codebook',
            'layers.0.attention_conv.base_kernel', 'layers.0.mlp_conv.kernel_projection.weight'} <= set(w)
    assert not any(k.endswith('codebook.weight') or 'embed' in k or 'lm_head' in k for k in w)
    assert w['layers.0.attention_conv.base_kernel'].shape == (2, 2, 64)
    assert w['layers.0.attention_conv.kernel_projection.weight'].shape == (2 * 2 * 64 // 16, 64)
    c, w = hub['dspark']
    assert all(k in c for k in DSPARK_TOP) and c['block_size'] == B and c['tie_word_embeddings'] is False
    assert c['dflash_config']['projector_type'] == 'dspark' and c['dflash_config']['block_size'] == B
    E, W = load_target_head(ensure_tiny('tiny-qwen3'))
    assert torch.equal(w['embed_tokens.weight'], E.weight) and torch.equal(w['lm_head.weight'], W.weight)
    assert w['markov_head.markov_w1.weight'].shape == w['markov_head.markov_w2.weight'].shape == (640, 8)
    assert w['confidence_head.proj.weight'].shape == (1, 64 + 8) and w['confidence_head.proj.bias'].shape == (1,)
    assert torch.equal(w['markov_head.markov_w2.weight'], _ours(runs['dspark'])['markov_head.markov_w2.weight'])

def test_cli_exports_each_kind(runs, tmp_path):
    "`dflash-nb export speculators-drafter` and `export drafter` read the kind from the drafter's config."
    from conftest import dflash
    r = dflash('export', 'speculators-drafter', runs['dspark'], tmp_path / 's', '--verifier', 'Org/T')
    assert json.loads(r.stdout)['kind'] == 'dspark'
    assert read_json(tmp_path / 's' / 'config.json')['speculators_model_type'] == 'dspark'
    dflash('export', 'drafter', runs['dflash2'], tmp_path / 'h')
    assert read_json(tmp_path / 'h' / 'config.json')['architectures'] == ['DFlash2DraftModel']
