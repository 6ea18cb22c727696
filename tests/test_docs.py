"""The rendered docs and the template report, checked in a real headless browser (Debian's chromium): every page
loads (the DOM after scripts has its title), images are real PNGs and tables are there, no hidden cell, `show_doc`
call or `#|` directive is visible in any code cell, and every in-site link and anchor resolves. Screenshots are kept
in `runs/_screenshots/` (or `$DFLASH_NB_SCREENSHOTS`). Skipped, with the reason, when chromium is not installed
(`.ci/run` installs it)."""
import base64, os, re, shutil, struct, subprocess, tempfile
from html.parser import HTMLParser
from pathlib import Path
import pytest

from dflash_nb.core import write_jsonl

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = next((shutil.which(n) for n in ('chromium', 'chromium-browser', 'google-chrome') if shutil.which(n)), None)
needs_browser = pytest.mark.skipif(CHROMIUM is None, reason='chromium not installed (apt-get install chromium; .ci/run installs it)')
SHOTS = Path(os.environ.get('DFLASH_NB_SCREENSHOTS', ROOT / 'runs' / '_screenshots'))
PAGES = ['00_core', '04_docs', '10_sources', '20_templates']

def browser(path: Path, screenshot: Path | None = None, size=(1300, 1600)) -> str:
    "The DOM after scripts (`--dump-dom`), or a screenshot; a fresh profile each time."
    with tempfile.TemporaryDirectory() as prof:
        args = [CHROMIUM, '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
                '--disable-background-networking', '--disable-component-update', '--disable-sync', '--hide-scrollbars',
                f'--user-data-dir={prof}', f'--window-size={size[0]},{size[1]}']
        args += [f'--screenshot={screenshot}'] if screenshot else ['--dump-dom']
        r = subprocess.run(args + [path.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    if screenshot: assert screenshot.stat().st_size > 10_000, screenshot
    return r.stdout

class Page(HTMLParser):
    "Links, ids, images, tables and the text of code-cell inputs of a page's DOM."
    def __init__(self, dom: str):
        super().__init__()
        self.links, self.ids, self.imgs, self.tables, self.inputs = [], set(), [], 0, []
        self._stack, self._in_input = [], 0
        self.feed(dom)
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get('id'): self.ids.add(a['id'])
        if tag == 'a' and a.get('href'): self.links.append(a['href'])
        if tag == 'img': self.imgs.append(a.get('src', ''))
        if tag == 'table': self.tables += 1
        if tag in ('br', 'img', 'meta', 'link', 'input', 'hr', 'wbr'): return
        inp = 'jp-InputArea' in (a.get('class') or '')
        self._stack.append(inp); self._in_input += inp
        if inp: self.inputs.append('')
    def handle_endtag(self, tag):
        if tag in ('br', 'img', 'meta', 'link', 'input', 'hr', 'wbr') or not self._stack: return
        self._in_input -= self._stack.pop()
    def handle_data(self, data):
        if self._in_input: self.inputs[-1] += data

def png_size(src: str) -> tuple[int, int]:
    "Width and height of a data-URI PNG (its IHDR chunk)."
    raw = base64.b64decode(src.split(',', 1)[1])
    assert raw[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
    return struct.unpack('>II', raw[16:24])

@pytest.fixture(scope='module')
def docs(demo_run, tmp_path_factory):
    from dflash_nb.docs import render_docs
    run_dir, _ = demo_run
    out = tmp_path_factory.mktemp('docs')
    render_docs(out, run_dir=run_dir, names=PAGES)
    return out, run_dir

@needs_browser
def test_docs_in_browser(docs):
    out, run_dir = docs
    SHOTS.mkdir(parents=True, exist_ok=True)
    doms = {p.name: browser(p) for p in sorted(out.glob('*.html'))}
    pages = {n: Page(d) for n, d in doms.items()}
    assert set(pages) == {f'{n}.html' for n in PAGES} | {'index.html'}
    n_imgs = n_links = 0
    for name, pg in pages.items():
        assert re.search(r'<h1 class="dn-title">[^<]+</h1>', doms[name]) and 'class="dn-side"' in doms[name], f'{name} did not load'
        code = '\n'.join(pg.inputs)
        assert not re.search(r'(?m)^\s*#\|', code), f'{name}: a directive line is visible'
        assert 'from nbdev.showdoc import *' not in code and 'nbdev.nbdev_export()' not in code, f'{name}: a hidden cell is visible'
        assert not re.search(r'(?m)^\s*show_doc\(', code), f'{name}: a show_doc call is visible'
        for src in pg.imgs:
            if src.startswith('data:image/png'):
                w, h = png_size(src); assert w > 50 and h > 50, (name, w, h); n_imgs += 1
        for href in pg.links:
            if re.match(r'[a-z]+:', href): continue   # external (offline here)
            n_links += 1
            target, _, anchor = href.partition('#')
            target = target or name
            assert target in pages, f'{name}: broken link {href}'
            assert not anchor or anchor in pages[target].ids, f'{name}: broken anchor {href}'
    assert n_links > 50
    assert pages['index.html'].tables >= 1 and pages['00_core.html'].ids >= {'atomic_write'}
    assert n_imgs >= 1, 'no image on the executed stage pages'   # 10_sources plots the mix
    for n in ('index', '10_sources', '20_templates'): browser(out / f'{n}.html', SHOTS / f'docs_{n}.png')
    if 'explore_file' in (out / '20_templates.html').read_text():   # the rendered notebook has the explorer: it shows, its pager ran
        assert 'class="dx"' in doms['20_templates.html'] and re.search(r'class="pos">1 of \d+<', doms['20_templates.html']), 'the explorer did not render'

@needs_browser
def test_report_in_browser(tmp_path):
    "`templates report` on rows with a failure: the page loads, the pager script shows one row of the first failure reason."
    from dflash_nb.cli import main
    u, a = {'role': 'user', 'content': 'Hi there'}, {'role': 'assistant', 'content': 'Hello!'}
    rows = [{'uuid': f'r{i}', 'messages': [u, a]} for i in range(3)] + [{'uuid': 'bad1', 'messages': [u, {'role': 'assistant', 'content': None}]},
            {'uuid': 'bad2', 'messages': [{'role': 'user', 'content': [{'type': 'text', 'text': 'x'}]}, a]}, {'messages': [u]}]
    write_jsonl(tmp_path / 'rows.jsonl', rows)
    assert main(['templates', 'report', str(tmp_path / 'rows.jsonl'), '--target', 'smollm2', '--out', str(tmp_path / 'r.html')]) == 0
    dom = browser(tmp_path / 'r.html')
    pg = Page(dom)
    assert pg.tables >= 1 and re.search(r'class="pos">1 of 1<', dom)
    tags = re.findall(r'<details class="row"[^>]*>', dom)
    assert len(tags) == 6 and sum('display: none' not in t for t in tags) == 1, tags
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser(tmp_path / 'r.html', SHOTS / 'template_report.png')
