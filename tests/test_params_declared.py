"""One declaration per stage parameter (the stage notebook's parameters cell): papermill's help, the config check,
`dflash-nb params` and the docs' table all show what that declaration says, for every parameter of every stage."""
import ast, contextlib, io, re
import pytest
from papermill.translators import PythonTranslator

from dflash_nb.core import ConfigError
from dflash_nb.params import GLOBAL_PARAMS, discover_stages, parameters_source, params_markdown
from dflash_nb.pipeline import check_config
from dflash_nb.cli import main

STAGES = discover_stages()
ALL = [(s, p) for s in STAGES for p in s.params.values() if p.name != 'run_dir']

def cli(*args):
    o = io.StringIO()
    with contextlib.redirect_stdout(o): code = main([str(a) for a in args])
    return code, o.getvalue()

def test_papermill_help_shows_each_declared_type_default_and_help():
    for s in STAGES:
        seen = {p.name: p for p in PythonTranslator.inspect({'source': parameters_source(s.path)})}
        for k, p in s.params.items():
            assert k in seen, (s.name, k)
            assert ast.literal_eval(seen[k].default) == p.default, (s.name, k)
            assert seen[k].help.endswith(p.help), (s.name, k, seen[k].help, p.help)
            assert seen[k].inferred_type_name.strip("'") .endswith(p.type + ('[path]' if p.items else '') + (']' if p.nullable else '')), (s.name, k)

def _outside(p):
    "A value just outside the declared range or choices (None: the declaration has neither)."
    if p.type in ('int', 'float') and p.lo is not None: return p.lo if p.lo_open else p.lo - 1
    if p.type in ('int', 'float') and p.hi is not None: return p.hi if p.hi_open else p.hi + 1
    if p.choices and p.type == 'str': return 'not-a-declared-choice'
    return None

def test_the_config_check_enforces_every_declared_range_and_choice():
    checked = 0
    for s, p in ALL:
        v = _outside(p)
        if v is None: continue
        with pytest.raises(ConfigError) as e: check_config({'run': {'name': 'x'}, s.short: {p.name: v}}, STAGES)
        assert str(e.value).startswith(f'{s.short}.{p.name}: ') and str(e.value).endswith(f'allowed: {p.allowed}'), str(e.value)
        checked += 1
    assert checked >= 40, checked

def test_the_cli_lists_every_parameter_as_declared():
    for s in STAGES:
        code, out = cli('params', s.short)
        assert code == 0
        for p in s.params.values():
            if p.name == 'run_dir': continue
            lines = out.splitlines()
            i = next(i for i, l in enumerate(lines) if l.startswith(f'  {p.name}: '))
            assert lines[i].endswith(f' = {p.default!r}') and p.allowed in lines[i + 1] and p.help in lines[i + 1], (s.name, lines[i:i + 2])

def test_the_docs_table_shows_every_parameter_as_declared():
    for s in STAGES:
        md = params_markdown(s)
        for p in s.params.values():
            if p.name == 'run_dir': continue
            row = next(l for l in md.splitlines() if l.startswith(f'| `{p.name}` |'))
            assert p.allowed in row.replace('\\|', '|') and p.help in row.replace('\\|', '|'), row

def test_global_parameters_have_one_meaning_across_stages():
    "`target`, `seed`, `device`, `dtype`: each stage that declares one gives it the same type and default."
    for k in GLOBAL_PARAMS:
        decl = {(p.type, p.nullable, repr(p.default)) for s in STAGES for p in s.params.values() if p.name == k}
        assert len(decl) <= 1, (k, decl)

def test_run_dtype_auto_reaches_every_computing_stage(tmp_path):
    "`run: {dtype: auto}` is one setting of one vocabulary: valid, and each stage that computes with the target takes it."
    from dflash_nb.core import load_config
    from dflash_nb.pipeline import check_config, discover_stages, find_stage, resolve_params
    for v in ('auto', 'float32', 'bfloat16'):
        (tmp_path / 'c.yaml').write_text(f'run: {{name: mine, target: smollm2, dtype: {v}}}\n')
        cfg = load_config(tmp_path / 'c.yaml')
        check_config(cfg, discover_stages())
        assert {s: resolve_params(find_stage(s), cfg)['dtype'] for s in ('40_regenerate', '60_hidden_states', '90_evaluate')} == \
            dict.fromkeys(('40_regenerate', '60_hidden_states', '90_evaluate'), v)
    with pytest.raises(BaseException, match="run.dtype: 'bf16' is not allowed; allowed: one of auto, float32, float16, bfloat16"):
        check_config(load_config(None, ['run.dtype=bf16']), discover_stages())

