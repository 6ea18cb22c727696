#!/usr/bin/env python
"""The quality chain on one GPU in under 8 minutes; run it through `bench/gpu_quality.sh`.

    bash bench/gpu_quality.sh                          # GPU: SmolLM2, ~1,000 fixture rows + 256 it writes, ~3 min training
    bash bench/gpu_quality.sh --device cpu --tiny      # CPU smoke test (1-3 minutes): the same code path, tiny sizes
    bash bench/gpu_quality.sh --out "$OUT/gpu_quality.json"   # on a lent device machine

Every stage of the shipped `smollm2_quality` config runs through `dflash_nb.pipeline.run_chain` (the stage notebooks
under papermill, as `dflash-nb run` runs them), one stage a call (`only=`), with `--set`-style overrides that size
the run for the budget (all of them are in the JSON's `overrides`; `--set SECTION.KEY=VALUE` adds more):

- `10_sources`: `--rows` fixture rows, the config's quotas scaled to them;
- `40_regenerate`: backend `hf`, greedy, no stop strings: the stage's own batched decoding loop
  (`regenerate.greedy_decode`, not `model.generate`; the JSON's `decoder` says which ran and why), batch
  `--regen-batch`, `--synthesize` prompts SmolLM2 writes itself, `--max-new-tokens` per turn;
- `60_hidden_states`: offline features at the DFlash layers (bigger forward batches on a GPU);
- `80_train`: the config's recipe (D-PACE, 4 rows x 16 anchors, slots 1-6; optimizer and amp `auto`: Muon and bf16
  where bf16 is native, as on a GPU) for the minutes the earlier stages leave, at most `--train-minutes`, keeping
  `--eval-reserve-s` for the evaluation (`train.max_minutes`; the lr schedule fitted to it: `schedule_to_budget`);
- `90_evaluate`: MT-Bench, HumanEval and the shipped unseen prompts, `--eval-prompts` each, the trained drafter and
  prompt lookup against plain decoding: tau and wall-clock tokens/s. `--lossless report` (the default here) counts
  outputs unlike plain decoding instead of stopping the stage at the first (bf16 on a GPU); `enforce` stops it.

The JSON (`bench/results/gpu_quality.json`, or `--out`) is rewritten after every stage, and on SIGTERM (the outer
`timeout` of gpu_quality.sh), so it exists even when the run is cut short; a failed stage is recorded in `errors` and
ends the chain (the later stages need its outputs). Fields: `device` (the GPU's name and memory, or the CPU's model
and flags: `dflash_nb.precision.machine`, with the matmul rates of `precision.probe`), `target` (which model and
where its weights came from), `overrides`, `stages` (each stage's seconds from `run_chain`, its manifest's counts
and timings, the plan's prediction beside it, and the stage's own numbers: regeneration tokens/s, training steps and
steps/s, evaluation per prompt set), `summary` (the headline numbers), `plan` (what `dflash_nb.plan` predicts),
`errors`, `seconds`.

Inputs, nothing downloaded:
- the fixture data (`$DFLASH_NB_FIXTURES`, else `shared/fixtures` in the checkout or beside it; `--fixtures DIR`):
  the quality config's sources and the MT-Bench / HumanEval prompts. On a lent machine carry
  `/work/shared/fixtures/data` (3.7 MB) as `shared/fixtures/data` in the checkout;
- the target (`--target`; --tiny: a tiny random llama with the built-in tiny tokenizer, seconds a stage on a CPU;
  else `smollm2`): SmolLM2's converted weights in the dflash_nb cache. Where they are not
  (they are over what a lent machine carries), random weights of SmolLM2-135M's architecture, with SmolLM2's own
  tokenizer and config when a folder holds them (`--like DIR`, else `shared/smollm2` in the checkout: copy
  `~/.cache/dflash_nb/models/smollm2/*.json *.jinja` there, 3.5 MB), else with the built-in tiny tokenizer. The JSON
  says which (`target.weights`): throughput is real either way, tau is meaningful only with trained weights.
- the chain's Python packages (papermill, nbformat, nbclient, jupyter_client, ipykernel, IPython, fastcore, datasets,
  on top of torch and transformers): checked first; missing ones are recorded in `errors.preflight` and nothing runs
  (the GPU image lacks papermill, the jupyter stack, fastcore and datasets: carry them as wheels).
"""
import argparse, contextlib, importlib.util, json, math, os, platform, shutil, signal, sys, tempfile, time, traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))                        # the repo's dflash_nb
sys.path.insert(0, str(HERE))                        # gpu_check's time_box

