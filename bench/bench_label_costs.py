#!/usr/bin/env python
"""The CPU cost of training data, per row and per token, for the tau-per-CPU-minute comparison (bench/plot_labels.py):

  * regeneration: the target writes the answers of `--regen_rows` single-turn rows (the stage's in-process HF backend,
    bf16, batch 32, greedy, 128 new tokens): CPU-seconds per row and per generated token;
  * the features pass over `--feature_rows` tokenized rows, with the target's top-16 labels and without: CPU-seconds
    per token (the labels add the final norm, the LM head and a top-k over the vocabulary at every position);
  * each `--run`'s rows and tokens (its stored features), and whether its answers were regenerated (`--regenerated`).

CPU-seconds are this process's (`resource.getrusage`, all threads); on a shared machine they are inflated by the
other jobs less than wall time is. Writes bench/results/label_costs.json.

    python bench/bench_label_costs.py --conversations CONV.jsonl --dataset RUN/50_tokenization/dataset \
        --run RUN_A --run RUN_B --regenerated RUN_B --heldout RUN_B --n_heldout 64 [--threads 2]
"""
import argparse, json, resource, sys, tempfile
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def single_turn(conv_path, n):
    "The first `n` rows of a canonical JSONL with one user and one assistant turn, no tools."
    out = []
    for line in open(conv_path):
        r = json.loads(line)
        if not r.get('tools') and [m['role'] for m in r['messages']] == ['user', 'assistant']: out.append(r)
        if len(out) == n: break
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--conversations', required=True); p.add_argument('--dataset', required=True)
    p.add_argument('--run', action='append', default=[]); p.add_argument('--regenerated', action='append', default=[])
    p.add_argument('--heldout', default=None); p.add_argument('--n_heldout', type=int, default=64)
    p.add_argument('--regen_rows', type=int, default=64); p.add_argument('--feature_rows', type=int, default=96)
    p.add_argument('--threads', type=int, default=2)
    a = p.parse_args()
    import torch
    torch.set_num_threads(a.threads)
    from datasets import load_from_disk
    from dflash_nb.regenerate import BackendOptions, GenConfig, RegenOptions, make_backend, regenerate_file
    from dflash_nb.features import FeatureStore
    from dflash_nb.hidden_states import ExtractOptions, extract_to_disk
    from dflash_nb.models import load_target
    res = {'threads': a.threads}
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        rows = single_turn(a.conversations, a.regen_rows)
        (d / 'in.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
        be = make_backend(BackendOptions(backend='hf', target='smollm2', device='cpu', dtype='bfloat16', batch_size=32, threads=a.threads))
        c0 = cpu()
        rep = regenerate_file(d / 'in.jsonl', d / 'out.jsonl', be, GenConfig(max_new_tokens=128, temperature=0.0),
                              RegenOptions(mode='all', select='all', chunk_size=32), progress=False)
        c = cpu() - c0
        res.update(regen_rows=len(rows), regen_new_tokens=rep['new_tokens'], regen_cpu_s=round(c, 1),
                   regen_cpu_s_per_row=round(c / len(rows), 4), regen_cpu_s_per_token=round(c / max(rep['new_tokens'], 1), 5))
        model, _ = load_target('smollm2', dtype=torch.bfloat16)
        ds = load_from_disk(a.dataset).select(range(a.feature_rows))
        for k in (0, 16):
            c0 = cpu()
            out = extract_to_disk(ds, 'smollm2', d / f'f{k}', ExtractOptions(label_topk=k, max_batch_tokens=4096, max_batch_size=32),
                                  model=model, ranks=(0, 1), progress=False)
            c = cpu() - c0
            res[f'features_top{k}_cpu_s_per_token'] = round(c / out['index']['n_tokens'], 7)
            res['feature_tokens'] = out['index']['n_tokens']
    res['features_cpu_s_per_token'] = res['features_top16_cpu_s_per_token']
    res['runs'] = {}
    for r in a.run:
        st = FeatureStore(Path(r) / '60_hidden_states' / 'features')
        lens = [st.meta['samples'][i]['length'] for i in st.ids]
        held = sum(lens[-a.n_heldout:]) if a.heldout and Path(a.heldout).resolve() == Path(r).resolve() else 0
        res['runs'][str(Path(r).resolve())] = {'rows': len(st), 'tokens': sum(lens), 'heldout_tokens': held,
                                               'regenerated': any(Path(x).resolve() == Path(r).resolve() for x in a.regenerated)}
    out = ROOT / 'bench' / 'results' / 'label_costs.json'
    out.write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k != 'runs'}, indent=1))


if __name__ == '__main__':
    main()
