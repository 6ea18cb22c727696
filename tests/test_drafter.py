"The DFlash drafter: mask semantics, flex/dense equivalence, label alignment, loss weights, train/inference agreement, export/import."
import json, math
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from dflash_nb.drafter import (DFlashConfig, DFlashDrafter, DraftCache, build_config, build_masks,
                               dense_mask, dflash_mask_mod, draft_block, draft_weight_names,
                               export_drafter, flex_available, load_drafter, pad_anchors, sample_anchors)
from dflash_nb.loss import LossOptions, block_labels, slot_weights, dflash_loss as batch_loss


def dflash_loss(m, emb, head, ids, lm, feats, anchors, valid, **kw):
    "The positional form these tests were written in, through `dflash_loss(drafter, embed, head, batch, LossOptions)`."
    b = {'input_ids': ids, 'loss_mask': lm, 'features': feats, 'anchors': anchors, 'valid': valid,
         **{k: kw.pop(k) for k in ('lengths', 'document_ids', 'target_labels') if k in kw}}
    return batch_loss(m, emb, head, b, LossOptions(**kw))


def tiny_cfg(**kw):
    d = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
             vocab_size=60, num_target_layers=8, target_layer_ids=[1, 3, 5], mask_token_id=59, num_hidden_layers=2,
             block_size=4, rope_theta=10000.0)
    d.update(kw)
    return DFlashConfig(**d)


def reference_visible(T, B, anchors, q, kv, doc=None, window=None, causal=False):
    "The training-mask rules written out as plain Python (independent of dflash_mask_mod)."
    j, qo = divmod(q, B)
    a = anchors[j]
    P = a + qo
    if kv < T:
        if not kv < a: return False                       # strictly before the anchor
        if doc is not None and doc[kv] != doc[a]: return False
        if window is not None and P - kv > window - 1: return False
        return True
    jb, ko = divmod(kv - T, B)
    if jb != j: return False                              # other blocks are invisible
    if causal and ko > qo: return False
    if window is not None and abs(qo - ko) > window - 1: return False
    return True


@pytest.mark.parametrize('window,causal,doc', [(None, False, None), (3, True, None), (3, False, None),
                                               (None, False, [0, 0, 0, 0, 1, 1, 1, 1, 1, 1])])
def test_mask_element_by_element(window, causal, doc):
    T, B, anchors = 10, 4, [2, 5, 6]
    docs = torch.tensor([doc]) if doc else None
    m = dense_mask(dflash_mask_mod(torch.tensor([anchors]), T, B, docs, window, causal), 1, 3 * B, T + 3 * B)[0, 0]
    for q in range(3 * B):
        for kv in range(T + 3 * B):
            assert bool(m[q, kv]) == reference_visible(T, B, anchors, q, kv, doc, window, causal), (q, kv)
    # the named properties, stated directly
    for j, a in enumerate(anchors):
        rows = m[j * B:(j + 1) * B]
        assert not rows[:, a].any()                                   # the anchor's own feature is invisible
        assert not rows[:, a:T].any()                                 # so is everything after it
        for jj in range(3):
            if jj != j: assert not rows[:, T + jj * B:T + (jj + 1) * B].any()   # cross-block isolation
        if window is None and not causal: assert rows[:, T + j * B:T + (j + 1) * B].all()   # bidirectional in block
    if doc: assert not m[2 * B:3 * B, :4].any()                       # anchor 6 is in document 1: no document-0 keys


@pytest.mark.skipif(not flex_available(), reason='flex attention not available')
@pytest.mark.parametrize('layer_types,window', [(['full_attention'] * 2, None),
                                                (['sliding_attention', 'full_attention'], 3)])
