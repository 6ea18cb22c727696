"The one sampler of regeneration and evaluation (`decoding.Sampler`): keyed draws, the same in a batch as alone."
import pytest
torch = pytest.importorskip('torch')
from dflash_nb.decoding import Sampler, gumbel_noise, keyed_uniform

V = 300

def _logits(rows: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, V, generator=g) * 3

@pytest.mark.parametrize('top_p', [1.0, 0.9, 0.3])
def test_a_row_draws_the_same_token_alone_or_in_a_batch(top_p):
    "Regeneration's rows: each keyed by its own key, so the batch around a row (or rows leaving it) changes nothing."
    s, lg = Sampler(0.8, seed=5, top_p=top_p), _logits(6)
    keys, pos = [11, 3, 7, 0, 42, 9], [20, 21, 5, 5, 60, 8]
    batch = s(lg, pos, keys)
    alone = torch.cat([s(lg[i:i + 1], pos[i:i + 1], keys[i:i + 1]) for i in range(6)])
    assert batch.tolist() == alone.tolist()
    assert s(lg[[4, 0]], [60, 20], [42, 11]).tolist() == [batch[4].item(), batch[0].item()]   # rows dropped, reordered

@pytest.mark.parametrize('top_p', [0.9, 0.3])
def test_evaluation_and_regeneration_share_the_draw(top_p):
    "Evaluation's one generation (no keys) is key 0 of regeneration's batch: the same nucleus draw, token for token."
    s, lg = Sampler(0.7, seed=2, top_p=top_p), _logits(1, 3)
    for p in range(40):
        assert s(lg, [p]).item() == s(lg, [p], keys=[0]).item()

def test_the_nucleus_holds_every_draw_and_k_does_not_change_it():
    "top_p cuts to the likeliest tokens that first hold the mass; looking among k=1 first (then sorting whole) draws the same."
    lg = _logits(1, 7) / 2                    # a nucleus of 19 tokens: found among the 64 likeliest (k=1: sorted whole)
    probs = torch.softmax(lg[0] / 0.9, -1)
    order = probs.argsort(descending=True)
    n = int(((probs[order].cumsum(0) - probs[order]) < 0.5).sum())
    nucleus = set(order[:n].tolist())
    wide, narrow = Sampler(0.9, 1, 0.5), Sampler(0.9, 1, 0.5, k=1)
    draws = [wide(lg, [p], keys=[3]).item() for p in range(300)]
    assert len(nucleus) == 19 and set(draws) <= nucleus and len(set(draws)) > 5
    assert draws == [narrow(lg, [p], keys=[3]).item() for p in range(300)]

def test_keyed_noise_is_a_function_of_its_key():
    assert torch.equal(gumbel_noise(1, 4, V), gumbel_noise(1, 4, V))
    assert not torch.equal(gumbel_noise(1, 4, V), gumbel_noise(1, 4, V, key=2))
    u = keyed_uniform(torch.tensor([123, 456]), torch.arange(20_000))
    assert u.shape == (2, 20_000) and 0 < u.min() and u.max() < 1 and abs(u.mean().item() - 0.5) < 0.01
    assert not torch.equal(u[0], u[1])

def test_greedy_is_the_argmax():
    lg = _logits(4, 9)
    assert Sampler()(lg, [1, 2, 3, 4], keys=[5, 6, 7, 8]).tolist() == lg.argmax(-1).tolist()
    with pytest.raises(ValueError, match='top_p'): Sampler(1.0, top_p=0)
