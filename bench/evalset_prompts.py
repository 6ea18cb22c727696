#!/usr/bin/env python
"""The evaluation's own prompts as one JSONL of prompt rows, for held-out bench rows (bench/configs/evalsets_rows.yaml):
MT-Bench first turns (the evaluation's `mt_bench_turns: 1`), HumanEval and the unseen prompts, with ids
`mtbench/...`, `humaneval/...`, `unseen/...` (bench/bench_samples.py --heldout_runs groups by that prefix).

    python bench/evalset_prompts.py runs/evalsets/prompts.jsonl
    dflash-nb run bench/configs/evalsets_rows.yaml --until 80_train
"""
import sys
from dflash_nb.formats import eval_prompt_path
from dflash_nb.core import iter_jsonl, write_jsonl
from dflash_nb.sources import get_source, normalize_stream


def main(out: str):
    rows = []
    for name, tag in (('fx-mtbench', 'mtbench'), ('fx-humaneval', 'humaneval')):
        for r, _ in normalize_stream(get_source(name)):
            rows.append({'id': f"{tag}/{r['id'].split('/', 1)[1]}", 'messages': r['messages'][:1]})
    for r in iter_jsonl(eval_prompt_path('pkg:unseen_prompts.jsonl')):
        msgs = r.get('messages') or [{'role': 'user', 'content': (r.get('turns') or [r.get('prompt')])[0]}]
        rows.append({'id': f"unseen/{r['id']}", 'messages': [m for m in msgs if m['role'] == 'user'][:1]})
    print(f'{write_jsonl(out, rows)} prompts -> {out}')


if __name__ == '__main__':
    main(sys.argv[1])
