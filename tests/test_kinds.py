"The drafter kinds: DFlash2 starts as DFlash, shapes, save/load round trips, the selector's walk, DSpark's heads and loss."
import json
import pytest
import torch

from dflash_nb.drafter import DFlashConfig, DFlashDrafter, DraftCache, block_hidden, draft_block, export_drafter, load_drafter
from dflash_nb.loss import LossOptions, dflash_loss
from dflash_nb.kinds import draft_from_hidden, kind_weight_names, select_walk


def cfg(kind='dflash', **kw):
    d = dict(hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=8, vocab_size=60,
             num_target_layers=8, target_layer_ids=[1, 3, 5], mask_token_id=59, num_hidden_layers=2, block_size=4,
             rope_theta=10000.0, kind=kind, selector_rank=8, selector_top_k=5, markov_rank=8)
    return DFlashConfig(**{**d, **kw})


def inputs(seed=0, T=20, b=2):
    g = torch.Generator().manual_seed(seed)
    emb, head = torch.nn.Embedding(60, 32), torch.nn.Linear(32, 60, bias=False)
    with torch.no_grad(): emb.weight.copy_(torch.randn(60, 32, generator=g)); head.weight.copy_(torch.randn(60, 32, generator=g) * 0.3)
    batch = {'input_ids': torch.randint(0, 58, (b, T), generator=g), 'loss_mask': torch.ones(b, T, dtype=torch.long),
             'features': torch.randn(b, T, 3, 32, generator=g), 'anchors': torch.tensor([[1, 6, 11]] * b),
             'valid': torch.ones(b, 3, dtype=torch.bool), 'target_last': torch.randn(b, T, 32, generator=g)}
    return emb, head, batch


def test_fresh_dflash2_computes_exactly_what_dflash_computes():
    "Identity-initialized convolutions: the same backbone weights give bit-identical states, logits and unary loss."
    a, b = DFlashDrafter(cfg()).init_weights(3), DFlashDrafter(cfg('dflash2')).init_weights(3)
    sb = b.state_dict()
    assert all(torch.equal(v, sb[k]) for k, v in a.state_dict().items())        # the backbone draws the same weights
    emb, head, bt = inputs()
    for m in (a, b): m.eval()
    ca, cb = DraftCache(), DraftCache()
    la = draft_block(a, emb, head, bt['input_ids'][:, 9], bt['features'][:, :9], torch.arange(9).expand(2, 9), ca)
    lb = draft_block(b, emb, head, bt['input_ids'][:, 9], bt['features'][:, :9], torch.arange(9).expand(2, 9), cb)
    assert torch.equal(la, lb)
    with torch.no_grad():
        ua = dflash_loss(a, emb, head, bt, LossOptions(ce='full'))
        ub = dflash_loss(b, emb, head, bt, LossOptions(ce='full', selector_alpha=0.0))
    assert torch.equal(ua['loss'], ub['loss'])