def test_flex_equals_dense(layer_types, window):
    from torch.nn.attention.flex_attention import create_block_mask
    cfg = tiny_cfg(layer_types=layer_types, sliding_window=window)
    torch.manual_seed(0)
    m = DFlashDrafter(cfg).init_weights(1)
    b, T, n = 2, 12, 3
    anchors = torch.tensor([[1, 4, 8], [0, 2, 3]])
    docs = torch.tensor([[0] * 12, [0] * 3 + [1] * 9])
    # the BlockMask materializes to exactly the dense mask
    for lt in set(layer_types):
        swa = lt == 'sliding_attention'
        mm = dflash_mask_mod(anchors, T, cfg.block_size, docs, window if swa else None, swa)
        bm = create_block_mask(mm, b, None, n * 4, T + n * 4, device='cpu')
        assert torch.equal(_bm_dense(bm, n * 4, T + n * 4), dense_mask(mm, b, n * 4, T + n * 4)[:, 0])
    noise, feats = torch.randn(b, n * 4, 32), torch.randn(b, T, 96)
    pos = (anchors[..., None] + torch.arange(4)).view(b, -1)
    ctx = torch.arange(T).expand(b, T)
    with torch.no_grad():
        o_dense = m(noise, feats, ctx, pos, build_masks(cfg, anchors, T, docs, 'sdpa'))
        o_flex = m(noise, feats, ctx, pos, build_masks(cfg, anchors, T, docs, 'flex'))
    assert (o_dense - o_flex).abs().max() < 1e-5


def _bm_dense(bm, q_len, kv_len):
    "Element-level mask of a BlockMask by evaluating its mask_mod on every (q, kv) of its non-empty blocks."
    b = bm.kv_num_blocks.shape[0]
    out = torch.zeros(b, q_len, kv_len, dtype=torch.bool)
    blocks = bm.to_dense()            # [b, h, q_blocks, kv_blocks] block-level sparsity
    bq, bk = bm.BLOCK_SIZE
    for i in range(b):
        for qb in range(blocks.shape[2]):
            for kb in range(blocks.shape[3]):
                if not blocks[i, 0, qb, kb]: continue
                q = torch.arange(qb * bq, min((qb + 1) * bq, q_len))[:, None]
                k = torch.arange(kb * bk, min((kb + 1) * bk, kv_len))[None, :]
                out[i, q, k] = bm.mask_mod(torch.tensor(i), torch.tensor(0), q, k)
    return out


@pytest.mark.skipif(not flex_available(), reason='flex attention not available')
def test_flex_under_bf16_autocast_gets_one_dtype(monkeypatch):
    "Flex attention is not autocast-aware: under bf16 autocast q, k, v reach it all in bf16, and the loss matches SDPA's."
    from torch.nn.attention import flex_attention as fa
    import dflash_nb.drafter as D
    seen, orig = [], fa.flex_attention
    def spy(q, k, v, **kw): seen.append((q.dtype, k.dtype, v.dtype)); return orig(q, k, v, **kw)
    monkeypatch.setattr(fa, 'flex_attention', spy)
    cfg = tiny_cfg()
    m = DFlashDrafter(cfg).init_weights(0)
    torch.manual_seed(0)
    emb, head = nn.Embedding(60, 32), nn.Linear(32, 60, bias=False)
    ids = torch.randint(0, 58, (1, 24)); lm = torch.ones(1, 24)
    anchors, valid = pad_anchors([sample_anchors(lm[0], 4, 4)])
    feats = torch.randn(1, 24, 3, 32)
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        loss = {be: dflash_loss(m, emb, head, ids, lm, feats, anchors, valid, backend=be)['loss'].item() for be in ('sdpa', 'flex')}
    assert seen and all(d == (torch.bfloat16,) * 3 for d in seen), seen
    assert abs(loss['flex'] - loss['sdpa']) < 2e-2 * abs(loss['sdpa'])


