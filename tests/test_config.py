"Config checking before anything runs: types, ranges, choices, files; relative paths; run folders; one-line errors."
import contextlib, io, json
from pathlib import Path
import pytest, yaml

from dflash_nb.core import ConfigError, load_config
from dflash_nb.pipeline import discover_stages, check_config, run_chain
from dflash_nb.cli import main

STAGES = discover_stages()

def cli(*args):
    "The CLI in-process: (exit code, stdout, stderr)."
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e): code = main([str(a) for a in args])
    return code, o.getvalue(), e.getvalue()

# (override, the message it must produce): wrong types, out of range, unknown choices, missing files
BAD = [
    ('train.lr=abc', "train.lr: 'abc' is not allowed; allowed: a number > 0"),
    ('train.lr=0', 'train.lr: 0 is not allowed; allowed: a number > 0'),
    ('train.lr=true', 'train.lr: True is not allowed; allowed: a number > 0'),
    ('train.epochs=-3', 'train.epochs: -3 is not allowed; allowed: an integer >= 1'),
    ('train.epochs=2.5', 'train.epochs: 2.5 is not allowed; allowed: an integer >= 1'),
    ('train.block_size=1', 'train.block_size: 1 is not allowed; allowed: an integer >= 2'),
    ('train.warmup_ratio=1.5', 'train.warmup_ratio: 1.5 is not allowed; allowed: a number >= 0 and <= 1'),
    ('train.source=cloud', "train.source: 'cloud' is not allowed; allowed: one of offline, online"),
    ('train.lr=null', 'train.lr: null is not allowed; allowed: a number > 0'),
    ('tokenization.max_seq_len=abc', "tokenization.max_seq_len: 'abc' is not allowed; allowed: an integer >= 16 (or null)"),
    ('tokenization.max_seq_len=0', "tokenization.max_seq_len: 0 is not allowed; allowed: an integer >= 16 (or null)"),
    ('train.device=tpu9', "train.device: 'tpu9' is not allowed; allowed: a device (auto, cpu, mps, cuda or cuda:N)"),
    ('run.device=cuda:x', "run.device: 'cuda:x' is not allowed; allowed: a device (auto, cpu, mps, cuda or cuda:N)"),
    ('tokenization.truncation=chop', "tokenization.truncation: 'chop' is not allowed; allowed: one of truncate, drop"),
    ('tokenization.min_supervised_tokens=0', 'tokenization.min_supervised_tokens: 0 is not allowed; allowed: an integer >= 1'),
    ('tokenization.enable_thinking=maybe', "tokenization.enable_thinking: 'maybe' is not allowed; allowed: true or false (or null)"),
    ('tokenization.chat_template=/no/such/t.jinja', "tokenization.chat_template: '/no/such/t.jinja' is not an existing file"),
    ('templates.chat_template=missing.jinja', "templates.chat_template: 'missing.jinja' is not an existing file"),
    ('sources.total=0', 'sources.total: 0 is not allowed; allowed: an integer >= 1'),
    ('sources.dedup=fuzzy', "sources.dedup: 'fuzzy' is not allowed; allowed: one of none, exact, normalized"),
    ('sources.quotas=[1]', 'sources.quotas: [1] is not allowed; allowed: a mapping'),
    ('convert.repairs=[prepend_user, guess]', "convert.repairs: ['prepend_user', 'guess'] is not allowed ('guess' is not a choice)"),
    ('regenerate.top_p=0', 'regenerate.top_p: 0 is not allowed; allowed: a number > 0 and <= 1'),
    ('regenerate.select=some', "regenerate.select: 'some' is not allowed; allowed: one of all, prompt_only, unanswered"),
    ('hidden_states.storage_dtype=int8', "hidden_states.storage_dtype: 'int8' is not allowed; allowed: one of bfloat16, float16, float32"),
    ('evaluate.mt_bench_turns=3', 'evaluate.mt_bench_turns: 3 is not allowed; allowed: an integer >= 1 and <= 2'),
    ('evaluate.max_prompts=two', "evaluate.max_prompts: 'two' is not allowed; allowed: an integer >= 1"),
]