CONFIG = ROOT / 'dflash_nb' / 'configs' / 'smollm2_quality.yaml'
CHAIN_MODULES = ('torch', 'transformers', 'safetensors', 'yaml', 'datasets', 'pyarrow', 'pandas', 'matplotlib',
                 'papermill', 'nbformat', 'nbclient', 'jupyter_client', 'ipykernel', 'IPython', 'fastcore')   # what the stage views import
SMOLLM2_ARCH = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                    head_dim=64, max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True)
TINY_ARCH = dict(SMOLLM2_ARCH, hidden_size=64, intermediate_size=128, num_hidden_layers=8, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16)   # 8 layers: five distinct DFlash feature layers [1..5]
PLAN_NOTE = ("predicted_minutes: `dflash_nb.costs.predict_minutes` on this machine (the precision probe's measured rate in "
             "each stage's dtype x the calibrated efficiencies, + overheads), for this run's overridden config, the mix's "
             "row sizes being the plan's assumptions. plan_gpu_minutes: each stage's FLOPs (stage_costs) as GPU-hours x 60 "
             "on the plan's assumed GPU at its assumed utilizations")

# -- sizes ------------------------------------------------------------------------------------------------------------
GPU = dict(rows=1024, synthesize=256, max_new_tokens=128, regen_batch=256, eval_prompts=4, train_minutes=3.0,
           eval_reserve_s=110.0, train_overhead_s=40.0, budget_s=440.0)
TINY = dict(rows=8, synthesize=2, max_new_tokens=12, regen_batch=16, eval_prompts=1, train_minutes=1.0,
            eval_reserve_s=0.0, train_overhead_s=0.0, budget_s=420.0)


def write(path: Path, res: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + '.tmp')
    tmp.write_text(json.dumps(res, indent=2, default=str) + '\n'); os.replace(tmp, path)


def read(p: Path):
    try: return json.loads(Path(p).read_text())
    except (OSError, ValueError): return None


def err(e: BaseException) -> str: return f'{type(e).__name__}: {str(e)[:1500]}'


def end_children(sig=signal.SIGTERM) -> list[int]:
    """Signal this process's children and their process groups: the stage kernel papermill started runs in a session of
    its own, which the outer `timeout` (it signals our group) does not reach. Returns the pids signalled."""
    me, hit = os.getpid(), []
    for d in Path('/proc').glob('[0-9]*'):
        try: stat = (d / 'stat').read_text()
        except OSError: continue
        fields = stat[stat.rindex(')') + 2:].split()          # after `pid (comm) `: state, ppid, pgrp, ...
        if int(fields[1]) != me: continue
        pid, pgrp = int(d.name), int(fields[2])
        with contextlib.suppress(OSError):
            if pgrp == pid: os.killpg(pid, sig)               # the kernel leads its own group: it and its workers
            else: os.kill(pid, sig)
            hit.append(pid)
    return hit


# -- environment ------------------------------------------------------------------------------------------------------
def preflight() -> list[str]:
    "The chain's modules this python cannot import."
    return [m for m in CHAIN_MODULES if importlib.util.find_spec(m) is None]


def find_fixtures(arg) -> Path | None:
    "The fixture folder (with data/): --fixtures, $DFLASH_NB_FIXTURES, shared/fixtures in the checkout, or beside it."
    for c in (arg, os.environ.get('DFLASH_NB_FIXTURES'), ROOT / 'shared' / 'fixtures', ROOT.parent / 'shared' / 'fixtures'):
        if c and (Path(c) / 'data').is_dir(): return Path(c).resolve()
    return None