def test_matches_transformers_qwen3_layers():
    "With an empty context, the drafter stack is a Qwen3 decoder: same names, same math (RMSNorm, RoPE, GQA, SwiGLU)."
    from transformers import Qwen3Config, Qwen3Model
    cfg = tiny_cfg()
    m = DFlashDrafter(cfg).init_weights(3)
    qc = Qwen3Config(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                     vocab_size=60, num_hidden_layers=2, rms_norm_eps=1e-6, rope_theta=10000.0,
                     attn_implementation='eager')
    ref = Qwen3Model(qc).eval()
    sd = {k: v for k, v in m.state_dict().items() if k not in ('fc.weight', 'hidden_norm.weight')}
    missing, unexpected = ref.load_state_dict(sd, strict=False)
    assert unexpected == [] and missing == ['embed_tokens.weight']
    x = torch.randn(1, 6, 32)
    pos = torch.arange(3, 9)[None]
    causal = torch.tril(torch.ones(6, 6, dtype=torch.bool))[None, None]
    with torch.no_grad():
        ours = m(x, torch.zeros(1, 0, 96), torch.zeros(1, 0, dtype=torch.long), pos, {'full_attention': causal})
        theirs = ref(inputs_embeds=x, position_ids=pos).last_hidden_state
    assert (ours - theirs).abs().max() < 1e-5


def test_anchor_feature_and_other_blocks_do_not_leak():
    cfg = tiny_cfg()
    m = DFlashDrafter(cfg).init_weights(2)
    emb, head = nn.Embedding(60, 32), nn.Linear(32, 60, bias=False)
    ids = torch.randint(0, 58, (1, 16)); lm = torch.ones(1, 16)
    anchors, valid = torch.tensor([[4, 9]]), torch.ones(1, 2, dtype=torch.bool)
    feats = torch.randn(1, 16, 3, 32)
    def block0_logits(f, i):
        pos, lab, sup = block_labels(i, lm, anchors, valid, 4)
        bid = torch.full_like(lab, 59); bid[..., 0] = i.gather(1, anchors)
        with torch.no_grad():
            h = m(emb(bid.view(1, 8)), f, torch.arange(16)[None], pos.view(1, 8), build_masks(cfg, anchors, 16))
        return head(h[:, :4])
    base = block0_logits(feats, ids)
    f2 = feats.clone(); f2[:, 4:] += 5.0          # the anchor's own feature and everything later
    assert torch.equal(block0_logits(f2, ids), base)
    i2 = ids.clone(); i2[0, 9] = (i2[0, 9] + 1) % 58   # the other block's anchor token
    assert torch.equal(block0_logits(feats, i2), base)
    f3 = feats.clone(); f3[:, 3] += 5.0           # the feature just before the anchor is visible
    assert not torch.allclose(block0_logits(f3, ids), base)


class OracleDrafter(nn.Module):
    "Outputs one-hot(input_ids[position]) at every block slot: perfect iff labels are the tokens at anchor + k."
    def __init__(self, cfg, ids):
        super().__init__(); self.config, self.ids = cfg, ids; self.fc = nn.Linear(1, 1)
    def forward(self, noise, feats, ctx_pos, blk_pos, masks=None, cache=None):
        p = blk_pos.clamp(max=self.ids.shape[1] - 1)
        return F.one_hot(self.ids.gather(1, p), self.config.vocab_size).float() * 50.0


def test_label_alignment_slot_k_is_token_at_anchor_plus_k():
    cfg = tiny_cfg(hidden_size=60, vocab_size=60)
    ids = torch.randperm(58)[:20][None]
    lm = torch.ones(1, 20)
    anchors, valid = pad_anchors([sample_anchors(lm[0], 5, 4, seed=0)])
    head = nn.Linear(60, 60, bias=False); head.weight.data = torch.eye(60)
    emb = nn.Embedding(60, 60)
    out = dflash_loss(OracleDrafter(cfg, ids), emb, head, ids, lm, torch.zeros(1, 20, 3, 60), anchors, valid)
    assert torch.equal(out['correct'], out['count']) and out['count'].sum() == 5 * 3
    assert out['loss'] < 1e-6
    # a drafter predicting the NEXT token (the SpecForge label-shift bug) gets ~0 accuracy
    class Shifted(OracleDrafter):
        def forward(self, noise, feats, ctx_pos, blk_pos, masks=None, cache=None): return super().forward(noise, feats, ctx_pos, blk_pos + 1)
    out = dflash_loss(Shifted(cfg, torch.cat([ids, torch.tensor([[59]])], 1)), emb, head, ids, lm, torch.zeros(1, 20, 3, 60), anchors, valid)
    assert out['correct'].sum() == 0