@pytest.mark.parametrize('override,msg', BAD, ids=[b[0] for b in BAD])
def test_bad_values_are_rejected_naming_key_value_and_what_is_allowed(override, msg):
    with pytest.raises(ConfigError) as e: check_config(load_config(overrides=[override]), STAGES)
    assert msg in str(e.value)

def test_at_least_fifteen_bad_values():
    assert len(BAD) >= 15 and len({b[0].split('=')[0] for b in BAD}) >= 15

def test_good_values_pass_and_numbers_in_exponent_form_are_read():
    p = check_config(load_config(overrides=['train.lr=6e-4', 'train.epochs=3', 'tokenization.max_seq_len=null',
                                            'train.device=cuda:1']), STAGES)
    assert p['80_train']['lr'] == 6e-4 and isinstance(p['80_train']['lr'], float) and p['50_tokenization']['max_seq_len'] is None
    assert p['80_train']['device'] == 'cuda:1'
    assert check_config(load_config(), STAGES)['80_train']['epochs'] == 10    # the demo passes its own check

def test_every_parameter_is_declared_with_a_type_and_help():
    for s in STAGES:
        for k, p in s.params.items():
            assert p.type in ('int', 'float', 'bool', 'str', 'list', 'dict', 'path', 'dir', 'device', 'any'), (s.name, k)
            assert p.help or k == 'run_dir', f'{s.name}: {k} has no help text'

def test_defaults_satisfy_their_declarations():
    for s in STAGES:
        for k, p in s.params.items():
            if p.type not in ('path', 'dir') and k != 'run_dir': p.check(p.default, f'{s.short}.{k}')

def test_relative_paths_resolve_against_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / 'my.jinja').write_text('{% for m in messages %}{{ m.content }}{% endfor %}')
    monkeypatch.chdir(tmp_path)
    cfg = load_config(overrides=['templates.chat_template=my.jinja', 'tokenization.chat_template=./my.jinja'])
    p = check_config(cfg, STAGES)
    want = str((tmp_path / 'my.jinja').resolve())
    assert p['20_templates']['chat_template'] == want and p['50_tokenization']['chat_template'] == want
    assert cfg['templates']['chat_template'] == want        # what config.yaml records is what the notebooks open
    (tmp_path / 'mine.jsonl').write_text('{"messages": [{"role": "user", "content": "q"}]}\n')
    cfg = load_config(overrides=['sources.extra_sources={mine: {path: mine.jsonl}}'])
    check_config(cfg, STAGES)
    assert cfg['sources']['extra_sources']['mine']['path'] == str((tmp_path / 'mine.jsonl').resolve())
    code, out, err = cli('config', '--set', 'templates.chat_template=my.jinja')
    assert code == 0 and f'chat_template: {want}' in out
    code, out, err = cli('plan', '--set', 'templates.chat_template=other.jinja')
    assert code != 0 and 'plan OK' not in out and "'other.jinja' is not an existing file" in err

def test_a_failed_check_leaves_the_run_folders_config_untouched(tmp_path):
    run = tmp_path / 'runs' / 'r1'; run.mkdir(parents=True)
    good = yaml.safe_dump({'run': {'name': 'r1'}, 'train': {'lr': 0.001}})
    (run / 'config.yaml').write_text(good)
    for o in ('train.lr=abc', 'train.epochs=-3', 'train.block_size=1', 'tokenization.max_seq_len=abc'):
        code, out, err = cli('run', run, '--set', o)
        assert code == 2 and err.startswith('config error: ') and err.count('\n') == 1, (o, err)
        assert (run / 'config.yaml').read_text() == good
    assert sorted(p.name for p in run.iterdir()) == ['config.yaml']     # no stage folder either

def test_run_folders_are_accepted_where_a_config_is(tmp_path):
    run = tmp_path / 'elsewhere' / 'myrun'; run.mkdir(parents=True)
    (run / 'config.yaml').write_text(yaml.safe_dump({'run': {'name': 'demo', 'seed': 4}}))
    code, out, _ = cli('stages', run)
    assert code == 0 and f'run folder {run.resolve()}' in out and '01_targets' in out
    code, out, _ = cli('config', run)
    assert code == 0 and 'seed: 4' in out
    code, _, err = cli('stages', tmp_path)
    assert code == 2 and 'not a run folder' in err

