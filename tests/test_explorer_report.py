"""`dflash-nb templates report` and the explorer on a user's messy file (issue 30, items 3 and 6).

`tests/fixtures/messy_report.jsonl` holds one row of every failure kind a user's own file brings: OpenAI `messages`
with a tool call (arguments as an object, as a JSON string, as broken JSON), a system message in the middle,
`reasoning_content`, a `<think>` block in the content, text and reasoning content parts, an image part, an assistant
greeting first, no user turn, an empty and a null answer, role aliases and an unknown role, a prompt-only row, an empty
conversation, `messages` as text, a message that is not an object, control text, one ShareGPT row, a malformed line
and a line that is not an object.

1. One reader, one answer: the report reads the file through the normalizer `dflash-nb sources detect` names, and a
   row it calls quarantined on reading is exactly a row a run's `sources` stage quarantines, with the same reason; no
   traceback on any row, with or without `--format`; `--enable-thinking` is obeyed; the headline counts every row in
   one outcome (a row repaired by default is not a failure).
2. The explorer without a kernel: a notebook cell ending in the explorer, executed headless (nbclient, as
   `jupyter nbconvert --execute` does), holds the static explorer of the failures, and the page nbconvert exports from
   it shows that view offline, its pager working (headless chromium, when installed).
"""
import json, os, re, shutil, subprocess, tempfile
from collections import Counter
from pathlib import Path
import pytest

from dflash_nb.core import fixtures_dir
from dflash_nb.formats import detect_format
from dflash_nb.explorer import template_report
from dflash_nb.rowviews import explore, load_rows

ROOT = Path(__file__).resolve().parents[1]
MESSY = ROOT / 'tests' / 'fixtures' / 'messy_report.jsonl'
N_ROWS = 24   # one row per line of the file
FX = fixtures_dir()
CHROMIUM = next((shutil.which(n) for n in ('chromium', 'chromium-browser', 'google-chrome') if shutil.which(n)), None)
SHOTS = Path(os.environ.get('DFLASH_NB_SCREENSHOTS', ROOT / 'runs' / '_screenshots'))

def kind(reason: str) -> str: return reason.split(':', 1)[0].strip()   # as a quarantine counts it

def headline(out: str) -> dict:
    "The counts of every headline the report printed."
    got = re.findall(r'^(\d+) rows: (\d+) with a mask as they are, (?:(\d+) split per turn, )?(\d+) repaired by default \(format-only\), (\d+) prompt-only, '
                     r'(\d+) quarantined by default\n  quarantined: (\d+) saved by opting in to a meaning-changing repair, '
                     r'(\d+) failed \(no repair\)', out, re.M)
    keys = ('rows', 'ok', 'split', 'repaired_by_default', 'prompt_only', 'quarantined', 'need_opt_in', 'failed')
    return [dict(zip(keys, (int(v or 0) for v in g))) for g in got]   # `split` only printed when rows split (tests/test_templates_splits.py)

# ------------------------------------------------------------------------------------------ one reader, one answer
def test_report_reads_the_file_as_a_run_does(tmp_path):
    "Detected as `sources detect` says; quarantined on reading exactly where the sources stage quarantines, same reasons."
    from dflash_nb.sources import normalize_file
    rows, info = load_rows(MESSY)
    assert (info['format'], info['detected']) == (detect_format(MESSY)['best'], True) == ('messages', True)
    assert len(rows) == N_ROWS
    c = normalize_file('auto', MESSY, tmp_path / 'rows.jsonl', tmp_path / 'quarantine.jsonl')
    rejected = [r.get('_error') or r['read']['reason'] for r in rows if '_error' in r or not r['read']['ok']]
    assert (c['written'], c['quarantined']) == (N_ROWS - len(rejected), len(rejected)) and c['normalizer'] == 'messages'
    assert Counter(map(kind, rejected)) == Counter(c['reasons'])
    ex = explore('smollm2', rows, data_info=info)
    views = {v['id']: v for v in ex['rows']}
    bad = [v for v, r in zip(ex['rows'], rows) if '_error' in r or not r['read']['ok']]
    assert all(v['default'].startswith('quarantined') for v in bad)
    assert Counter(v['reason'] for v in bad) == Counter(c['reasons'])   # the same reasons, counted the same way
    img = views['image']   # the normalizer's reason, not a template error on a list of parts
    assert img['reason'] == 'non-text content' and "'image_url'" in img['error'] and 'concatenate' not in json.dumps(ex['rows'])
    assert views['sharegpt']['error'] == 'missing field: messages'
    assert views['mid-system']['default'] == 'quarantined; opt in: move_system_first'
    assert views['mid-system']['read'].startswith('system not first') and 'move_system_first would apply' in views['mid-system']['read']