def test_loss_weights_and_normalization():
    cfg = tiny_cfg(block_size=5)
    m = DFlashDrafter(cfg).init_weights(4)
    torch.manual_seed(1)
    emb, head = nn.Embedding(60, 32), nn.Linear(32, 60, bias=False)
    ids = torch.randint(0, 58, (2, 14))
    lm = torch.ones(2, 14); lm[0, 7] = 0; lm[1, :3] = 0
    lengths = torch.tensor([14, 11])
    anchors, valid = pad_anchors([[3, 6, 9], [4]])
    feats = torch.randn(2, 14, 3, 32)
    gamma = 2.5
    out = dflash_loss(m, emb, head, ids, lm, feats, anchors, valid, gamma=gamma, lengths=lengths)
    # recompute by hand, slot by slot
    num = den = 0.0
    pos, lab, sup = block_labels(ids, lm, anchors, valid, 5, lengths)
    bid = torch.full_like(lab, 59); bid[..., 0] = ids.gather(1, anchors)
    with torch.no_grad():
        h = m(emb(bid.view(2, -1)), feats, torch.arange(14).expand(2, 14), pos.view(2, -1), build_masks(cfg, anchors, 14))
        logits = head(h).view(2, 3, 5, 60)
    for b in range(2):
        for j in range(3):
            if not valid[b, j]: continue
            a = anchors[b, j].item()
            for k in range(1, 5):
                p = a + k
                if p >= lengths[b] or lm[b, p] == 0: continue
                w = math.exp(-(k - 1) / gamma)
                num += w * F.cross_entropy(logits[b, j, k][None], ids[b, p][None]).item(); den += w
    assert abs(out['loss'].item() - num / den) < 1e-5
    assert abs(out['weight_sum'].item() - den) < 1e-5
    assert out['count'].tolist() == [3.0, 4.0, 4.0, 3.0]    # lm[0, 7] = 0 removes slot 4 of anchor 3 and slot 1 of anchor 6


def _naive_kl(logits, target):
    "The bucketed forward KL from the full softmax, written out: sum_i p_i log(p_i / q_i) + r log(r / (1 - sum_i q_i))."
    ids, logp = target
    q = logits.double().softmax(-1)
    p, qk = logp.double().exp(), q.gather(1, ids)
    r, qr = (1 - p.sum(-1)).clamp(min=0), 1 - qk.sum(-1)
    return ((p * (p.log() - qk.log())).sum(-1) + torch.xlogy(r, r) - r * qr.log()).float()