def device_info(dev: str) -> dict:
    import torch, transformers
    from dflash_nb.precision import machine, probe
    info = {'requested': dev, **machine(dev), 'python': sys.version.split()[0], 'executable': sys.executable,
            'torch': torch.__version__, 'transformers': transformers.__version__, 'cuda': torch.version.cuda,
            'platform': platform.platform(), 'cpu_count': os.cpu_count()}
    if dev.startswith('cuda'):
        p = torch.cuda.get_device_properties(torch.device(dev))
        info.update(memory_gb=round(p.total_memory / 1e9, 1), sms=p.multi_processor_count, capability=f'{p.major}.{p.minor}')
    try:
        pr = probe(dev)
        info['matmul_gflops'] = {k: pr[k] for k in ('gflops', 'ratio', 'native', 'forced')}
    except Exception as e: info['matmul_gflops'] = {'error': err(e)}
    return info


# -- the target -------------------------------------------------------------------------------------------------------
def smollm2_cached() -> Path | None:
    from dflash_nb.core import cache_dir
    d = cache_dir() / 'models' / 'smollm2'
    return d if (d / 'conversion.json').exists() and any(d.glob('*.safetensors')) else None


def random_target(out: Path, like: Path | None, arch: dict = SMOLLM2_ARCH, seed: int = 0) -> dict:
    """A folder with random weights: SmolLM2's own config and tokenizer from `like`, else the architecture `arch`
    with the built-in tiny tokenizer (the vocabulary sized to it, with spare rows for the drafter's mask token)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LlamaConfig
    if like is not None:
        cfg, tok, how = AutoConfig.from_pretrained(str(like)), AutoTokenizer.from_pretrained(str(like)), f"SmolLM2's config and tokenizer from {like}"
    else:
        from dflash_nb.models import build_tiny_tokenizer
        tok = build_tiny_tokenizer()
        ids = lambda t: tok.convert_tokens_to_ids(t)
        cfg = LlamaConfig(**arch, vocab_size=64 * math.ceil((len(tok) + 64) / 64), bos_token_id=ids('<|im_start|>'),
                          eos_token_id=ids('<|im_end|>'), pad_token_id=ids('<|endoftext|>'))
        how = ("SmolLM2-135M's architecture" if arch == SMOLLM2_ARCH else f"a tiny llama ({arch['num_hidden_layers']} layers, "
               f"width {arch['hidden_size']})") + ' with the built-in tiny tokenizer'
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out)); tok.save_pretrained(str(out))
    return {'spec': str(out), 'weights': 'random', 'how': how, 'tiny_tokenizer': like is None,
            'params': sum(p.numel() for p in model.parameters())}


def pick_target(a, work: Path) -> dict:
    """`--target` as named; --tiny: a tiny random llama (offline, seconds a stage); else SmolLM2's converted weights
    when cached, else random weights of its architecture (its tokenizer from `--like` or shared/smollm2 when there)."""
    if a.target:
        return {'spec': a.target, 'weights': 'as named (--target)'}
    if a.tiny: return random_target(work / 'target', None, TINY_ARCH)
    if smollm2_cached() is not None:
        return {'spec': 'smollm2', 'weights': f'SmolLM2-135M-Instruct, converted, from {smollm2_cached()}'}
    like = next((Path(c) for c in (a.like, ROOT / 'shared' / 'smollm2') if c and (Path(c) / 'config.json').exists()
                 and any(Path(c).glob('tokenizer*'))), None)
    return random_target(work / 'target', like)


def decoder_used(spec: str, params: dict) -> str:
    "Which decoder `40_regenerate` ran under `params`: the stage's loop, or `generate` and why."
    if params.get('backend') != 'hf': return f"{params.get('backend')} backend (servers)"
    if params.get('stop'): return 'model.generate (stop strings)'
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from dflash_nb.models import resolve_target
    from dflash_nb.decoding import decoder_supported
    with torch.device('meta'): m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(resolve_target(spec)))
    why = decoder_supported(m)
    return 'greedy_decode (the stage\'s batched decoding loop)' if why is None else f'model.generate ({why})'


# -- the overrides ----------------------------------------------------------------------------------------------------
def overrides_for(a, target: dict) -> list[str]:
    """The `--set` overrides of the shipped quality config that size this run (the train budget is added per call).
    The dtypes stay the config's (`auto`: each stage measures the device, `dflash_nb.precision`)."""
    import yaml
    base = yaml.safe_load(CONFIG.read_text())
    quotas = base['sources'].get('quotas') or {}
    scale = a.rows / max(sum(quotas.values()), 1)
    q = {k: max(1, round(v * scale)) for k, v in quotas.items()}
    flow = lambda d: '{' + ', '.join(f'{k}: {v}' for k, v in d.items()) + '}'
    o = [f'run.name=gpu_quality{"_tiny" if a.tiny else ""}', f'run.device={a.device}', f"run.target={target['spec']}",
         f'sources.total={sum(q.values()) if q else a.rows}', f'sources.quotas={flow(q)}',
         'regenerate.backend=hf', 'regenerate.stop=[]', 'regenerate.temperature=0.0',          # the stage's own decoding loop
         f'regenerate.batch_size={a.regen_batch}', f'regenerate.max_new_tokens={a.max_new_tokens}',
         f'regenerate.synthesize={a.synthesize}', f'regenerate.synthesize_max_tokens={min(128, max(8, a.max_new_tokens))}',
         f'evaluate.max_prompts={a.eval_prompts}', f'evaluate.max_new_tokens={a.max_new_tokens}',
         'evaluate.variants=[trained, prompt_lookup]', f'evaluate.lossless={a.lossless}']
    if a.tiny:
        o += ['tokenization.num_proc=1', 'hidden_states.shard_mb=8', f'train.max_steps={a.train_steps}', 'train.ckpt_every=4',
              'train.log_every=2', 'evaluate.cpu_threads=1']
    else:
        o += ['tokenization.num_proc=4', 'hidden_states.max_batch_tokens=32768', 'hidden_states.max_batch_size=128',
              'hidden_states.shard_mb=256']
        if a.train_steps: o.append(f'train.max_steps={a.train_steps}')
    if target.get('tiny_tokenizer'): o.append('train.mask_token=null')   # no <empty_output> there: a spare row
    return o + list(a.set)