# --- one default per parameter: the sub-commands and the settings dataclasses read the declaration -------------------

import argparse, dataclasses

OWN_MEANING = {('evaluate', 'target'): "without it, the target the drafter's config.json names",
               ('templates', 'target'): 'one of --target and --template is required (a mutually exclusive group)'}

def _parsers(p, path=()):
    "Every (command path, parser) of the CLI, sub-commands of sub-commands included."
    yield path, p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sp in a.choices.items(): yield from _parsers(sp, path + (name,))

def test_every_subcommand_option_shows_the_declared_default():
    "An option of `dflash-nb <stage> ...` named like a parameter of that stage defaults to its declaration (no copy)."
    from dflash_nb.cli import build_parser
    by_cmd, checked, drift = {s.short.replace('_', '-'): s for s in STAGES}, 0, []
    for path, p in _parsers(build_parser()):
        st = next((by_cmd[w] for w in path if w in by_cmd), None)
        if st is None: continue
        for a in p._actions:
            if a.dest not in st.params or not a.option_strings or a.required or (path[0], a.dest) in OWN_MEANING: continue
            checked += 1
            if a.default != st.params[a.dest].default: drift.append((' '.join(path), a.dest, a.default, st.params[a.dest].default))
    assert not drift, drift
    assert checked >= 40, checked

def test_settings_dataclasses_take_the_declared_defaults():
    "Each field of a settings dataclass that a stage declares is a `params.declared` field: no second default."
    from dflash_nb.sources import MixOptions
    from dflash_nb.convert import ConvertOptions
    from dflash_nb.regenerate import BackendOptions, GenConfig, RegenOptions
    from dflash_nb.tokenization import TokenizeJob, TokenizeOptions
    from dflash_nb.train import TrainConfig
    from dflash_nb.hidden_states import ExtractOptions
    from dflash_nb.evaluate import EvalGeneration, EvalSettings
    for cls, stage, rename in ((MixOptions, '10_sources', {}), (ConvertOptions, '30_convert', {}),
                               (GenConfig, '40_regenerate', {}), (RegenOptions, '40_regenerate', {}),
                               (BackendOptions, '40_regenerate', {}),
                               (TokenizeOptions, '50_tokenization', {'dtype': 'ids_dtype'}), (TokenizeJob, '50_tokenization', {}),
                               (TrainConfig, '80_train', {}), (EvalSettings, '90_evaluate', {}), (EvalGeneration, '90_evaluate', {}),
                               (ExtractOptions, '60_hidden_states', {'layer_ids': 'target_layer_ids'})):
        st, obj = next(s for s in STAGES if s.name == stage), cls()
        for f in dataclasses.fields(cls):
            name = rename.get(f.name, f.name)
            if name not in st.params: continue
            assert f.metadata.get('param') == name and f.metadata.get('stage') == stage, (cls.__name__, f.name)
            want = st.params[name].default
            assert getattr(obj, f.name) == (want or 0 if (cls, name) == (TokenizeOptions, 'max_seq_len') else want), (cls.__name__, f.name)

# --- one default per parameter: function signatures -------------------------------------------------------------------

import importlib, inspect

SIGNATURE_MODULES = ('targets', 'sources', 'convert', 'templates', 'regenerate', 'tokenization', 'hidden_states', 'train', 'evaluate',
                     'plan', 'costs', 'export', 'backends', 'decoding', 'promptsets', 'verdicts', 'probes', 'vocab', 'kinds',
                     'features', 'metrics', 'optimizers', 'checkpoints', 'target_weights')
# a stage's module checks against its stage, a library cut from a stage against that stage; plan, costs and export against every stage
LIBRARY_STAGE = {'backends': 'regenerate', 'decoding': 'evaluate', 'promptsets': 'evaluate', 'verdicts': 'evaluate', 'probes': 'templates',
                 'vocab': 'tokenization', 'kinds': 'train', 'features': 'train', 'metrics': 'train', 'optimizers': 'train', 'checkpoints': 'train',
                 'target_weights': 'train'}

