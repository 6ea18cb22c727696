#!/usr/bin/env python
"""Where a trained drafter's decoded tau is lost: generalization or serving.

    python bench/diagnose_gap.py runs/smollm2_quality [--n 20] [--checkpoints] [--out bench/results/gap.json]
    python bench/diagnose_gap.py runs/smollm2_quality --eval-rows runs/evalsets_rows   # before 90_evaluate has run

One measure, teacher-forced tau (`search_heldout.heldout_tau`: 64 anchors a row, labels = the row's own next
tokens), on three kinds of rows, beside the decoded tau that `90_evaluate` measured:

- **trained**: the first `--n` rows of the run's features (rows the drafter was trained on);
- **each evaluation set**: its prompts and the target's greedy continuation taken from `90_evaluate/records.jsonl`
  (the `plain` variant), with features computed as `60_hidden_states` does (its layers and dtype).

Trained high and evaluation sets low: the drafter does not generalize to those prompts (a data gap). Evaluation sets
teacher-forced high but decoded low: drafting loses what training learned (a train/serve mismatch).
With `--checkpoints`, the replayed decoding tau of every kept checkpoint too (`bench_quality.checkpoint_drafters`):
decoded tau against training steps in a minute a checkpoint, where decoding them for real takes most of an hour.
Each walk is also split by whether prompt lookup would have drafted a right first token at that cycle (the output
or the prompt repeats itself there): the drafter's and prompt lookup's tokens a cycle on each side say whether the
drafter copies from its context where copying pays.
Writes JSON and prints a table.
"""
import argparse, json, sys
from pathlib import Path
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'bench'))
from search_heldout import heldout_tau, block_leads
from dflash_nb.core import read_json
from dflash_nb.drafter import anchor_candidates, load_drafter
from dflash_nb.decoding import PromptLookupDrafter, first_difference; from dflash_nb.promptsets import load_prompt_set, load_prompt_file, render_prompt
from dflash_nb.features import FeatureStore, extract_features
from dflash_nb.models import load_target, load_tokenizer
from dflash_nb.target_weights import load_target_head


def eval_items(run: Path, params: dict) -> dict:
    "`{set: {id: messages of the first turn}}` for the sets the evaluation ran."
    out = {}
    for name in params['prompt_sets']:
        items, _ = load_prompt_set(name)
        out[name] = {it['id']: [{'role': 'user', 'content': it['turns'][0]}] for it in items}
    for f in params['prompt_files']:
        items, _ = load_prompt_file(f)
        out[Path(f.split(':')[-1]).stem] = {it['id']: it['messages'] for it in items}
    return out


def eval_rows(run: Path, tok, target, layer_ids, params: dict) -> dict:
    "Per set, rows `{input_ids, loss_mask, hidden_states}`: a prompt and the target's plain greedy continuation."
    items, rows = eval_items(run, params), {}
    for line in open(run / '90_evaluate' / 'records.jsonl'):
        r = json.loads(line)
        if r['variant'] != 'plain' or r.get('turn', 0) not in (0, 1): continue
        msgs = items.get(r['set'], {}).get(r['id'])
        if msgs is None: continue
        prompt = render_prompt(tok, msgs, params['enable_thinking'])
        if len(prompt) != r['prompt_tokens']: print(f"skip {r['key']}: prompt {len(prompt)} != {r['prompt_tokens']}"); continue
        ids = torch.tensor(prompt + list(r['tokens']))
        with torch.inference_mode(): feats = extract_features(target, ids[None], layer_ids)[0]
        rows.setdefault(r['set'], []).append({'id': r['key'], 'input_ids': ids, 'hidden_states': feats.to(torch.bfloat16),
                                              'loss_mask': torch.tensor([0] * len(prompt) + [1] * len(r['tokens']))})
    return rows


EVALSET_IDS = {'mt_bench': lambda i: 'evalsets/mtbench/' + i.split('/', 1)[1],       # bench/evalset_prompts.py's ids
               'humaneval': lambda i: 'evalsets/humaneval/' + i, 'unseen_prompts': lambda i: 'evalsets/unseen/' + i}