# -- the plan ---------------------------------------------------------------------------------------------------------
def plan_predictions(overrides: list[str]) -> dict:
    "What `dflash_nb.plan` predicts per stage for this run's config (see PLAN_NOTE)."
    from dflash_nb import costs, plan
    from dflash_nb.core import load_config
    out = {'predicted_minutes_function': 'dflash_nb.costs.predict_minutes', 'note': PLAN_NOTE, 'predicted_minutes': None,
           'gpu_minutes': None}
    cfg = costs.complete_config(load_config(str(CONFIG), overrides))
    dims = costs.target_dims(costs.load_target_config(cfg['run'].get('target')))
    cfg['train'] = {**cfg['train'], 'num_feature_layers': len(plan.feature_layer_ids(cfg, dims['num_hidden_layers']))}
    est = plan.estimate(cfg, dims, cfg.get('plan') or {})
    out['gpu_minutes'] = {k: float(f"{v['gpu_hours'] * 60:.4g}") for k, v in est['stages'].items() if 'gpu_hours' in v}
    out['assumptions'] = {k: est['assumptions'][k] for k in ('gpu', 'gpu_bf16_tflops', 'util_generation', 'util_prefill', 'util_training')}
    out['rows'], out['tokens'] = est['rows'], est['tokens']
    mins = costs.predict_minutes(cfg, est['totals'], dims)
    out['predicted_minutes'] = {k: v['minutes'] for k, v in mins['stages'].items()}
    out['predicted_why'] = {k: v['why'] for k, v in mins['stages'].items()}
    return out