@pytest.mark.parametrize('labels', ['text', 'kl'])
@pytest.mark.parametrize('head_trainable', [False, True])
@pytest.mark.parametrize('max_elems', [None, 64 * 60, 40])   # default; whole vocabulary in row chunks of 64; vocab chunks of 1 x 40
def test_chunked_loss_equals_full_logits(monkeypatch, head_trainable, max_elems, labels):
    """The chunked loss gives the full computation's loss, per-slot stats and gradients (drafter and, if trainable, LM
    head): the CE of the text's tokens, and the KL against the target's top-k distribution plus the rest of its mass
    (the reference: the KL written out from the full softmax, in float64)."""
    import dflash_nb.loss as L
    if max_elems: monkeypatch.setattr(L, 'CE_CHUNK_ELEMS', max_elems)
    if labels == 'kl': monkeypatch.setattr(L, 'full_soft_loss', _naive_kl)
    cfg = tiny_cfg(block_size=5)
    torch.manual_seed(2)
    emb, head0 = nn.Embedding(60, 32).requires_grad_(False), torch.randn(60, 32) * 0.3
    ids = torch.randint(0, 58, (2, 40)); lm = torch.ones(2, 40); lm[1, :6] = 0
    anchors, valid = pad_anchors([sample_anchors(lm[i], 30, 5, seed=i) for i in range(2)])
    feats = torch.randn(2, 40, 3, 32)
    top = torch.randn(2, 40, 60).mul(2).log_softmax(-1).topk(4)        # the target's top-4: ~30% of its mass in the bucket
    tl = (top.indices, top.values) if labels == 'kl' else None
    res = {}
    for mode in ('full', 'chunked'):
        m = DFlashDrafter(cfg).init_weights(3)
        head = nn.Linear(32, 60, bias=False); head.weight = nn.Parameter(head0.clone(), requires_grad=head_trainable)
        out = dflash_loss(m, emb, head, ids, lm, feats, anchors, valid, lengths=torch.tensor([40, 37]), ce=mode,
                          target_labels=tl)
        out['loss'].backward()
        res[mode] = out, {k: p.grad.clone() for k, p in m.named_parameters()}, head.weight.grad
    (of, gf, hf), (oc, gc, hc) = res['full'], res['chunked']
    assert of['count'].sum() > 100                      # enough rows for several chunks
    torch.testing.assert_close(oc['loss'], of['loss'], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(oc['ce_sum'], of['ce_sum'], rtol=1e-5, atol=1e-5)
    assert torch.equal(oc['correct'], of['correct']) and torch.equal(oc['count'], of['count'])
    for k in gf: torch.testing.assert_close(gc[k], gf[k], rtol=1e-4, atol=1e-6, msg=k)
    if head_trainable: torch.testing.assert_close(hc, hf, rtol=1e-4, atol=1e-6)
    else: assert hc is None and hf is None


def test_chunked_loss_bf16_autocast_close_to_full():
    "Under bf16 autocast the chunked CE forms logits in bf16 like nn.Linear would; loss and grads stay close to the full path."
    cfg = tiny_cfg()
    torch.manual_seed(5)
    emb, head = nn.Embedding(60, 32).requires_grad_(False), nn.Linear(32, 60, bias=False).requires_grad_(False)
    ids = torch.randint(0, 58, (1, 24)); lm = torch.ones(1, 24)
    anchors, valid = pad_anchors([sample_anchors(lm[0], 8, 4)])
    feats = torch.randn(1, 24, 3, 32)
    loss, grads = {}, {}
    for mode in ('full', 'chunked'):
        m = DFlashDrafter(cfg).init_weights(3)
        with torch.autocast('cpu', dtype=torch.bfloat16):
            out = dflash_loss(m, emb, head, ids, lm, feats, anchors, valid, ce=mode)
        out['loss'].backward()
        loss[mode], grads[mode] = out['loss'].item(), m.fc.weight.grad
    assert abs(loss['chunked'] - loss['full']) < 2e-2 * abs(loss['full'])
    assert torch.nn.functional.cosine_similarity(grads['chunked'].flatten(), grads['full'].flatten(), 0) > 0.99


def test_only_draft_weights_train():
    cfg = tiny_cfg()
    m = DFlashDrafter(cfg).init_weights(0)
    emb, head = nn.Embedding(60, 32).requires_grad_(False), nn.Linear(32, 60, bias=False).requires_grad_(False)
    ids = torch.randint(0, 58, (1, 12)); lm = torch.ones(1, 12)
    anchors, valid = pad_anchors([[2, 5]])
    out = dflash_loss(m, emb, head, ids, lm, torch.randn(1, 12, 3, 32), anchors, valid)
    out['loss'].backward()
    assert all(p.grad is not None for p in m.parameters())
    assert emb.weight.grad is None and head.weight.grad is None
    assert sorted(dict(m.named_parameters())) == draft_weight_names(cfg)


@pytest.mark.parametrize('layer_types,window,causal', [(['full_attention'] * 2, None, True),
                                                       (['sliding_attention', 'full_attention'], 3, True),
                                                       (['sliding_attention', 'sliding_attention'], 5, False)])
def test_training_layout_equals_cached_inference(layer_types, window, causal):
    cfg = tiny_cfg(layer_types=layer_types, sliding_window=window, sliding_window_causal=causal)
    m = DFlashDrafter(cfg).init_weights(5)
    torch.manual_seed(2)
    emb, head = nn.Embedding(60, 32), nn.Linear(32, 60, bias=False)
    ids, feats = torch.randint(0, 58, (1, 20)), torch.randn(1, 20, 3, 32)
    anchors = torch.tensor([[3, 8, 14]])
    pos, lab, _ = block_labels(ids, torch.ones(1, 20), anchors, torch.ones(1, 3, dtype=torch.bool), 4)
    bid = torch.full_like(lab, 59); bid[..., 0] = ids.gather(1, anchors)
    with torch.no_grad():
        h = m(emb(bid.view(1, -1)), feats, torch.arange(20)[None], pos.view(1, -1), build_masks(cfg, anchors, 20))
    train_logits = head(h.view(1, 3, 4, 32)[:, :, 1:])
    cache, prev = DraftCache(), 0
    for j, a in enumerate(anchors[0].tolist()):
        got = draft_block(m, emb, head, ids[:, a], feats[:, prev:a], torch.arange(prev, a)[None], cache)
        assert (got - train_logits[:, j]).abs().max() < 1e-5, j
        prev = a
    assert len(cache) == 14


@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
def test_export_import_round_trip(tmp_path, dtype):
    from safetensors import safe_open
    cfg = tiny_cfg(layer_types=['sliding_attention', 'full_attention'], sliding_window=8)
    m = DFlashDrafter(cfg).init_weights(6)
    out = export_drafter(m, tmp_path / 'drafter', dtype=dtype, extra_files={'training.json': '{}'})
    assert sorted(p.name for p in out.iterdir()) == ['config.json', 'model.safetensors', 'training.json']
    with safe_open(str(out / 'model.safetensors'), 'pt') as f:
        names = sorted(f.keys())
        assert {str(f.get_tensor(k).dtype) for k in names} == {f'torch.{dtype}'}
    assert names == draft_weight_names(cfg) and len(names) == 11 * 2 + 3
    cj = json.loads((out / 'config.json').read_text())
    for k in ('block_size', 'num_target_layers', 'rope_theta', 'head_dim', 'layer_types', 'sliding_window'):
        assert k in cj, k
    assert cj['architectures'] == ['DFlashDraftModel'] and cj['model_type'] == 'qwen3' and cj['use_sliding_window']
    assert cj['dflash_config']['target_layer_ids'] == [1, 3, 5] and cj['dflash_config']['mask_token_id'] == 59
    # transformers parses it as a Qwen3Config with the extra DFlash attributes (what z-lab's loader relies on)
    from transformers import Qwen3Config
    qc = Qwen3Config.from_dict(cj)
    assert qc.block_size == 4 and qc.num_target_layers == 8 and qc.head_dim == 8 and qc.dflash_config['mask_token_id'] == 59
    m2 = load_drafter(out)
    ref = DFlashDrafter(cfg)   # the exported precision, computed in fp32
    ref.load_state_dict({k: v.to(getattr(torch, dtype)).float() for k, v in m.state_dict().items()})
    x, f = torch.randn(1, 4, 32), torch.randn(1, 5, 96)
    with torch.no_grad():
        a = ref(x, f, torch.arange(5)[None], torch.arange(5, 9)[None])
        b = m2(x, f, torch.arange(5)[None], torch.arange(5, 9)[None])
    assert torch.equal(a, b)
    # a stray safetensors file or a renamed tensor is rejected
    (out / 'extra.safetensors').write_bytes((out / 'model.safetensors').read_bytes())
    with pytest.raises(ValueError, match='exactly one model.safetensors'): load_drafter(out)


def test_build_config_from_real_target_config():
    from dflash_nb.models import resolve_target
    from transformers import AutoConfig
    tc = AutoConfig.from_pretrained(resolve_target('tiny-qwen3'))
    cfg = build_config(tc, mask_token_id=tc.vocab_size - 1, num_hidden_layers=1, num_feature_layers=1)
    assert cfg.hidden_size == tc.hidden_size and cfg.num_target_layers == tc.num_hidden_layers == 4
    assert cfg.target_layer_ids == [2]                                     # n == 1 -> [N // 2]
    assert build_config(tc, mask_token_id=1, num_feature_layers=2).target_layer_ids == [1]   # a shallow target: the distinct ids only
    with pytest.raises(ValueError, match='strictly increasing'): build_config(tc, mask_token_id=1, target_layer_ids=[2, 2])
    assert build_config(tc, mask_token_id=1, target_layer_ids=[0, 2]).target_layer_ids == [0, 2]
    assert cfg.rope_theta == 10000.0


def test_loss_slots_supervises_only_the_first_slots():
    "`loss_slots=K`: only slots 1..K carry loss and statistics; with K = B-1 the loss is unchanged."
    cfg = tiny_cfg()
    m = DFlashDrafter(cfg).init_weights(0)
    torch.manual_seed(0)
    emb, head = nn.Embedding(60, 32), nn.Linear(32, 60, bias=False)
    ids = torch.randint(0, 58, (1, 24)); lm = torch.ones(1, 24)
    anchors, valid = pad_anchors([sample_anchors(lm[0], 4, cfg.block_size)])
    feats = torch.randn(1, 24, 3, 32)
    with torch.no_grad():
        full = dflash_loss(m, emb, head, ids, lm, feats, anchors, valid)
        same = dflash_loss(m, emb, head, ids, lm, feats, anchors, valid, loss_slots=cfg.block_size - 1)
        one = dflash_loss(m, emb, head, ids, lm, feats, anchors, valid, loss_slots=1)
    assert torch.allclose(full['loss'], same['loss'])
    assert one['count'][0] == full['count'][0] and one['count'][1:].sum() == 0
    assert not torch.allclose(one['loss'], full['loss'])


def test_cropped_context_changes_nothing():
    "Feeding only the context before the last anchor (crop) gives the same loss, stats and gradients, packed rows too."
    cfg = tiny_cfg()
    torch.manual_seed(4)
    emb, head = nn.Embedding(60, 32).requires_grad_(False), nn.Linear(32, 60, bias=False).requires_grad_(False)
    ids = torch.randint(0, 58, (2, 50)); lm = torch.ones(2, 50); lm[1, 30:] = 0
    anchors, valid = pad_anchors([torch.tensor([3, 20, 31]), torch.tensor([5, 12])])
    docs = torch.tensor([[0] * 25 + [1] * 25, [0] * 50])
    feats = torch.randn(2, 50, 3, 32)
    res = {}
    for crop in (False, True):
        m = DFlashDrafter(cfg).init_weights(3)
        out = dflash_loss(m, emb, head, ids, lm, feats, anchors, valid, document_ids=docs, crop=crop)
        out['loss'].backward()
        res[crop] = out, {k: p.grad for k, p in m.named_parameters()}
    (a, ga), (b, gb) = res[False], res[True]
    torch.testing.assert_close(b['loss'], a['loss'], rtol=1e-6, atol=1e-6)
    assert torch.equal(a['count'], b['count']) and torch.equal(a['correct'], b['correct'])
    for k in ga: torch.testing.assert_close(gb[k], ga[k], rtol=1e-5, atol=1e-7, msg=k)