def _report_args(target):
    if target == 'qwen3':
        if FX is None: pytest.skip('../shared/fixtures not present')
        return ['--template', str(FX / 'templates' / 'qwen3.jinja'), '--tokenizer', str(FX / 'tokenizers' / 'qwen3')]
    return ['--target', target]

@pytest.mark.parametrize('target,fmt,thinking', [('smollm2', None, None), ('smollm2', 'messages', None),
                                                 ('smollm2', 'canonical', None), ('tiny-qwen3', None, 'false'),
                                                 ('qwen3', 'messages', None)])
def test_report_cli_no_traceback(target, fmt, thinking, tmp_path, capsys):
    "Every row of the messy file gets a view and an outcome, with and without `--format`; every row in one outcome."
    from dflash_nb.cli import main
    args = ['templates', 'report', str(MESSY), *_report_args(target), '--out', str(tmp_path / 'r.html')]
    args += (['--format', fmt] if fmt else []) + (['--enable-thinking', thinking] if thinking else [])
    assert main(args) == 0
    out = capsys.readouterr().out
    heads = headline(out)
    assert heads and all(h['rows'] == N_ROWS == h['ok'] + h['split'] + h['repaired_by_default'] + h['prompt_only'] + h['quarantined']
                         and h['quarantined'] == h['need_opt_in'] + h['failed'] for h in heads), out
    assert f"({fmt or 'messages'}{'' if fmt else ', detected'})" in out.splitlines()[0]
    page = (tmp_path / 'r.html').read_text()
    assert page.count('<details class="row"') == N_ROWS * len(heads) and 'Traceback' not in page

def test_enable_thinking_is_obeyed(tmp_path, capsys):
    "`--enable-thinking false`: that mode only; left to the template (which has the switch): both modes."
    from dflash_nb.cli import main
    base = ['templates', 'report', str(MESSY), '--target', 'tiny-qwen3']
    assert main(base + ['--enable-thinking', 'false', '--out', str(tmp_path / 'off.html')]) == 0
    out = capsys.readouterr().out
    assert len(headline(out)) == 1 and 'thinking off (set)' in out and 'thinking on' not in out
    page = (tmp_path / 'off.html').read_text()
    assert 'data-mode="thinking off"' in page and 'data-mode="thinking on"' not in page
    assert main(base + ['--out', str(tmp_path / 'both.html')]) == 0
    out = capsys.readouterr().out
    assert len(headline(out)) == 2 and 'thinking on (the template default)' in out and 'thinking off (set)' in out

def test_headline_counts_failed_repaired_and_quarantined_apart(capsys):
    "Read as canonical rows, two rows need only a format-only repair: repaired by default, neither failed nor quarantined."
    exs, _ = template_report(MESSY, 'smollm2', fmt='canonical')
    s, views = exs[0]['summary'], exs[0]['rows']
    repaired = [v['id'] for v in views if v['default'] == 'repaired']
    assert sorted(repaired) == ['content-parts', 'gpt-role'] and s['repaired_by_default'] == 2
    assert s['rows'] == N_ROWS == s['ok'] + s['repaired_by_default'] + s['prompt_only'] + s['quarantined']
    assert s['quarantined'] == sum(v['default'].startswith('quarantined') for v in views) == s['need_opt_in'] + s['failed']
    assert s['failed'] == sum(v['default'] == 'quarantined' for v in views)   # no repair found: quarantined, failed
    from dflash_nb.cli import main
    assert main(['templates', 'report', str(MESSY), '--target', 'smollm2', '--format', 'canonical', '--out', os.devnull]) == 0
    assert headline(capsys.readouterr().out) == [{k: s[k] for k in ('rows', 'ok', 'split', 'repaired_by_default', 'prompt_only', 'quarantined',
                                                                     'need_opt_in', 'failed')}]