def test_shapes_and_names():
    for kind, extra in (('dflash2', 2 * 2 * 2 + 3), ('dspark', 4)):
        m = DFlashDrafter(cfg(kind)).init_weights(0)
        assert len(kind_weight_names(m.config)) == extra
        assert set(kind_weight_names(m.config)) <= set(m.state_dict())
    m = DFlashDrafter(cfg('dflash2'))
    sd = m.state_dict()
    assert sd['layers.0.attention_conv.base_kernel'].shape == (2, 2, 32)
    assert sd['layers.1.mlp_conv.kernel_projection.weight'].shape == (2 * 2 * 32 // 16, 32)
    assert sd['candidate_selector.predecessor_codebook'].shape == (60, 8) and sd['candidate_selector.successor_codebook'].abs().sum() == 0
    assert sd['candidate_selector.hidden_projection.weight'].shape == (8, 32)
    sd = DFlashDrafter(cfg('dspark')).init_weights(0).state_dict()
    assert sd['markov_head.markov_w1.weight'].shape == (60, 8) and sd['markov_head.markov_w2.weight'].shape == (60, 8)
    assert sd['confidence_head.proj.weight'].shape == (1, 40) and sd['confidence_head.proj.bias'].shape == (1,)
    with pytest.raises(ValueError, match='kind must be'): cfg('medusa')
    with pytest.raises(ValueError, match='does not divide'): cfg('dflash2', conv_group_size=24)


@pytest.mark.parametrize('kind', ['dflash', 'dflash2', 'dspark'])
def test_save_load_round_trip(tmp_path, kind):
    m = DFlashDrafter(cfg(kind)).init_weights(1)
    with torch.no_grad():
        for p in m.parameters(): p.add_(torch.randn_like(p) * 0.01)   # no zero-initialized tensor left
    export_drafter(m, tmp_path / 'd', 'float32')
    j = json.loads((tmp_path / 'd' / 'config.json').read_text())
    assert j['architectures'] == [{'dflash': 'DFlashDraftModel', 'dflash2': 'DFlash2DraftModel', 'dspark': 'DSparkDraftModel'}[kind]]
    if kind == 'dflash2': assert j['dflash_config']['block_size'] == 4 and j['dflash_config']['selector_top_k'] == 5
    if kind == 'dspark': assert j['markov_rank'] == 8 and j['markov_head_type'] == 'vanilla'
    r = load_drafter(tmp_path / 'd')
    assert r.config.to_json_dict() == m.config.to_json_dict() and r.config.kind == kind
    assert all(torch.equal(v, r.state_dict()[k]) for k, v in m.state_dict().items())


def test_selector_walk_greedy_is_the_argmax_of_the_scores():
    m = DFlashDrafter(cfg('dflash2')).init_weights(2).eval()
    with torch.no_grad():
        for p in m.candidate_selector.parameters(): p.normal_()
    emb, head, bt = inputs(1)
    h = block_hidden(m, emb, bt['input_ids'][:, 9], bt['features'][:, :9], torch.arange(9).expand(2, 9), DraftCache())
    anchor = bt['input_ids'][:, 9]
    with torch.no_grad():
        out = draft_from_hidden(m, head, h, anchor)
        U = head(h[:, 1:])
        vals, cand = U.topk(5, -1)
        prev = anchor
        for s in range(3):
            sc = m.candidate_selector.scores(h[:, 1 + s], vals[:, s], prev, cand[:, s])
            prev = cand[:, s].gather(1, sc.argmax(-1, keepdim=True))[:, 0]
            assert torch.equal(out['tokens'][:, s], prev)
        assert not torch.equal(out['tokens'], U.argmax(-1))        # the selector changed some pick
        q = draft_from_hidden(m, head, h, anchor, 0.8, torch.Generator().manual_seed(0))['q']
        assert torch.allclose(q.sum(-1), torch.ones(2, 3)) and ((q > 0).sum(-1) <= 5).all()
        fresh = DFlashDrafter(cfg('dflash2')).init_weights(2).eval()
        assert torch.equal(select_walk(fresh.candidate_selector, h[:, 1:], U, anchor)['tokens'], U.argmax(-1))   # pure unary start


def test_dspark_drafts_every_slot_and_starts_unary():
    m = DFlashDrafter(cfg('dspark')).init_weights(0).eval()
    emb, head, bt = inputs(2)
    h = block_hidden(m, emb, bt['input_ids'][:, 9], bt['features'][:, :9], torch.arange(9).expand(2, 9), DraftCache())
    with torch.no_grad(): out = draft_from_hidden(m, head, h, bt['input_ids'][:, 9])
    assert out['tokens'].shape == (2, 4) and out['q'].shape == (2, 4, 60) and out['confidence'].shape == (2, 4)
    assert torch.equal(out['tokens'], head(h).argmax(-1))         # W2 = 0: the unary argmax, slot 0 included


def test_kind_losses_backpropagate_into_their_heads():
    emb, head, bt = inputs(3)
    for kind, names in (('dflash2', ['candidate_selector.successor_codebook', 'layers.0.attention_conv.kernel_projection.weight']),
                        ('dspark', ['markov_head.markov_w2.weight', 'confidence_head.proj.weight'])):
        m = DFlashDrafter(cfg(kind)).init_weights(0)
        out = dflash_loss(m, emb, head, bt, LossOptions())
        out['loss'].backward()
        g = dict(m.named_parameters())
        assert all(g[n].grad is not None and g[n].grad.abs().sum() > 0 for n in names), kind
        assert out['count'].shape == ((4,) if kind == 'dspark' else (3,))
    with pytest.raises(ValueError, match='target_last'):
        dflash_loss(DFlashDrafter(cfg('dspark')), emb, head, {k: v for k, v in bt.items() if k != 'target_last'})


@pytest.mark.parametrize('kind', ['dflash2', 'dspark'])
def test_each_kind_drafts_its_own_walk_and_decodes_losslessly(kind):
    """The evaluation's draft session drafts with the kind's own walk (DFlash2's selector, DSpark's Markov head, given
    non-trivial weights), and speculative decoding with it equals plain decoding, greedy and sampled (T = 0.8)."""
    from dflash_nb.decoding import DFlashDraftSession, Sampler, plain_generate, speculative_generate
    from dflash_nb.drafter import build_config
    from dflash_nb.models import load_target
    model, tok = load_target('tiny-qwen3')
    c = build_config(model.config, mask_token_id=model.config.vocab_size - 1, num_hidden_layers=1, block_size=6,
                     target_layer_ids=[0, 1], kind=kind, selector_rank=8, selector_top_k=4, markov_rank=8)
    d = DFlashDrafter(c).init_weights(0).eval()
    with torch.no_grad():   # a selector / Markov head that moves the drafts away from the unary argmax
        for name, p in d.named_parameters():
            if 'codebook' in name or 'markov' in name: p.normal_(0, 1.0, generator=torch.Generator().manual_seed(1))
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    s = DFlashDraftSession(d, emb, head)
    feats, pos = torch.randn(5, 2, model.config.hidden_size), torch.arange(5)
    toks, unary = s.draft(7, feats, pos)
    ref = draft_from_hidden(d, head, block_hidden(d, emb, torch.tensor([7]), feats[None], pos[None], DraftCache()), torch.tensor([7]))
    assert toks.tolist() == ref['tokens'][0][:5].tolist() and unary.shape == (5, model.config.vocab_size)
    assert toks.tolist() != unary.argmax(-1).tolist()      # the kind's walk, not the unary argmax
    prompt = tok('Write a short poem about the sea')['input_ids']
    for sampler in (Sampler(), Sampler(temperature=0.8, seed=3)):
        want = plain_generate(model, prompt, 12, sampler=sampler).tokens
        assert speculative_generate(model, DFlashDraftSession(d, emb, head), prompt, 12, sampler=sampler).tokens == want