def test_expected_failures_are_one_line_and_debug_shows_the_traceback(tmp_path):
    code, out, err = cli('config', '--set', 'nosuch.key=1')
    assert code == 2 and err.count('\n') == 1 and "unknown config section 'nosuch'" in err
    code, out, err = cli('config', tmp_path / 'none.yaml')
    assert code == 2 and err.count('\n') == 1 and 'not found' in err
    with pytest.raises(ConfigError): main(['config', '--set', 'train.lr=abc', '--debug'])

# -- the command line's help (issue 23) --------------------------------------------------------------------------------
import argparse, re, subprocess, sys
from dflash_nb.cli import build_parser, declared_commands, COMMAND_MODULES, HelpFormatter

def _commands(parser, path=()):
    "(command path, parser) of every (sub-)command, depth first."
    yield path, parser
    for act in parser._actions:
        if isinstance(act, argparse._SubParsersAction):
            for name, sp in act.choices.items(): yield from _commands(sp, path + (name,))

def _options(parser):
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]

# Options of other notebooks' commands that have no help text yet (each named in the cli engineer's report, with the
# text to add); the test fails on any other option without help, and on an entry here that got its help.
PENDING_HELP = {
    *(('hidden-states', 'extract', o) for o in ('--target', '--out')),
    ('hidden-states', 'info', 'path'), ('train', 'run_dir'), ('train', 'config'), ('train', '--set'),
}

def test_every_option_has_help_and_says_its_default_once():
    p = build_parser()                 # every command registered in full
    missing, twice, n = set(), [], 0
    for path, parser in _commands(p):
        assert parser.formatter_class is HelpFormatter, path
        text = parser.format_help()
        if re.search(r'\(default: [^)]*\)[^\n]*\n?\s*\(default:', text): twice.append((path, 'text'))
        for a in _options(parser):
            n += 1
            key = path + ((a.option_strings[-1] if a.option_strings else a.dest),)
            shown = HelpFormatter('x')._expand_help(a) if a.help else ''      # what --help prints for it
            if not (a.help or '').strip(): missing.add(key)
            if shown.lower().count('default') > 1: twice.append(key)
    assert n > 100 and not twice, twice
    assert missing - PENDING_HELP == set(), f'options without help: {sorted(missing - PENDING_HELP)}'
    assert PENDING_HELP - missing == set(), f'now explained, remove from PENDING_HELP: {sorted(PENDING_HELP - missing)}'

def test_commands_are_listed_from_their_declarations():
    "What `dflash-nb --help` lists without importing a module is what the module's `register_cli` registers."
    for m in COMMAND_MODULES:
        declared = declared_commands(m)
        assert declared is not None, f'{m}: register_cli has a non-literal command name or help'
        full = argparse.ArgumentParser().add_subparsers()
        mod = __import__(f'dflash_nb.{m}', fromlist=['x'])
        if hasattr(mod, 'register_cli'): mod.register_cli(full)
        got = [(a.dest, a.help) for a in full._choices_actions]
        assert got == declared, (m, got, declared)

def test_help_lists_every_command_without_importing_torch():
    code = ('import sys, contextlib, io\nfrom dflash_nb.cli import main\n'
            'with contextlib.redirect_stdout(io.StringIO()) as o: main(["--help"]) if False else main([])\n'
            'print(o.getvalue()); print("HEAVY", sorted(m for m in ("torch", "transformers", "datasets") if m in sys.modules))')
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
    for c in ('run', 'stages', 'config', 'docs', 'plan', 'export', 'train', 'evaluate', 'sources', 'hidden-states'):
        assert re.search(rf'^\s+{c}\s', r.stdout, re.M), c
    assert 'HEAVY []' in r.stdout

def test_a_shipped_config_is_named_without_its_path(tmp_path):
    code, out, err = cli('config', 'smollm2_quality')
    assert code == 0 and 'name: smollm2_quality' in out
    code, out, err = cli('stages', 'qwen3_6_27b.yaml', '--runs-dir', tmp_path)
    assert code == 0 and f'run folder {tmp_path}/qwen3_6_27b' in out