# ------------------------------------------------------------------------------------------ the explorer without a kernel
def _browser(url, screenshot=None) -> str:
    "The DOM after scripts of a page (headless chromium, no network), or a screenshot."
    with tempfile.TemporaryDirectory() as prof:
        args = [CHROMIUM, '--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
                '--disable-component-update', '--disable-sync', '--hide-scrollbars', f'--user-data-dir={prof}', '--window-size=1300,1600',
                '--virtual-time-budget=4000', *([f'--screenshot={screenshot}'] if screenshot else ['--dump-dom']), Path(url).resolve().as_uri()]
        r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout

def test_explorer_cell_executed_headless(tmp_path):
    "A cell ending in the explorer, executed without a frontend, holds the static explorer; nbconvert's page shows it offline."
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter
    nb = nbformat.v4.new_notebook(metadata={'kernelspec': {'name': 'python3', 'display_name': 'Python 3', 'language': 'python'}})
    nb.cells = [nbformat.v4.new_code_cell(f"from dflash_nb.explorer import explore_file\n"
                                          f"w = explore_file({str(MESSY)!r}, 'smollm2', max_tokens=200)\nw")]
    NotebookClient(nb, timeout=600, kernel_name='python3', resources={'metadata': {'path': str(tmp_path)}}).execute()
    outs = nb.cells[0].outputs
    html = [o for o in outs if 'text/html' in o.get('data', {})]
    assert any('application/vnd.jupyter.widget-view+json' in o.get('data', {}) for o in outs)   # the widget, for JupyterLab
    assert len(html) == 1 and 'class="dx"' in html[0]['data']['text/html']                   # beside it, the static explorer
    static = html[0]['data']['text/html']
    for reason in ('non-text content', 'system not first', 'assistant first', 'the template drops tool calls', 'missing field'):
        assert f'data-reason="{reason}"' in static, reason
    assert static.count('<details class="row"') == N_ROWS and not re.search(r'(src|href)=|@import|url\(', static)
    assert all('VBox' not in o['data'].get('text/plain', '') for o in outs if 'data' in o)
    assert 'widgets' in nb.metadata   # nbclient kept the widget state, as `nbconvert --execute` does ...
    body, _ = HTMLExporter().from_notebook_node(nb)
    assert 'class="dx"' in body and 'data-reason="non-text content"' in body   # ... and the exported page still has the static view
    (tmp_path / 'explorer.html').write_text(body)
    if CHROMIUM is None: return
    dom = _browser(tmp_path / 'explorer.html')   # offline: the widget's CDN script cannot load, the static explorer shows
    assert re.search(r'class="pos">1 of \d+<', dom) and 'class="dx-static" style="display: none' not in dom
    SHOTS.mkdir(parents=True, exist_ok=True); _browser(tmp_path / 'explorer.html', SHOTS / 'explorer_nbconvert.png')
    # where the widget does render (JupyterLab; an exported page online), the static copy hides itself
    (tmp_path / 'live.html').write_text(f'<html><body><div class="jp-Cell"><div class="jupyter-widgets widget-box widget-vbox">'
                                        f'</div>{static}</div></body></html>')
    assert 'class="dx-static" style="display: none;"' in _browser(tmp_path / 'live.html')

def _free_port() -> int:
    import socket
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]