def feature_sets(run: Path, layer_ids: list, n: int) -> dict:
    """Per evaluation set, the rows of RUN's features (bench/configs/evalsets_rows.yaml: the evaluation's prompts
    answered greedily by the target, `regenerate` in bf16) for the `n` prompts `90_evaluate` takes (evenly spread).
    Its HumanEval rows carry the source normalizer's instruction, not the evaluation's."""
    store = FeatureStore(run / '60_hidden_states' / 'features')
    if store.layer_ids != layer_ids: raise SystemExit(f'{run}: layers {store.layer_ids}, the drafter reads {layer_ids}')
    pos = {rid: i for i, rid in enumerate(store.ids)}
    items = {'mt_bench': load_prompt_set('mt_bench', n)[0], 'humaneval': load_prompt_set('humaneval', n)[0],
             'unseen_prompts': load_prompt_file('pkg:unseen_prompts.jsonl', n)[0]}
    return {name: [store[pos[EVALSET_IDS[name](it['id'])]] for it in its if EVALSET_IDS[name](it['id']) in pos]
            for name, its in items.items()}


def pl_lead(ids: list, p: int, block_size: int) -> int:
    "How many tokens prompt lookup (as `90_evaluate` runs it) would have accepted drafting at anchor `p` of `ids`."
    got = PromptLookupDrafter(block_size).draft(ids[p], context=ids[:p + 1])[0].tolist()
    d = first_difference(got, ids[p + 1:p + 1 + len(got)])
    return len(got) if d is None else d


def _walk(lead: dict, ids: list, p: int, block_size: int, split: dict | None, both: bool) -> tuple:
    """`(tokens, cycles)` of one row's replayed decoding from anchor `p` (the first response token comes from the
    prefill, in no cycle), given the drafter's `lead` at each anchor; `split` as in `walk_tau`."""
    tokens = cycles = 0
    while p < len(ids) - 1:
        if p not in lead: p += 1; continue            # not an assistant token (another turn): not decoded
        left = len(ids) - 1 - p
        pl = min(pl_lead(ids, p, block_size) + 1, left)
        step = max(min(int(lead[p]) + 1, left), pl if both else 0); tokens += step; cycles += 1
        if split is not None: c = split.setdefault(pl > 1, [0, 0, 0]); c[0] += 1; c[1] += step; c[2] += pl
        p += step
    return tokens, cycles


@torch.no_grad()
def walk_tau(drafter, rows, emb, head, mask_id, dcfg, split: dict) -> tuple:
    """`(tau, both_tau)`. Decoding replayed teacher-forced: from each row's first response token, draft at anchor p,
    accept the leading correct slots, step to p + lead + 1 (the accepted tokens and the target's own). tau = tokens /
    cycles over all rows, as `90_evaluate` pools it (positions outside the assistant turns are skipped, not decoded).
    Anchors visit the positions decoding visits, not uniformly drawn ones: where acceptance comes in bursts (code),
    the uniform mean overstates decoding.
    `split` collects, per cycle, whether prompt lookup would have drafted a correct first token there:
    `{copyable: [cycles, drafter tokens, prompt-lookup tokens]}`. `both_tau`: each cycle verifies the drafter's and
    prompt lookup's drafts together (a two-branch tree, one target forward) and keeps the longer accepted run."""
    drafter.eval(); tot = {False: [0, 0], True: [0, 0]}
    for r in rows:
        an = anchor_candidates(r['loss_mask'], dcfg.block_size, full_block=False)
        lead = dict(zip(an.tolist(), block_leads(drafter, r, an, emb, head, mask_id, dcfg, 0).tolist()))
        for both in (False, True):
            t, c = _walk(lead, r['input_ids'].tolist(), int(an[0]), dcfg.block_size, None if both else split, both)
            tot[both][0] += t; tot[both][1] += c
    return tuple(t / max(c, 1) for t, c in (tot[False], tot[True]))


def copy_rows(split: dict) -> dict:
    "The drafter's and prompt lookup's tokens a cycle where prompt lookup's first token is right, and elsewhere."
    out = {}
    for k, name in ((True, 'copyable'), (False, 'not_copyable')):
        n, d, pl = split.get(k, [0, 0, 0])
        out[name] = {'cycles': n, 'drafter': round(d / max(n, 1), 3), 'prompt_lookup': round(pl / max(n, 1), 3)}
    return out