# -- each stage's numbers ---------------------------------------------------------------------------------------------
def stage_numbers(run_dir: Path, name: str, target: dict) -> dict:
    d = run_dir / name
    m = read(d / 'manifest.json') or {}
    out = {'counts': m.get('counts'), 'timings': m.get('timings')}
    if isinstance(m.get('precision'), dict): out['precision'] = m['precision'].get('chosen')   # the dtypes the stage chose
    if name == '40_regenerate':
        r = read(d / 'report.json') or {}
        p = m.get('params') or {}
        out.update({k: r.get(k) for k in ('rows_in', 'regenerated', 'synthesized', 'passed', 'failed', 'new_tokens',
                                          'truncated_turns', 'rows_per_s', 'tokens_per_s', 'seconds')})
        out['regenerate_seconds'] = out.pop('seconds')
        out.update(backend=p.get('backend'), dtype=p.get('dtype'), batch_size=p.get('batch_size'),
                   max_new_tokens=p.get('max_new_tokens'))
        syn = r.get('synthesis') or {}
        if syn: out['synthesis'] = {k: syn.get(k) for k in ('wanted', 'kept', 'drawn', 'dropped', 'seconds')}
        try: out['decoder'] = decoder_used(target['spec'], p)
        except Exception as e: out['decoder'] = f'unknown ({err(e)})'
    elif name == '80_train':
        t = read(d / 'metrics.json') or {}
        secs = t.get('seconds_this_fit') or t.get('seconds')
        out.update({k: t.get(k) for k in ('steps', 'stopped', 'total_steps', 'tokens_per_s', 'compiles', 'attn_backend',
                                          'device', 'drafter_params', 'rows_used')})
        out.update(train_seconds=secs, steps_per_s=round(t['steps'] / secs, 3) if t.get('steps') and secs else None,
                   tau_train=t.get('tau'), plan=t.get('plan'), max_minutes=(m.get('params') or {}).get('max_minutes'),
                   max_steps=(m.get('params') or {}).get('max_steps'), amp=(m.get('params') or {}).get('amp'),
                   optimizer=(m.get('params') or {}).get('optimizer'))
    elif name == '90_evaluate':
        ev = read(d / 'eval.json') or {}
        keep = ('tau', 'tokens_per_s', 'plain_tokens_per_s', 'speedup', 'speedup_iqr', 'prompts', 'tokens',
                'target_forwards_per_token', 'identical', 'ties', 'timing')
        out['sets'] = {s: {'prompts': r.get('prompts'), 'seconds': r.get('seconds'), 'plain_tokens_per_s': r.get('plain_tokens_per_s'),
                           'variants': {v: {k: x.get(k) for k in keep} for v, x in (r.get('variants') or {}).items()},
                           **({'skipped': r['skipped']} if 'skipped' in r else {})}
                       for s, r in (ev.get('sets') or {}).items()}
        out['file'] = str(d / 'eval.json')
    return out


def summary_of(res: dict) -> dict:
    st = res['stages']
    reg, tr, ev = st.get('40_regenerate') or {}, st.get('80_train') or {}, st.get('90_evaluate') or {}
    sets = ev.get('sets') or {}
    var = lambda v, k: {s: (r['variants'].get(v) or {}).get(k) for s, r in sets.items() if r.get('variants')}
    return {'regenerate_tokens_per_s': reg.get('tokens_per_s'), 'regenerate_decoder': reg.get('decoder'),
            'train_steps': tr.get('steps'), 'train_steps_per_s': tr.get('steps_per_s'), 'train_stopped': tr.get('stopped'),
            'tau': var('trained', 'tau'), 'tokens_per_s': var('trained', 'tokens_per_s'),
            'plain_tokens_per_s': {s: r.get('plain_tokens_per_s') for s, r in sets.items()},
            'speedup': var('trained', 'speedup'), 'prompt_lookup_tau': var('prompt_lookup', 'tau'),
            'identical': var('trained', 'identical'),
            'stage_seconds': {k: v.get('seconds') for k, v in st.items()}, 'weights': res['target'].get('weights')}


