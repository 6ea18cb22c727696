"Speculative decoding: lossless against plain decoding (greedy and keyed sampling), acceptance accounting, hybrid rollback, DDTree, prompt sets."
import pytest
import torch

from dflash_nb.decoding import (DFlashDraftSession, Generation, Sampler, ScriptedDrafter, TargetSession, build_tree,
                                plain_generate, speculative_generate)
from dflash_nb.promptsets import held_out_prompts, load_prompt_set
from dflash_nb.verdicts import summarize
from dflash_nb.core import fixtures_dir
from dflash_nb.drafter import DFlashDrafter, build_config
from dflash_nb.models import load_target, resolve_target

_MODELS = {}

@pytest.fixture(autouse=True, scope='module')
def one_thread():
    "Tiny models on a shared CPU: one intra-op thread is faster than oversubscribed cores."
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

def target(name):
    if name not in _MODELS: _MODELS[name] = load_target(name)
    return _MODELS[name]

def prompt_of(tok, text='Write a short poem about the sea'):
    return tok(text)['input_ids']

def dflash_session(model, block_size=8, seed=0):
    "A real DFlash drafter (random init) over the target's embedding and head: exercises the real draft path."
    N = model.config.num_hidden_layers
    ids = [1, N // 2, N - 3] if N >= 6 else list(range(min(3, N)))
    cfg = build_config(model.config, mask_token_id=model.config.vocab_size - 1, num_hidden_layers=1,
                       block_size=block_size, target_layer_ids=ids)
    d = DFlashDrafter(cfg).init_weights(seed).eval()
    return DFlashDraftSession(d, model.get_input_embeddings(), model.get_output_embeddings())

def reference_map(prompt, gen):
    return {len(prompt) + i: t for i, t in enumerate(gen.tokens)}


@pytest.mark.parametrize('name', ['tiny-qwen3', 'tiny-qwen3_5', 'smollm2'])
def test_lossless_greedy(name):
    model, tok = target(name)
    prompt = prompt_of(tok)
    n = 8 if name == 'smollm2' else 12
    ref = plain_generate(model, prompt, n)
    assert len(ref.tokens) == n and ref.target_forwards == n
    # the baseline is the real greedy decoding of transformers
    hf = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert hf[0, len(prompt):].tolist() == ref.tokens
    V = model.config.vocab_size
    for drafter in (dflash_session(model), ScriptedDrafter(reference_map(prompt, ref), 8, 3, V)):
        g = speculative_generate(model, drafter, prompt, n)
        assert g.tokens == ref.tokens, type(drafter).__name__
        assert g.target_forwards == 1 + len(g.accept_lengths)          # prefill + one verify forward per cycle
        assert sum(g.accept_lengths) >= n - 1                          # + the first token, from the prefill
    if name == 'tiny-qwen3_5': assert g.refeed_forwards > 0             # the rollback path really ran
    else: assert g.refeed_forwards == 0


@pytest.mark.parametrize('k', [0, 1, 3, 7])
def test_acceptance_accounting(k):
    "A drafter right on exactly the first k slots accepts exactly k + 1 tokens per cycle."
    model, tok = target('tiny-qwen3')
    prompt = prompt_of(tok)
    ref = plain_generate(model, prompt, 20)
    g = speculative_generate(model, ScriptedDrafter(reference_map(prompt, ref), 8, k, model.config.vocab_size), prompt, 20)
    assert g.tokens == ref.tokens
    assert g.accept_lengths[:-1] == [k + 1] * (len(g.accept_lengths) - 1)   # the last cycle may be cut by max_new_tokens
    assert len(g.accept_lengths) == -(-19 // (k + 1))                     # 19 tokens after the prefill's first
    full = Generation(g.tokens, accept_lengths=g.accept_lengths[:-1])   # (the script knows 20 tokens: the last cycle may miss)
    m = summarize([full], [ref], 8)
    assert m['accept_at'][:k] == [1.0] * k                                # slots 1..k always accepted
    if k < 7: assert m['accept_at'][k] == 0.0                            # slot k+1 never
    assert m['tau'] == k + 1 and m['hist'][k] == len(full.accept_lengths)


@pytest.mark.parametrize('name', ['tiny-qwen3', 'tiny-qwen3_5'])
def test_lossless_sampling(name):
    """T > 0: each committed token is argmax(logits/T + G_p) with Gumbel noise keyed by its position p, i.e. an exact
    sample of the target's distribution given its prefix; plain sampling uses the same keyed noise, so the speculative
    output must equal the plain sample token for token, whatever the drafter proposes."""
    model, tok = target(name)
    prompt = prompt_of(tok)
    n = 10
    ref = plain_generate(model, prompt, n, Sampler(0.8, seed=1))
    greedy = plain_generate(model, prompt, n)
    assert ref.tokens != greedy.tokens                                    # sampling really samples
    assert plain_generate(model, prompt, n, Sampler(0.8, seed=2)).tokens != ref.tokens
    for drafter in (dflash_session(model), ScriptedDrafter(reference_map(prompt, ref), 8, 2, model.config.vocab_size)):
        g = speculative_generate(model, drafter, prompt, n, Sampler(0.8, seed=1))
        assert g.tokens == ref.tokens
    assert set(g.accept_lengths[:-1]) == {3}


def test_hybrid_rollback_equals_clean_run():
    model, _ = target('tiny-qwen3_5')
    ids = list(range(20, 34))
    with TargetSession(model, [0, 1, 3]) as s:
        s.forward(ids[:6]); snap = s.snapshot()
        assert snap is not None and s.hybrid
        s.forward(ids[6:12]); s.keep(3, ids[6:12], snap)                 # 3 of 6 kept: restore + re-feed
        a, fa = s.forward(ids[9:12])
        assert (s.length, s.refeeds, s.forwards) == (12, 1, 3)
    with TargetSession(model, [0, 1, 3]) as s:
        s.forward(ids[:9]); b, fb = s.forward(ids[9:12])
    assert torch.allclose(a, b, atol=1e-5) and torch.allclose(fa, fb, atol=1e-5)
    with TargetSession(model, [0]) as s:                                  # without the snapshot the rollback is refused
        s.forward(ids[:6]); s.forward(ids[6:12])
        with pytest.raises(ValueError, match='snapshot'): s.keep(3, ids[6:12], None)


def test_feature_hooks_follow_the_convention():
    "Feature of layer L = HF hidden_states[L+1]; shift -1 reads hidden_states[L] (layer 0 shifted: the embeddings)."
    model, tok = target('tiny-qwen3')
    ids = torch.tensor([prompt_of(tok)])
    hs = model(ids, output_hidden_states=True).hidden_states
    for shift in (0, -1):
        with TargetSession(model, [0, 2], shift) as s:
            _, f = s.forward(ids[0])
        for j, L in enumerate([0, 2]): assert torch.allclose(f[:, j], hs[L + 1 + shift][0], atol=1e-5)
    with pytest.raises(ValueError, match='leave the target'): TargetSession(model, [3], +1)


def test_ddtree_lossless_and_better_than_linear():
    model, tok = target('tiny-qwen3')
    prompt = prompt_of(tok)
    ref = plain_generate(model, prompt, 20)
    sd = ScriptedDrafter(reference_map(prompt, ref), 8, 2, model.config.vocab_size)
    lin = speculative_generate(model, sd, prompt, 20)
    tree = speculative_generate(model, sd, prompt, 20, tree={'budget': 24, 'topk': 2})
    assert tree.tokens == ref.tokens and tree.tau > lin.tau
    g = speculative_generate(model, dflash_session(model), prompt, 20, tree={'budget': 16, 'topk': 3})
    assert g.tokens == ref.tokens
    for T in (0.8,):
        r = plain_generate(model, prompt, 16, Sampler(T, 5))
        assert speculative_generate(model, sd, prompt, 16, Sampler(T, 5), tree={'budget': 16, 'topk': 2}).tokens == r.tokens
    hyb, htok = target('tiny-qwen3_5')
    with pytest.raises(NotImplementedError): speculative_generate(hyb, dflash_session(hyb), prompt_of(htok), 4, tree={'budget': 8})


def test_build_tree_budget_and_order():
    lp = torch.log_softmax(torch.randn(5, 30), -1)
    toks, par, dep = build_tree(lp, 12, 3)
    assert len(toks) == 12 and all(p < i for i, p in enumerate(par))
    score = lambda i: lp[dep[i] - 1, toks[i]].item() + (score(par[i]) if par[i] >= 0 else 0.0)
    s = [score(i) for i in range(12)]
    assert all(s[i] >= s[i + 1] - 1e-6 for i in range(11))               # best first
    assert toks[0] == lp[0].argmax().item()


def test_eos_stops_generation():
    model, tok = target('tiny-qwen3')
    prompt = prompt_of(tok)
    ref = plain_generate(model, prompt, 12)
    eos = ref.tokens[4]
    cut = ref.tokens[:ref.tokens.index(eos) + 1]
    p = plain_generate(model, prompt, 12, eos_ids=[eos])
    g = speculative_generate(model, ScriptedDrafter(reference_map(prompt, ref), 8, 7, model.config.vocab_size), prompt, 12, eos_ids=[eos])
    assert p.tokens == g.tokens == cut and g.stop == p.stop == 'eos'


def test_prompt_sets(tmp_path):
    assert load_prompt_set('mt_bench', 3, fixtures=tmp_path, allow_hub=False)[0] == []
    with pytest.raises(ValueError): load_prompt_set('gsm9k', 3, fixtures=tmp_path, allow_hub=False)
    if fixtures_dir() is None: pytest.skip('no fixtures')
    mt, _ = load_prompt_set('mt_bench', 5, allow_hub=False)
    he, _ = load_prompt_set('humaneval', 2, allow_hub=False)
    assert len(mt) == 5 and all(len(i['turns']) == 2 for i in mt) and len({i['category'] for i in mt}) >= 3
    assert len(he) == 2 and he[0]['id'] == 'HumanEval/0' and 'def ' in he[0]['turns'][0]


def test_held_out_prompts(tmp_path):
    from datasets import Dataset
    Dataset.from_dict({'id': ['a', 'b', 'c', 'd'], 'input_ids': [[1, 2, 3, 4], [5, 6, 7], [8, 9], [1, 1]],
                       'loss_mask': [[0, 0, 1, 1], [0, 1, 1], [0, 0], [1, 1]]}).save_to_disk(str(tmp_path / 'ds'))
    items, rej = held_out_prompts(tmp_path / 'ds', exclude_ids=['b'])
    assert items == [{'id': 'a', 'input_ids': [1, 2]}]
    assert sorted(r['id'] for r, _ in rej) == ['c', 'd'] and all(':' in why for _, why in rej)


# --- issue 13: any drafter on any prompts, enforced losslessness, prompt lookup ---------------------------------

import json
from dflash_nb.cli import main as cli_main
from dflash_nb.core import read_prompt_file, write_jsonl
from dflash_nb.drafter import export_drafter
from dflash_nb.decoding import LosslessError, PromptLookupDrafter
from dataclasses import replace
from dflash_nb.evaluate import Bookkeeping, EvalGeneration, evaluate_prompts

GREEDY8 = EvalGeneration(max_new_tokens=8, temperature=0.0, seed=0, enable_thinking=False, lossless='enforce')   # lossless enforced

REPETITIVE = 'Repeat after me: red green blue, red green blue, red green blue, red green blue, red green'


def tiny_drafter_dir(path, name='tiny-qwen3', **kw):
    "A DFlash drafter folder (random init) for a tiny target, exported in the checkpoint format."
    model, _ = target(name)
    cfg = build_config(model.config, mask_token_id=model.config.vocab_size - 1, num_hidden_layers=1, block_size=4,
                       target_layer_ids=kw.pop('target_layer_ids', [0, 2]), **kw)
    return export_drafter(DFlashDrafter(cfg).init_weights(0), path, 'float32')


def run_cli(capsys, *args):
    code = cli_main(['evaluate', *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_evaluate_cli_on_a_tiny_drafter(tmp_path, capsys):
    d = tiny_drafter_dir(tmp_path / 'drafter')
    write_jsonl(tmp_path / 'mine.jsonl', [{'prompt': 'Hello there'}, {'id': 'rep', 'prompt': REPETITIVE},
                                          {'id': 'c', 'source': 's', 'messages': [{'role': 'user', 'content': 'Hi'},
                                           {'role': 'assistant', 'content': 'Hey'}, {'role': 'user', 'content': 'More?'},
                                           {'role': 'assistant', 'content': 'dropped: after the last user turn'}]}])
    code, out, err = run_cli(capsys, d, '--target', 'tiny-qwen3', '--prompts', tmp_path / 'mine.jsonl', '--max-new-tokens', 8,
                             '--device', 'cpu', '--out', tmp_path / 'out', '--variants', 'trained,untrained,prompt_lookup')
    assert code == 0, err
    ev = json.loads((tmp_path / 'out' / 'eval.json').read_text())
    m = ev['sets']['mine']['variants']
    assert set(m) == {'trained', 'untrained', 'prompt_lookup'}
    for v in m.values():
        assert v['prompts'] == 3 and v['identical'] == 1.0 and v['tau'] >= 1.0 and len(v['accept_at']) == 3 and v['speedup'] > 0
    assert ev['block_size'] == 4 and (tmp_path / 'out' / 'report.md').read_text().count('| trained |') == 1
    recs = [json.loads(l) for l in (tmp_path / 'out' / 'records.jsonl').read_text().splitlines()]
    assert len(recs) == 3 * 4 and {r['id'] for r in recs} == {'mine/1', 'rep', 'c'}
    # --block-size: fewer drafts per cycle
    code, _, err = run_cli(capsys, d, '--target', 'tiny-qwen3', '--prompts', tmp_path / 'mine.jsonl', '--max-new-tokens', 6,
                           '--max-prompts', 1, '--block-size', 2, '--device', 'cpu', '--out', tmp_path / 'out2')
    assert code == 0, err
    ev2 = json.loads((tmp_path / 'out2' / 'eval.json').read_text())
    assert ev2['block_size'] == 2 and len(ev2['sets']['mine']['variants']['trained']['accept_at']) == 1


def test_evaluate_cli_bad_input(tmp_path, capsys):
    good = tmp_path / 'p.jsonl'; write_jsonl(good, [{'prompt': 'Hi'}])
    (tmp_path / 'empty.jsonl').write_text('\n')
    broken = tmp_path / 'broken'; broken.mkdir(); (broken / 'config.json').write_text('{"hidden_size": ')
    d = tiny_drafter_dir(tmp_path / 'drafter')
    import copy                                           # a drafter for a deeper target (12 layers, features at 9)
    deep = copy.deepcopy(target('tiny-qwen3')[0].config); deep.num_hidden_layers = 12
    if getattr(deep, 'layer_types', None): deep.layer_types = [deep.layer_types[0]] * 12
    wide = export_drafter(DFlashDrafter(build_config(deep, mask_token_id=0, num_hidden_layers=1, block_size=4,
                                                     target_layer_ids=[0, 9])).init_weights(0), tmp_path / 'wide', 'float32')
    cases = [((tmp_path / 'missing', good), 'does not exist'),
             ((broken, good), 'not a readable DFlash drafter folder'),
             ((wide, good), 'made for a target of 12 layers; this target has 4'),
             ((d, tmp_path / 'empty.jsonl'), 'empty prompt file')]
    for (drafter, prompts), msg in cases:
        code, out, err = run_cli(capsys, drafter, '--target', 'tiny-qwen3', '--prompts', prompts, '--device', 'cpu',
                                 '--out', tmp_path / 'o')
        assert code != 0 and msg in err, (drafter, err)
        assert len(err.strip().splitlines()) == 1, err                            # one line, no traceback
    # a drafter made for another target (SmolLM2: hidden size 576): it does not fit tiny-qwen3 (64)
    from transformers import AutoConfig
    from dflash_nb.models import resolve_target
    other = build_config(AutoConfig.from_pretrained(resolve_target('smollm2')), mask_token_id=0, num_hidden_layers=1, block_size=4)
    export_drafter(DFlashDrafter(other).init_weights(0), tmp_path / 'other', 'bfloat16')
    code, _, err = run_cli(capsys, tmp_path / 'other', '--target', 'tiny-qwen3', '--prompts', good, '--device', 'cpu', '--out', tmp_path / 'o')
    assert code != 0 and 'hidden_size 576 does not fit the target (hidden_size 64)' in err and len(err.strip().splitlines()) == 1, err


class BrokenVerify:
    """Patch a target so that its multi-position forwards (the verify forwards; prefill and plain steps keep only the
    last logits) pick `token` at the block's first position: a verify kernel that disagrees with plain decoding."""
    def __init__(self, model, token):
        self.h = model.lm_head.register_forward_hook(self.hook); self.token = token
    def hook(self, mod, args, out):
        if out.shape[1] > 1: out = out.clone(); out[:, 0, self.token] += 1e4
        return out
    def remove(self): self.h.remove()


def test_lossless_failure_is_detected_and_named(tmp_path, monkeypatch, capsys):
    model, tok = target('tiny-qwen3')
    items = [{'id': 'p0', 'messages': [{'role': 'user', 'content': 'Write a short poem about the sea'}]}]
    variants = {'trained': (dflash_session(model, block_size=4), 0)}
    ok = evaluate_prompts(model, tok, items, variants, GREEDY8, book=Bookkeeping(log=None))      # unpatched: passes
    assert ok['trained'][0].tokens == ok['plain'][0].tokens
    plain = ok['plain'][0].tokens
    bad = (plain[1] + 1) % model.config.vocab_size
    b = BrokenVerify(model, bad)
    try:
        with pytest.raises(LosslessError, match=r'prompts/p0 turn 0, variant trained: output differs from plain decoding at generated token (\d+) \(position \d+\)'):
            evaluate_prompts(model, tok, items, variants, GREEDY8, book=Bookkeeping(log=None))
        # the command fails too, with one line naming the prompt and the position
        d = tiny_drafter_dir(tmp_path / 'drafter')
        write_jsonl(tmp_path / 'one.jsonl', [{'id': 'p0', 'prompt': 'Write a short poem about the sea'}])
        import dflash_nb.evaluate as E
        monkeypatch.setattr(E, 'load_target', lambda *a, **k: (model, tok))
        code, _, err = run_cli(capsys, d, '--target', 'tiny-qwen3', '--prompts', tmp_path / 'one.jsonl', '--max-new-tokens', 8,
                               '--device', 'cpu', '--out', tmp_path / 'o', '--variants', 'trained')
        assert code == 1 and 'one/p0' in err and 'differs from plain decoding at generated token' in err, err
        assert 'target logits there' in err and 'Traceback' not in err, err                   # plain's token is the target's choice
        assert len([l for l in err.splitlines() if 'error' in l]) == 1, err
        # report mode counts it instead of failing
        r = evaluate_prompts(model, tok, items, variants, replace(GREEDY8, lossless='report'), book=Bookkeeping(log=None))
        assert r['trained'][0].tokens != r['plain'][0].tokens
        d = r['trained'][0].difference                                   # classified: a real difference, not a tie
        assert d['tie'] is False and d['gap'] > 1e-3 and d['plain'] == r['plain'][0].tokens[d['at']], d
    finally: b.remove()


class RoundedVerify(BrokenVerify):
    "Verify forwards nudge `token` by `eps` at the block's first position: bf16 rounding of a verify kernel, in miniature."
    def __init__(self, model, token, eps=1e-3):
        super().__init__(model, token); self.eps = eps
    def hook(self, mod, args, out):
        if out.shape[1] > 1: out = out.clone(); out[:, 0, self.token] += self.eps
        return out


def test_a_numeric_tie_is_counted_not_failed():
    """Where the target scores two tokens the same, a verify forward that rounds the other way picks the other one.
    That is a numeric tie: the evaluation does not stop, it counts the tie and says so; the report calls it
    lossless up to rounding. A real difference (the test above) still fails."""
    import copy
    from dflash_nb.verdicts import lossless_verdict
    model, tok = target('tiny-qwen3')
    items = [{'id': 'p0', 'messages': [{'role': 'user', 'content': 'Write a short poem about the sea'}]}]
    plain = evaluate_prompts(model, tok, items, {}, replace(GREEDY8, lossless='report'), book=Bookkeeping(log=None))['plain'][0].tokens
    twin = copy.deepcopy(model)
    b = plain[1]; a = b + 1                                              # argmax breaks the tie towards b (the lower id)
    with torch.no_grad(): twin.lm_head.weight[a] = twin.lm_head.weight[b]
    variants = {'trained': (dflash_session(twin, block_size=4), 0)}
    hook = RoundedVerify(twin, a)
    try:
        r = evaluate_prompts(twin, tok, items, variants, GREEDY8, book=Bookkeeping(log=None))   # no raise
    finally: hook.remove()
    g, p = r['trained'][0], r['plain'][0]
    assert p.tokens[:2] == plain[:2] and g.tokens[1] == a != p.tokens[1], (g.tokens, p.tokens)
    assert g.difference['at'] == 1 and g.difference['tie'] is True and abs(g.difference['gap']) < 1e-4, g.difference
    m = summarize(r['trained'], r['plain'], 4)
    assert (m['identical'], m['ties']) == (0.0, 1)
    v = lossless_verdict({'s': {'variants': {'trained': m}}}, 0.0)
    assert v.startswith('- **Lossless up to rounding**: 0 of 1 outputs') and 'numeric tie' in v, v


def test_prompt_lookup_lossless_and_useful():
    model, tok = target('smollm2')
    prompt = prompt_of(tok, REPETITIVE)
    ref = plain_generate(model, prompt, 24)
    g = speculative_generate(model, PromptLookupDrafter(8), prompt, 24)
    assert g.tokens == ref.tokens and g.tau > 1.5, g.tau
    assert g.target_forwards < ref.target_forwards
    # on the tiny hybrid target too (rollback path) and when nothing matches (drafts nothing: plain steps)
    hm, ht = target('tiny-qwen3_5')
    hp = prompt_of(ht, REPETITIVE)
    assert speculative_generate(hm, PromptLookupDrafter(8), hp, 16).tokens == plain_generate(hm, hp, 16).tokens
    assert PromptLookupDrafter(4).draft(5, context=[1, 2, 3, 5])[0].tolist() == []


def test_read_prompt_file_layouts(tmp_path):
    write_jsonl(tmp_path / 'a.jsonl', [{'prompt': 'x'}, {'question_id': 1, 'turns': ['t1', 't2']}, {'task_id': 'H/0', 'prompt': 'def f():'}])
    assert [r['kind'] for r in read_prompt_file(tmp_path / 'a.jsonl')] == ['prompt', 'mt_bench', 'humaneval']
    write_jsonl(tmp_path / 'b.jsonl', [{'prompt': '   '}])
    with pytest.raises(ValueError, match=r'b.jsonl:1: prompt is empty'): read_prompt_file(tmp_path / 'b.jsonl')
    (tmp_path / 'c.jsonl').write_text('{"prompt": "ok"}\n{not json\n')
    with pytest.raises(ValueError, match=r'c.jsonl:2: invalid JSON'): read_prompt_file(tmp_path / 'c.jsonl')


def test_control_prompts_limit_a_variant_to_the_first_prompts():
    "`limits` (the stage's `control_prompts`) runs a variant on the first K prompts only, summarized against their plain runs."
    from dflash_nb.core import Quarantine
    from dflash_nb.evaluate import evaluate_set
    model, tok = target('tiny-qwen3')
    items = [{'id': f'p{i}', 'messages': [{'role': 'user', 'content': f'Count to {i + 3}'}]} for i in range(3)]
    variants = {'trained': (dflash_session(model, block_size=4), 0), 'untrained': (dflash_session(model, block_size=4), 0)}
    gen = EvalGeneration(max_new_tokens=6, temperature=0.0, seed=0, enable_thinking=False, max_prompt_tokens=4096,
                         max_context_tokens=1024, lossless='enforce', limits={'untrained': 1}, block_size=4)
    res, gens = evaluate_set(model, tok, 'few', items, variants, gen, Bookkeeping(quarantine=Quarantine(None), log=None))
    assert [len(gens[v]) for v in ('plain', 'trained', 'untrained')] == [3, 3, 1]
    assert res['variants']['trained']['prompts'] == 3 and res['variants']['untrained']['prompts'] == 1
    assert res['variants']['untrained']['identical'] == 1.0
    assert res['variants']['untrained']['tokens'] == len(gens['plain'][0].tokens)


def test_prompt_file_from_the_package_data():
    "`pkg:NAME` (what configs/smollm2_quality.yaml uses) names a file shipped in dflash_nb/data, for the stage and the command."
    from dflash_nb.evaluate import load_prompt_file
    from dflash_nb.core import expand_path, prompt_set_name
    items, src = load_prompt_file('pkg:unseen_prompts.jsonl', 3)
    assert len(items) == 3 and src.endswith('dflash_nb/data/unseen_prompts.jsonl')
    assert prompt_set_name(expand_path('pkg:unseen_prompts.jsonl')) == 'unseen_prompts'


def test_mtp_variant_drafts_with_the_targets_own_layer(tmp_path, capsys):
    """Issue 48.6: `--variants mtp` drafts with the target's multi-token-prediction layer (a tiny Qwen3.5-shaped target
    given a seeded one: the fixtures have none), losslessly beside the trained drafter; a target without one is refused
    in one line naming what it lacks."""
    from dflash_nb.mtp import with_mtp_weights
    tgt = with_mtp_weights(resolve_target('tiny-qwen3_5'), tmp_path / 'tiny_mtp')
    d = tiny_drafter_dir(tmp_path / 'drafter', 'tiny-qwen3_5')
    write_jsonl(tmp_path / 'p.jsonl', [{'prompt': 'Hello there'}, {'id': 'rep', 'prompt': REPETITIVE}])
    code, out, err = run_cli(capsys, d, '--target', tgt, '--prompts', tmp_path / 'p.jsonl', '--max-new-tokens', 10,
                             '--device', 'cpu', '--out', tmp_path / 'out', '--variants', 'trained,mtp')
    assert code == 0, err
    m = json.loads((tmp_path / 'out' / 'eval.json').read_text())['sets']['p']['variants']
    assert set(m) == {'trained', 'mtp'} and m['mtp']['identical'] == 1.0 and m['mtp']['tau'] >= 1.0, m
    recs = [json.loads(l) for l in (tmp_path / 'out' / 'records.jsonl').read_text().splitlines()]
    assert {len(r['drafted']) and max(r['drafted']) for r in recs if r['variant'] == 'mtp'} == {3}   # MTP_STEPS a cycle
    code, out, err = run_cli(capsys, d, '--target', 'tiny-qwen3_5', '--prompts', tmp_path / 'p.jsonl', '--max-new-tokens', 4,
                             '--device', 'cpu', '--out', tmp_path / 'out2', '--variants', 'mtp')
    assert code != 0 and 'has no mtp.* weights' in err + out, (out, err)