async def _run_in_lab(url: str, debug_port: int, shot: Path) -> dict:
    "Open `url` (a notebook in JupyterLab) in the headless chromium listening on `debug_port`, run its first cell, read the outputs."
    import asyncio, base64, urllib.request
    from tornado.websocket import websocket_connect   # tornado comes with jupyter_server
    for _ in range(100):
        try: tabs = json.load(urllib.request.urlopen(f'http://127.0.0.1:{debug_port}/json')); break
        except OSError: await asyncio.sleep(0.2)
    ws, n = await websocket_connect(next(t['webSocketDebuggerUrl'] for t in tabs if t['type'] == 'page'), max_message_size=1 << 28), [0]
    async def call(method, **params):
        n[0] += 1; await ws.write_message(json.dumps({'id': n[0], 'method': method, 'params': params}))
        while (m := json.loads(await ws.read_message())).get('id') != n[0]: pass
        return m.get('result', {})
    async def js(expr): return (await call('Runtime.evaluate', expression=expr, returnByValue=True))['result'].get('value')
    panel = '.jp-NotebookPanel:not(.lm-mod-hidden)'
    await call('Page.navigate', url=url)
    for _ in range(240):
        await asyncio.sleep(0.5)
        if await js(f"!!document.querySelector('{panel} .jp-Cell .jp-InputArea-prompt')"): break
    await asyncio.sleep(8)   # the kernel starts
    x, y = await js(f"(function(){{var p=document.querySelector('{panel} .jp-Cell .jp-InputArea-prompt').getBoundingClientRect();return [p.x+5,p.y+5]}})()")
    for t in ('mousePressed', 'mouseReleased'): await call('Input.dispatchMouseEvent', type=t, x=x, y=y, button='left', clickCount=1)
    await asyncio.sleep(1)
    for t in ('rawKeyDown', 'keyUp'):   # shift-enter: run the cell
        await call('Input.dispatchKeyEvent', type=t, modifiers=8, windowsVirtualKeyCode=13, key='Enter', code='Enter', **({'text': '\r'} if t == 'rawKeyDown' else {}))
    state = {}
    for _ in range(180):
        await asyncio.sleep(1)
        state = {'widget': await js(f"document.querySelectorAll('{panel} .jp-OutputArea .widget-vbox').length"),
                 'static': await js(f"(function(){{var s=document.querySelector('{panel} .dx-static');return s?getComputedStyle(s).display:null}})()")}
        if state['widget'] and state['static'] == 'none': break
    shot.write_bytes(base64.b64decode((await call('Page.captureScreenshot', format='png'))['data']))
    return state

@pytest.mark.skipif(not os.environ.get('DFLASH_NB_SLOW') or CHROMIUM is None or shutil.which('jupyter-lab') is None,
                    reason='slow (DFLASH_NB_SLOW=1), needs chromium and jupyterlab')
def test_explorer_in_live_jupyterlab(tmp_path):
    "In a live JupyterLab the widget renders and the static copy hides itself: the rows are shown once."
    import asyncio, nbformat
    nb = nbformat.v4.new_notebook(metadata={'kernelspec': {'name': 'python3', 'display_name': 'Python 3', 'language': 'python'}})
    nb.cells = [nbformat.v4.new_code_cell(f"from dflash_nb.explorer import explore_file\nexplore_file({str(MESSY)!r}, 'smollm2', max_tokens=200)")]
    nbformat.write(nb, tmp_path / 'live.ipynb')
    port, dport = _free_port(), _free_port()
    lab = subprocess.Popen(['jupyter-lab', '--allow-root', '--no-browser', f'--port={port}', '--ServerApp.token=', '--ServerApp.password=',
                            f'--notebook-dir={tmp_path}', f'--LabApp.user_settings_dir={tmp_path / "settings"}',
                            f'--LabApp.workspaces_dir={tmp_path / "workspaces"}'],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, 'PYTHONPATH': str(ROOT)})
    browser = subprocess.Popen([CHROMIUM, '--headless', '--no-sandbox', '--disable-gpu', f'--user-data-dir={tmp_path / "profile"}',
                                f'--remote-debugging-port={dport}', '--window-size=1400,1800', 'about:blank'],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        SHOTS.mkdir(parents=True, exist_ok=True)
        state = asyncio.run(_run_in_lab(f'http://127.0.0.1:{port}/lab/tree/live.ipynb', dport, SHOTS / 'explorer_jupyterlab.png'))
    finally:
        for p in (browser, lab): p.terminate(); p.wait(timeout=30)
    assert state == {'widget': 1, 'static': 'none'}, state