# -- main -------------------------------------------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--device', default='cuda')
    ap.add_argument('--tiny', action='store_true', help='tiny sizes (CPU smoke test, 1-3 minutes)')
    ap.add_argument('--out', default=str(HERE / 'results' / 'gpu_quality.json'))
    ap.add_argument('--budget-s', type=float, default=None, help='the whole run (training gets what the other stages leave)')
    ap.add_argument('--rows', type=int, default=None, help='fixture rows (10_sources), the quotas scaled to them')
    ap.add_argument('--synthesize', type=int, default=None, help='prompts the target writes itself (40_regenerate)')
    ap.add_argument('--max-new-tokens', type=int, default=None, help='per regenerated turn and per evaluated answer')
    ap.add_argument('--regen-batch', type=int, default=None, help='regenerate.batch_size')
    ap.add_argument('--train-minutes', type=float, default=None, help='most minutes of training (train.max_minutes)')
    ap.add_argument('--train-steps', type=int, default=None, help='train.max_steps (tiny: 8; GPU: the config\'s)')
    ap.add_argument('--eval-prompts', type=int, default=None, help='prompts per evaluation set')
    ap.add_argument('--eval-reserve-s', type=float, default=None, help='seconds kept for the evaluation when sizing training')
    ap.add_argument('--lossless', default='report', choices=('report', 'enforce'))
    ap.add_argument('--target', default=None, help='run.target (default: smollm2 when cached, else random SmolLM2 weights)')
    ap.add_argument('--like', default=None, help="a folder with SmolLM2's config.json and tokenizer, for random weights")
    ap.add_argument('--fixtures', default=None, help='the fixture folder (with data/)')
    ap.add_argument('--runs-dir', default=None, help='where the run folder goes (default: a temporary folder, removed)')
    ap.add_argument('--keep-run', action='store_true', help='keep the temporary run folder')
    ap.add_argument('--set', action='append', default=[], metavar='SECTION.KEY=VALUE', help='one more override')
    a = ap.parse_args(argv)
    for k, v in (TINY if a.tiny else GPU).items():
        if getattr(a, k, None) is None: setattr(a, k, v)
    if a.tiny and a.train_steps is None: a.train_steps = 8

    out, t_start = Path(a.out), time.perf_counter()
    res = {'started': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), 'args': vars(a), 'config': str(CONFIG.relative_to(ROOT)),
           'device': {}, 'target': {}, 'overrides': [], 'stages': {}, 'summary': {}, 'plan': {}, 'errors': {}}
    elapsed = lambda: time.perf_counter() - t_start

    def on_term(sig, frame):
        res['killed'] = f'signal {sig} after {elapsed():.0f} s'; res['errors'].setdefault('killed', res['killed'])
        res['seconds'] = round(elapsed(), 2); write(out, res)
        with contextlib.suppress(Exception): res['killed'] += f'; ended the stage processes {end_children()}'
        write(out, res); sys.exit(128 + sig)
    signal.signal(signal.SIGTERM, on_term)

    def done(rc: int) -> int:
        res['summary'] = summary_of(res); res['seconds'] = round(elapsed(), 2); write(out, res)
        print(json.dumps(res['summary'], indent=2, default=str)); print(f'-> {out}')
        return rc

    missing = preflight()
    if missing:
        res['errors']['preflight'] = (f'{sys.executable} cannot import {", ".join(missing)} (the chain runs the stage notebooks '
                                      'under papermill): carry them as wheels (see the device notes) or pick another $PYTHON')
        return done(1)
    fx = find_fixtures(a.fixtures)
    if fx is None:
        res['errors']['fixtures'] = ('no fixture folder with data/ ($DFLASH_NB_FIXTURES, shared/fixtures in or beside the checkout, '
                                     '--fixtures): the quality config reads its sources and evaluation prompts there')
        return done(1)
    os.environ['DFLASH_NB_FIXTURES'] = str(fx); res['fixtures'] = str(fx)

    try:
        import torch
        torch.empty(1, device=torch.device(a.device))
        res['device'] = device_info(a.device)
    except Exception as e:
        res['errors']['device'] = err(e); return done(1)
    write(out, res)

    from dflash_nb.precision import choose_dtype
    from dflash_nb.params import discover_stages
    from dflash_nb.pipeline import ChainError, run_chain

    work = Path(a.runs_dir).resolve() if a.runs_dir else Path(tempfile.mkdtemp(prefix='gpu_quality_'))
    work.mkdir(parents=True, exist_ok=True)
    try:
        res['target'] = pick_target(a, work)
    except Exception as e:
        res['errors']['target'] = err(e); res.setdefault('tracebacks', {})['target'] = traceback.format_exc()[-2000:]
        return done(1)
    res['dtype_auto'] = choose_dtype('auto', a.device)   # what the stages' `auto` dtypes resolve to here
    overrides = overrides_for(a, res['target'])
    res['overrides'] = overrides
    run_dir = work / ('gpu_quality_tiny' if a.tiny else 'gpu_quality')
    res['run_dir'] = str(run_dir)
    res['command'] = 'dflash-nb run smollm2_quality ' + ' '.join(f"--set '{o}'" for o in overrides) + ' (train.max_minutes: per the time left)'

    try:
        from gpu_check import time_box   # its section box (imports torch: after the preflight)
        with time_box(90): res['plan'] = plan_predictions(overrides + [f'train.max_minutes={a.train_minutes}'])
    except Exception as e:
        res['plan'] = {'predicted_minutes_function': None, 'note': PLAN_NOTE, 'predicted_minutes': None, 'gpu_minutes': None,
                       'error': err(e)}   # recorded beside the plan: the run goes on
    write(out, res)

    stages = [s.name for s in discover_stages()]
    say = lambda m: print(f'[gpu_quality {elapsed():5.0f}s] {m}', flush=True)
    failed = False
    for name in stages:
        extra = []
        if name in ('80_train', '90_evaluate'):
            if name == '80_train':
                left = a.budget_s - elapsed() - a.eval_reserve_s - a.train_overhead_s
                res['train_minutes'] = round(max(0.2, min(a.train_minutes, left / 60)), 2)
                say(f'80_train gets {res["train_minutes"]} minutes ({left:.0f} s left after the evaluation reserve)')
            extra = [f'train.max_minutes={res["train_minutes"]}']
        t = time.perf_counter()
        rec = {'status': 'failed', 'predicted_minutes': (res['plan'].get('predicted_minutes') or {}).get(name),
               'plan_gpu_minutes': (res['plan'].get('gpu_minutes') or {}).get(name)}
        try:
            s = run_chain(str(CONFIG), overrides + extra, run_dir=run_dir, only=name, progress=True, echo=say)
            st = s['stages'][0]
            rec.update(status=st['status'], seconds=st['seconds'], reason=st.get('reason'), busy_cores=st.get('busy_cores'))
        except (ChainError, Exception) as e:
            rec['seconds'] = round(time.perf_counter() - t, 2)
            res['errors'][name] = err(e)
            res.setdefault('tracebacks', {})[name] = traceback.format_exc()[-3000:]
            failed = True
        try: rec.update(stage_numbers(run_dir, name, res['target']))
        except Exception as e: res['errors'][f'{name}.numbers'] = err(e)
        rec['measured_minutes'] = round(rec['seconds'] / 60, 3)
        res['stages'][name] = rec
        res['summary'] = summary_of(res); res['seconds'] = round(elapsed(), 2)
        write(out, res)
        say(f'{name}: {rec["status"]} in {rec["seconds"]:.1f} s')
        if failed: break
    if not failed and not a.keep_run and not a.runs_dir:
        shutil.rmtree(work, ignore_errors=True); res['run_dir'] += ' (removed)'
    return done(1 if res['errors'] else 0)


if __name__ == '__main__':
    sys.exit(main())