def decoded_tau(run: Path) -> dict:
    "The evaluation's pooled decoded tau of the trained drafter, per set."
    ev = read_json(run / '90_evaluate' / 'eval.json')
    return {s: v['variants']['trained']['tau'] for s, v in ev['sets'].items() if 'trained' in v.get('variants', {})}


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('run'); p.add_argument('--n', type=int, default=20); p.add_argument('--out', default=None)
    p.add_argument('--checkpoints', action='store_true', help="also every kept checkpoint's replayed decoding tau")
    p.add_argument('--eval-rows', default=None, help="a run of bench/configs/evalsets_rows.yaml: the evaluation's "
                   "prompts and the target's greedy answers from its features, for a run whose 90_evaluate has not run "
                   "(no decoded tau column)")
    p.add_argument('--eval-run', default=None, help="the run whose 90_evaluate records give the prompts and continuations "
                   "(default: RUN; another run's: no decoded tau column, its drafter is not this one)")
    a = p.parse_args(); run = Path(a.run); ev = Path(a.eval_run or a.run)
    torch.set_num_threads(2)
    store = FeatureStore(run / '60_hidden_states' / 'features')
    drafter = load_drafter(run / '80_train' / 'drafter').float(); dcfg = drafter.config
    emb, head = load_target_head('smollm2')
    mask_id = dcfg.mask_token_id
    if a.eval_rows: evs = feature_sets(Path(a.eval_rows), store.layer_ids, a.n)
    else:
        tok = load_tokenizer('smollm2'); target = load_target('smollm2', dtype=torch.bfloat16)[0]
        evs = eval_rows(ev, tok, target, store.layer_ids, read_json(ev / '90_evaluate' / 'manifest.json')['params'])
    sets = {'trained rows': [store[i] for i in store.ids[:a.n]], **evs}
    dec, res, curve = decoded_tau(run) if ev == run and not a.eval_rows else {}, [], []
    if a.checkpoints:
        from bench_quality import checkpoint_drafters
        for step, d in checkpoint_drafters(run):
            c = {'step': step}; curve.append(c)
            for n, rows in sets.items():
                split = {}; c[n] = round(walk_tau(d.float(), rows, emb, head, mask_id, dcfg, split)[0], 3)
                c[n + ' (copyable cycles)'] = copy_rows(split)['copyable']['drafter']
            print(curve[-1], flush=True)
    for name, rows in sets.items():
        tau, acc = heldout_tau(drafter, rows, emb, head, mask_id, dcfg)
        split = {}; walk, both = walk_tau(drafter, rows, emb, head, mask_id, dcfg, split)
        res.append({'rows': name, 'n': len(rows), 'teacher_forced_tau': round(tau, 3), 'slot1': round(acc[0], 3),
                    'slot2': round(acc[1], 3), 'walk_tau': walk and round(walk, 3), 'decoded_tau': dec.get(name),
                    'both_walk_tau': round(both, 3),
                    **copy_rows(split)})
        print(res[-1], flush=True)
    print('\n| rows | n | teacher-forced tau (64 random anchors) | slot 1 | slot 2 | teacher-forced, decoding\'s walk | decoded tau (90_evaluate) |')
    print('|---|---|---|---|---|---|---|')
    for r in res: print(f"| {r['rows']} | {r['n']} | {r['teacher_forced_tau']} | {r['slot1']} | {r['slot2']} | {r['walk_tau'] or '—'} | {r['decoded_tau'] or '—'} |")
    print('\n| rows | cycles where prompt lookup drafts a right first token | drafter there | prompt lookup there | other cycles | drafter there | prompt lookup there | walk verifying both drafts (two-branch tree) |')
    print('|---|---|---|---|---|---|---|---|')
    for r in res:
        c, o = r['copyable'], r['not_copyable']
        print(f"| {r['rows']} | {c['cycles']} | {c['drafter']} | {c['prompt_lookup']} | {o['cycles']} | {o['drafter']} | {o['prompt_lookup']} | {r['both_walk_tau']} |")
    if curve:
        cols = [k for k in curve[0] if k != 'step']
        print('\n| step | ' + ' | '.join(cols) + ' |\n|---|' + '---|' * len(cols))
        for c in curve: print(f"| {c['step']} | " + ' | '.join(str(c[n]) for n in cols) + ' |')
    out = Path(a.out or ROOT / 'bench' / 'results' / 'gap.json')
    out.write_text(json.dumps({'command': 'python bench/diagnose_gap.py ' + ' '.join(sys.argv[1:]), 'run': str(run),
                               'results': res, 'checkpoints': curve}, indent=2) + '\n')
    print(f'wrote {out}')


if __name__ == '__main__':
    main()
