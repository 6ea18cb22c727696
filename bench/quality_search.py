#!/usr/bin/env python
"""What raises tau per CPU-minute: train drafter variants on one run's offline features and measure real tau.

    # a drafter variant, trained on runs/X/60_hidden_states/features, snapshots every 100 steps:
    python bench/quality_search.py train runs/X --out bench/results/search/NAME --layers 1 --init target \
        --lr 6e-4 --anchors 16 --steps 600 --snap 100
    # real speculative decoding (SmolLM2 float32, greedy) of drafter folders on MT-Bench / HumanEval prompts:
    python bench/quality_search.py eval bench/results/search/NAME/step-000600 ... --n 8 --max-new-tokens 64

`train` writes `metrics.jsonl` (the trainer's log) and one exported drafter per snapshot; `eval` prints one line
per drafter and set (tau, P(slot 1..3), identical-to-plain) and appends them to `bench/results/search.jsonl`.
"""
import argparse, json, os, sys, time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def cmd_train(a):
    from transformers import AutoConfig
    from dflash_nb.core import seed_everything
    from dflash_nb.drafter import DFlashDrafter, build_config, export_drafter, resolve_mask_token_id
    from dflash_nb.features import FeatureStore
    from dflash_nb.models import load_tokenizer, resolve_target
    from dflash_nb.train import Trainer, TrainConfig
    from dflash_nb.target_weights import load_target_head, init_drafter_from_target
    torch.set_num_threads(a.threads)
    seed_everything(a.seed)
    data = FeatureStore(Path(a.run) / '60_hidden_states' / 'features')
    tok = load_tokenizer('smollm2')
    tcfg = AutoConfig.from_pretrained(resolve_target('smollm2'))
    mask_id = resolve_mask_token_id(tok, tcfg.vocab_size, '<empty_output>')
    dcfg = build_config(tcfg, mask_id, num_hidden_layers=a.layers, block_size=16, target_layer_ids=data.layer_ids)
    dr = DFlashDrafter(dcfg).init_weights(a.seed)
    from dflash_nb.train import eligible_rows
    rows = eligible_rows(data, 16, True)[0][:a.rows] if a.rows else None
    if a.init == 'target-nocal': init_drafter_from_target(dr, 'smollm2', log=print)
    if a.init == 'target': init_drafter_from_target(dr, 'smollm2', features=data[(rows or eligible_rows(data, 16, True)[0])[0]]['hidden_states'], log=print)
    emb, head = load_target_head('smollm2')
    cfg = TrainConfig(epochs=a.epochs, lr=a.lr, num_anchors=a.anchors, max_steps=a.steps, log_every=a.log_every,
                      ckpt_every=0, seed=a.seed, warmup_ratio=a.warmup, gamma=a.gamma, batch_size=a.batch_size)
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    tr = Trainer(dr, emb, head, data, cfg, out_dir=None, rows=rows, log=print)
    log = []
    t0 = time.time()
    while tr.step < tr.total_steps:
        r = tr.fit(resume=False, stop_after=a.snap)
        tokens = sum(len(data[i]['input_ids']) for i in tr.rows) * tr.step / max(tr.steps_per_epoch, 1)
        d = export_drafter(tr.model, out / f'step-{tr.step:06d}', 'float32')
        e = {'step': tr.step, 'seconds': round(time.time() - t0, 1), 'train_tokens': int(tokens),
             'last': tr.history[-1] if tr.history else None, 'drafter': str(d)}
        log.append(e); print(json.dumps({k: e[k] for k in ('step', 'seconds', 'train_tokens')}), flush=True)
        tr.model.train()
        if r.get('stopped') != 'stop_after': break
    json.dump({'args': vars(a), 'rows': len(tr.rows), 'total_steps': tr.total_steps, 'snapshots': log,
               'history': tr.history}, open(out / 'train.json', 'w'), indent=1)


def load_items(name, n):
    from dflash_nb.evaluate import load_prompt_set
    if name in ('mt_bench', 'humaneval'):
        items, _ = load_prompt_set(name, n, allow_hub=False)
        for it in items: it['turns'] = it['turns'][:1]
        return items
    rows = [json.loads(l) for l in open(name) if l.strip()]
    return [{'id': r.get('id', i), 'turns': [r['prompt']]} for i, r in enumerate(rows)][:n]


def cmd_eval(a):
    from dflash_nb.drafter import load_drafter
    from dflash_nb.evaluate import Bookkeeping, DFlashDraftSession, EvalGeneration, evaluate_prompts
    from dflash_nb.verdicts import summarize
    from dflash_nb.models import load_target
    torch.set_num_threads(a.threads)
    model, tok = load_target('smollm2', device='cpu')
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    variants = {}
    for p in a.drafters:
        if p == 'prompt_lookup':   # the training-free baseline
            from dflash_nb.evaluate import PromptLookupDrafter
            variants[p] = (PromptLookupDrafter(16), 0); continue
        d = load_drafter(p, device='cpu', dtype=torch.float32)
        variants[p] = (DFlashDraftSession(d, emb, head), a.shift)
    out = Path(a.log); out.parent.mkdir(parents=True, exist_ok=True)
    for sname in a.sets:
        items = load_items(sname, a.n)
        t0 = time.time()
        gens = evaluate_prompts(model, tok, items, variants, EvalGeneration(max_new_tokens=a.max_new_tokens, temperature=0.0, seed=0, enable_thinking=False, lossless='report'),
                                set_name=sname, book=Bookkeeping(log=None))
        for v in variants:
            m = summarize(gens[v], gens['plain'], 16)
            rec = {'drafter': v, 'set': sname, 'n': len(items), 'max_new_tokens': a.max_new_tokens, 'shift': a.shift,
                   'tau': m['tau'], 'accept_at': m['accept_at'][:4], 'identical': m['identical'], 'speedup': m['speedup'],
                   'seconds': round(time.time() - t0, 1)}
            print(json.dumps(rec), flush=True)
            with open(out, 'a') as f: f.write(json.dumps(rec) + '\n')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest='cmd', required=True)
    t = sub.add_parser('train')
    t.add_argument('run'); t.add_argument('--out', required=True)
    t.add_argument('--layers', type=int, default=1); t.add_argument('--init', choices=('random', 'target', 'target-nocal'), default='random')
    t.add_argument('--lr', type=float, default=6e-4); t.add_argument('--anchors', type=int, default=16)
    t.add_argument('--steps', type=int, default=600); t.add_argument('--snap', type=int, default=100)
    t.add_argument('--epochs', type=int, default=100); t.add_argument('--warmup', type=float, default=0.04)
    t.add_argument('--gamma', type=float, default=None); t.add_argument('--batch-size', type=int, default=1)
    t.add_argument('--rows', type=int, default=None, help='train on the first N eligible rows only')
    t.add_argument('--log-every', type=int, default=50); t.add_argument('--seed', type=int, default=0)
    t.add_argument('--threads', type=int, default=1)
    e = sub.add_parser('eval')
    e.add_argument('drafters', nargs='+', help='drafter folders, or prompt_lookup')
    e.add_argument('--sets', nargs='+', default=['mt_bench', 'humaneval'])
    e.add_argument('--n', type=int, default=8); e.add_argument('--max-new-tokens', type=int, default=64)
    e.add_argument('--shift', type=int, default=0); e.add_argument('--threads', type=int, default=1)
    e.add_argument('--log', default=str(ROOT / 'bench' / 'results' / 'search.jsonl'))
    a = ap.parse_args()
    {'train': cmd_train, 'eval': cmd_eval}[a.cmd](a)


if __name__ == '__main__':
    main()