# A parameter named like a declared one whose default means something else; the caller resolves the declared value.
_TORCH_DEVICE = "a torch device the caller resolved (`core.get_device` of the stage's `device`), not the spec `auto`"
OWN_DEFAULT = {
    ('sources', 'build_mix', 'repairs'): 'every repair allowed, format-only ones included (the stage passes DEFAULT_REPAIRS + its opt-ins)',
    ('sources', 'normalize_file', 'repairs'): 'every repair allowed, format-only ones included (the CLI adds its --repair opt-ins)',
    ('target_weights', 'load_target_head', 'device'): _TORCH_DEVICE, ('train', 'shard_drafter', 'device'): _TORCH_DEVICE,
    ('train', 'Trainer', 'device'): _TORCH_DEVICE, ('features', 'RemoteFeatures', 'device'): _TORCH_DEVICE,
    ('features', 'serve_features', 'device'): _TORCH_DEVICE,
    ('train', 'benchmark_step', 'device'): 'the GPU whose training step is timed (a benchmark, not a run)',
    ('kinds', 'dspark_loss', 'gamma'): "DSpark's published slot decay exp(-k/4) (LossOptions.dspark_gamma), not DFlash's train.gamma",
    ('kinds', 'dspark_block_loss', 'gamma'): "DSpark's published slot decay exp(-k/4) (LossOptions.dspark_gamma), not DFlash's train.gamma",
    ('decoding', 'tree_mask', 'device'): "the mask tensor's torch device (the target session's)",
    ('decoding', 'tree_mask', 'dtype'): "the mask tensor's torch dtype (the target's weights')",
    ('evaluate', 'open_drafter', 'device'): 'where the drafter folder is read to (torch); `load_pair` moves it to the target',
    ('evaluate', 'open_drafter', 'dtype'): 'the torch dtype the drafter is read in; `load_pair` casts it to the target',
    ('evaluate', 'drafter_target', 'target'): "None: the target the drafter's config.json names (see OWN_MEANING)",
    ('export', 'export_speculators', 'draft_vocab_size'): "None: the size the run's tokenization wrote (its d2t.npy), not a new one",
    **{('costs', fn, 'device'): "None: the config's `run.device`, resolved here; a device named instead (the plan of another machine)"
       for fn in ('run_device', 'machine_probe', 'stage_precision', 'predict_minutes', 'machine_plan')},
    ('costs', 'cached_probe', 'device'): "the device whose probe is read from a run folder's precision.json (a torch device, resolved)",
}

def _same(default, declared) -> bool:
    "A default that says what the declaration says: equal, a tuple for a list, or None/() for an empty list or dict."
    if isinstance(default, tuple) and isinstance(declared, list): default = list(default)
    if default is None and declared in ([], {}): return True
    return default == declared

def _signatures(mod):
    "(qualified name, signature) of each public function and class of `mod` (constructors and methods; not dataclasses)."
    for name, obj in vars(mod).items():
        if name.startswith('_') or getattr(obj, '__module__', None) != mod.__name__: continue
        fns = [(name, obj)] if inspect.isfunction(obj) else []
        if inspect.isclass(obj) and not dataclasses.is_dataclass(obj):
            fns = [(name, obj)] + [(f'{name}.{k}', v) for k, v in vars(obj).items() if inspect.isfunction(v) and not k.startswith('_')]
        for qn, f in fns:
            try: yield qn, inspect.signature(f)
            except (TypeError, ValueError): continue

def signature_drift() -> list:
    "`(module, function, parameter, its default, the declared default)` of each default that is not the declaration's."
    by_short, drift = {s.short: s for s in STAGES}, []
    for m in SIGNATURE_MODULES:
        st = LIBRARY_STAGE.get(m, m)
        stages = [by_short[st]] if st in by_short else STAGES
        for qn, sig in _signatures(importlib.import_module(f'dflash_nb.{m}')):
            for p in sig.parameters.values():
                decl = [s.params[p.name].default for s in stages if p.name in s.params and p.name != 'run_dir']
                if not decl or p.default is inspect.Parameter.empty or (m, qn.split('.')[0], p.name) in OWN_DEFAULT: continue
                if not any(_same(p.default, d) for d in decl): drift.append((m, qn, p.name, p.default, decl[0]))
    return drift

def test_no_signature_keeps_a_default_of_its_own():
    """A public function of a stage module whose parameter is named like a parameter of that stage has the declared
    default or none (the settings travel in the declared dataclasses); the exceptions say why, by name."""
    assert not signature_drift(), signature_drift()

def test_the_exceptions_are_still_there():
    "Each exception names a parameter that exists and still has a default (a stale entry would hide nothing)."
    for m, fn, name in OWN_DEFAULT:
        obj = getattr(importlib.import_module(f'dflash_nb.{m}'), fn)
        assert inspect.signature(obj).parameters[name].default is not inspect.Parameter.empty, (m, fn, name)

def test_no_stage_module_reads_notebooks_at_import():
    "Importing a stage module reads no notebook (the wheel's nbs/ may be absent in a stripped install)."
    import subprocess, sys
    code = ("import os; os.environ['DFLASH_NB_NBS'] = '/nonexistent'; import dflash_nb.train, dflash_nb.evaluate, "
            "dflash_nb.regenerate, dflash_nb.tokenization, dflash_nb.hidden_states, dflash_nb.cli")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
