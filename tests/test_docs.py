"""The rendered docs and the template report, checked in a real headless browser (Debian's chromium).

Every page loads (the DOM after scripts has its title), images are real PNGs and tables are there, no hidden cell,
`show_doc` call or `#|` directive is visible in any code cell, every in-site link and anchor resolves (the table of
contents' included, each entry once), the sidebar lists the stages before the library, the index lists each page
once, the search box finds a function by name, `show_doc` has its table of parameters, no page is over 1 MB, the
README's measurements have their pages, and no page shows a path of the machine that built it: the docs are built
in a copy of the checkout with its home, temporary folder and cache moved to folders with distinctive names, and no
page may show those names or a variable standing for their prefix. Screenshots are kept in `runs/_screenshots/` (or
`$DFLASH_NB_SCREENSHOTS`). Skipped, with the reason, when chromium is not installed (`.ci/run` installs it)."""
import base64, json, os, re, shutil, struct, subprocess, sys, tempfile
from html.parser import HTMLParser
from pathlib import Path
import pytest
from conftest import clean_copy

from dflash_nb.core import cache_dir, fixtures_dir, write_jsonl

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = next((shutil.which(n) for n in ('chromium', 'chromium-browser', 'google-chrome') if shutil.which(n)), None)
needs_browser = pytest.mark.skipif(CHROMIUM is None, reason='chromium not installed (apt-get install chromium; .ci/run installs it)')
SHOTS = Path(os.environ.get('DFLASH_NB_SCREENSHOTS', ROOT / 'runs' / '_screenshots'))
PAGES = ['00_core', '04_docs', '10_sources', '20_templates', '21_explorer', '90_evaluate']   # 90: @patch methods shown once
BENCH = sorted(f'bench_{p.stem}' for p in (ROOT / 'bench' / 'results').glob('*.md') if re.match(r'\s*#\s', p.read_text()))
# a machine's folder in a page: an absolute path under a root where checkouts, homes and scratch folders live
ABS_PATH = re.compile(r'(?<![\w.:/~$+=-])/(?:home|root|work|tmp|Users|mnt|scratch|data|srv|opt|var)/[\w.-]')
MD_PAGES = ['readme', *sorted(f'guide_{p.stem}' for p in (ROOT / 'guides').glob('*.md')), *BENCH]

def browser(url, screenshot: Path | None = None, size=(1300, 1600)) -> str:
    "The DOM after scripts (`--dump-dom`) of a path or URL, or a screenshot; a fresh profile each time."
    url = url.resolve().as_uri() if isinstance(url, Path) else url
    with tempfile.TemporaryDirectory() as prof:
        args = [CHROMIUM, '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
                '--disable-background-networking', '--disable-component-update', '--disable-sync', '--hide-scrollbars',
                f'--user-data-dir={prof}', f'--window-size={size[0]},{size[1]}']
        args += [f'--screenshot={screenshot}'] if screenshot else ['--dump-dom']
        r = subprocess.run(args + [url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    if screenshot: assert screenshot.stat().st_size > 10_000, screenshot
    return r.stdout

class Page(HTMLParser):
    "Links, ids, images, tables, the table of contents' links, the text of code inputs and of outputs of a DOM."
    VOID = ('br', 'img', 'meta', 'link', 'input', 'hr', 'wbr', 'source')
    def __init__(self, dom: str):
        super().__init__()
        self.links, self.ids, self.imgs, self.tables, self.inputs, self.outputs, self.toc = [], set(), [], 0, [], [], []
        self.doc_outputs, self.kind, self.side = [], '', []   # show_doc outputs; the header; the sidebar's headings
        self._stack, self._where, self._doc = [], [], False
        self.feed(dom)
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get('class') or ''
        if a.get('id'): self.ids.add(a['id'])
        if tag == 'a' and a.get('href'):
            self.links.append(a['href'])
            if 'dn-toc' in self._where: self.toc.append(a['href'])
        if tag == 'img': self.imgs.append(a.get('src', ''))
        if tag == 'table': self.tables += 1
        if tag in self.VOID: return
        if 'jp-Cell' in cls.split(): self._doc = 'celltag_dn-doc' in cls.split()
        where = next((w for w in ('jp-InputArea-editor', 'jp-OutputArea', 'dn-toc', 'dn-kind', 'dn-side') if w in cls.split()), None)
        if tag == 'h4' and 'dn-side' in self._where: where = 'side-h4'
        self._stack.append(where)
        if where:
            self._where.append(where)
            if where == 'jp-InputArea-editor': self.inputs.append('')
            if where == 'jp-OutputArea': (self.doc_outputs if self._doc else self.outputs).append('')
            if where == 'side-h4': self.side.append('')
    def handle_endtag(self, tag):
        if tag in self.VOID or not self._stack: return
        if self._stack.pop(): self._where.pop()
    def handle_data(self, data):
        if 'jp-InputArea-editor' in self._where: self.inputs[-1] += data
        elif 'jp-OutputArea' in self._where: (self.doc_outputs if self._doc else self.outputs)[-1] += data
        elif 'dn-kind' in self._where: self.kind += data
        elif 'side-h4' in self._where: self.side[-1] += data

def png_size(src: str) -> tuple[int, int]:
    "Width and height of a data-URI PNG (its IHDR chunk)."
    raw = base64.b64decode(src.split(',', 1)[1])
    assert raw[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
    return struct.unpack('>II', raw[16:24])

def machine_paths() -> list[str]:
    "Folders of this machine no page may show: the checkout, the Python installation, the cache, the fixtures."
    out = [str(ROOT), sys.prefix, sys.base_prefix, str(cache_dir())]
    return out + ([str(fixtures_dir())] if fixtures_dir() else [])

@pytest.fixture(scope='module')
def docs(demo_run, tmp_path_factory):
    "The docs of PAGES (and the index), their stage cells from the demo run, the notebooks executed (or cached)."
    from dflash_nb.docs import render_docs
    run_dir, _ = demo_run
    out = tmp_path_factory.mktemp('docs')
    render_docs(out, run_dir=run_dir, names=PAGES + MD_PAGES)
    return out, run_dir

def test_site_files(docs):
    "One page per notebook plus the index; one shared stylesheet and script; no page over 1 MB or inlining the CSS."
    out, _ = docs
    assert sorted(p.name for p in out.iterdir()) == sorted([f'{n}.html' for n in PAGES + MD_PAGES] + [
        'index.html', 'dflash_nb.css', 'dflash_nb.js', 'search_index.js'])
    for p in out.glob('*.html'):
        body = p.read_text()
        assert p.stat().st_size < 1_000_000, (p.name, p.stat().st_size)
        assert re.search(r'<link[^>]*href="dflash_nb.css"', body) and re.search(r'<script[^>]*src="dflash_nb.js"', body), p.name
        styles = sum(map(len, re.findall(r'<style[^>]*>(.*?)</style>', body, re.S)))
        assert styles < 30_000, (p.name, styles)   # the explorer's own few rules, never JupyterLab's 250 KB
        assert not re.search(r'<script[^>]+src="https?:', body), f'{p.name} loads a script from the network'
        for path in machine_paths(): assert path + '/' not in body, f'{p.name} shows {path}'
        if p.name.startswith('bench_'):   # measured on other machines: none of their folders either
            m = ABS_PATH.search(re.sub(r'data:[\w/+.-]+;base64,[\w+/=]+', 'data:', body))
            assert not m, f'{p.name} shows {body[m.start() - 40:m.end() + 40]!r}'
        side = re.search(r'<nav class="dn-side">(.*?)</nav>', body, re.S)[1]
        names = re.findall(r'<a\b(?![^>]*dn-home)[^>]*>(?:<span class="num">[^<]*</span>)?([^<]*)</a>', side)
        assert len(names) == len(set(names)) == len(PAGES + MD_PAGES), f'{p.name}: sidebar {names}'
    assert (out / 'dflash_nb.css').stat().st_size > 100_000   # JupyterLab's styles, once
    assert asset_files() <= {p.name for p in out.iterdir()} | {'page.html.j2'}

def asset_files() -> set[str]:
    "The files of `dflash_nb/assets` (the page template, the stylesheet, the script): package data, not Python strings."
    from dflash_nb.docs import ASSETS
    return {p.name for p in ASSETS.iterdir()}

def test_assets_are_files():
    "The page template, the stylesheet and the script are files of the package, listed as package data by setup.py."
    assert asset_files() == {'page.html.j2', 'dflash_nb.css', 'dflash_nb.js'}
    assert "'assets/*'" in (ROOT / 'setup.py').read_text() and 'dflash_nb/assets' in (ROOT / 'MANIFEST.in').read_text()
    src = (ROOT / 'dflash_nb' / 'docs.py').read_text()
    assert '.dn-side{' not in src and 'getElementById' not in src and "extends 'lab" not in src
    assert len(src.splitlines()) < 1000

def test_page_names_unique():
    "No two pages of the site have the same title (the sidebar lists them by title), notebooks and Markdown pages alike."
    from dflash_nb.docs import markdown_notebook, doc_files
    titles = [markdown_notebook(f, stem, group, ROOT).metadata['dflash_nb_docs']['frontmatter']['title']
              for f, stem, group in doc_files(ROOT)]
    for nb in sorted((ROOT / 'nbs').glob('[0-9]*.ipynb')):   # a notebook's title: its first `# heading`
        md = [''.join(c['source']) for c in json.loads(nb.read_text())['cells'] if c['cell_type'] == 'markdown']
        titles.append(next(m[1] for t in md for m in [re.match(r'#\s+(.+)', t)] if m))
    dup = sorted({t for t in titles if titles.count(t) > 1})
    assert dup == [] and len(titles) > 40, dup

@needs_browser
def test_docs_in_browser(docs):
    out, run_dir = docs
    SHOTS.mkdir(parents=True, exist_ok=True)
    doms = {p.name: browser(p) for p in sorted(out.glob('*.html'))}
    pages = {n: Page(d) for n, d in doms.items()}
    assert set(pages) == {f'{n}.html' for n in PAGES + MD_PAGES} | {'index.html'}
    n_imgs = n_links = n_toc = 0
    for name, pg in pages.items():
        assert re.search(r'<h1 class="dn-title">[^<]+</h1>', doms[name]) and 'class="dn-side"' in doms[name], f'{name} did not load'
        code = '\n'.join(pg.inputs)
        assert not re.search(r'(?m)^\s*#\|', code), f'{name}: a directive line is visible'
        assert 'from nbdev.showdoc import *' not in code and 'nbdev.nbdev_export()' not in code, f'{name}: a hidden cell is visible'
        assert not re.search(r'(?m)^\s*show_doc\(', code), f'{name}: a show_doc call is visible'
        assert str(Path.home()) + '/' not in '\n'.join(pg.outputs), f'{name}: an output shows the home folder'
        assert 'Traceback' not in '\n'.join(pg.outputs), f'{name}: a cell failed in the docs build'
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
        n_toc += len(pg.toc)
        assert all(h.startswith('#') and h[1:] in pg.ids for h in pg.toc), f'{name}: a table-of-contents link is broken'
        toc = re.search(r'<aside class="dn-toc">(.*?)</aside>', doms[name], re.S)[1]
        entries = re.findall(r'<li class="l\d"><a href="[^"]*">(.*?)</a></li>', toc)   # a section, or an API name in <code>
        dup = {t for t in entries if entries.count(t) > 1}
        assert not dup and len(set(pg.toc)) == len(pg.toc), f'{name}: the table of contents lists {dup or pg.toc} twice'
        assert pg.side == ['Stages', 'Library', 'Guides', 'Measurements'], f'{name}: sidebar groups {pg.side}'
    assert n_links > 50 and n_toc > 40
    assert pages['index.html'].tables >= 1 and pages['00_core.html'].ids >= {'atomic_write'}
    main = re.sub(r'<nav class="dn-side">.*?</nav>|<footer class="dn-pager">.*?</footer>', '', doms['index.html'], flags=re.S)
    listed = re.findall(r'href="([\w.-]+\.html)"', main)
    assert sorted(listed) == sorted(set(pages) - {'index.html'}), 'the index lists a page twice, or not at all'
    assert n_imgs >= 1, 'no image on the executed stage pages'   # 10_sources plots the mix
    for n in ('index', '10_sources', '20_templates', '21_explorer', 'readme', 'bench_quality'): browser(out / f'{n}.html', SHOTS / f'docs_{n}.png')
    # the explorer at the top of 21_explorer shows (an output of the docs build) and its pager script ran
    assert 'class="dx"' in doms['21_explorer.html'] and re.search(r'class="pos">1 of \d+<', doms['21_explorer.html'])

@needs_browser
def test_search_finds_a_function(docs):
    "`index.html?q=NAME` runs the search box: the function's own entry comes first and points at its anchor."
    out, _ = docs
    for name, page in (('explore_file', '21_explorer.html'), ('atomic_write', '00_core.html')):
        dom = browser((out / 'index.html').resolve().as_uri() + f'?q={name}')
        hits = re.search(r'<ol id="dn-hits"[^>]*>(.*?)</ol>', dom, re.S)
        assert hits and 'hidden' not in re.search(r'<ol id="dn-hits"[^>]*>', dom)[0], 'no search results shown'
        first = re.search(r'<a href="([^"]+)"', hits[1])[1]
        assert first == f'{page}#{name}', (name, first)
    SHOTS.mkdir(parents=True, exist_ok=True)   # also when run without test_docs_in_browser
    browser((out / 'index.html').resolve().as_uri() + '?q=explore', SHOTS / 'docs_search.png', size=(1300, 900))
    dom = browser((out / 'index.html').resolve().as_uri() + '?q=zzzz_no_such_name')
    assert 'no match' in dom

def test_show_doc_tables_and_source_links(docs):
    "A documented function has its table of parameters; `source` and `notebook` links go to settings.ini's repository."
    from dflash_nb.docs import site_settings
    out, _ = docs
    git = site_settings()['git_url'].rstrip('/') + '/blob/' + site_settings()['branch'] + '/'
    body = (out / '04_docs.html').read_text()
    sec = body[body.index('id="render_docs"'):]
    assert re.search(r'<table>.*?<strong>Type</strong>.*?out_dir.*?the site\'s folder', sec, re.S), 'no parameter table'
    links = re.findall(r'<span class="dn-links"><a href="([^"]+)">source</a> · <a href="([^"]+)">notebook</a>', body)
    assert len(links) >= 10
    for code, nb in links:
        assert re.fullmatch(re.escape(git) + r'dflash_nb/docs\.py#L\d+', code), code
        assert re.fullmatch(re.escape(git) + r'nbs/04_docs\.ipynb\?plain=1#L\d+', nb), nb
    assert f'<a href="{git}nbs/04_docs.ipynb">source notebook</a>' in body

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

def test_readme_starts_with_why():
    """The README is under 25 KB; its first screen (40 lines) says why beside speculators and SpecForge and gives the
    two commands; the measurements it links to are pages of bench/results."""
    readme = (ROOT / 'README.md').read_text()
    assert len(readme.encode()) < 25_000, f'README.md is {len(readme.encode()):,} bytes'
    first = '\n'.join(readme.splitlines()[:40])
    for word in ('speculators', 'SpecForge', './run.sh demo', './run.sh test', 'papermill', 'explore_file', 'dflash-nb docs'):
        assert word in first, word
    linked = set(re.findall(r'\]\((bench/results/[\w.-]+\.md)\)', readme))
    assert len(linked) >= 8 and all((ROOT / md).is_file() for md in linked), linked

def test_readme_and_measurements_are_pages(docs):
    """Every bench/results/*.md is a page of the built docs or a table a page shows, the README too, and the
    README's page links to the page of each measurement it names."""
    out, _ = docs
    built = {p.name for p in out.iterdir()}
    assert {f'{n}.html' for n in BENCH} <= built
    tables = {p.name for p in (ROOT / 'bench' / 'results').glob('*.md')} - {n[len('bench_'):] + '.md' for n in BENCH}
    shown = {t: f.name for t in tables for f in out.glob('bench_*.html') if f'<h3 id="{t}">{t}' in f.read_text()}
    assert tables and set(shown) == tables, tables - set(shown)   # recipes.md, the samples tables: under `## Tables`
    page = (out / 'readme.html').read_text()
    for md in set(re.findall(r'\]\((bench/results/[\w.-]+\.md)\)', (ROOT / 'README.md').read_text())):
        name = Path(md).name
        assert f'href="{shown.get(name) or "bench_" + Path(md).stem + ".html"}"' in page, md
    assert 'href="bench/results/' not in page
    for f in out.glob('bench_*.html'):   # the result files as written, less the paths of the machine that ran them
        assert not re.search(r'(?<![\w.:/])/\S+/bench/results/', f.read_text()), f.name

def _copy_tree(src: Path, dst: Path):
    "Hard links where the file system allows (the models are hundreds of MB), else copies."
    def link(a, b):
        try: os.link(a, b)
        except OSError: shutil.copy2(a, b)
    shutil.copytree(src, dst, copy_function=link, symlinks=False)

MARK = 'QZX'   # in the name of each folder of the build: no page may show it

def build_paths_shown(site: Path) -> list[str]:
    """What the pages of `site` show of the build's folders: their distinctive names anywhere; in the outputs (not
    the docstrings of `show_doc`) and the headers, a path whose prefix a variable replaced (`$TMPDIR/`, `~/`, ...)
    or a temporary folder's random name."""
    found = []
    for p in sorted(site.iterdir()):
        text = re.sub(r'data:[\w/+.-]+;base64,[\w+/=]+', 'data:', p.read_text(errors='replace'))   # images apart
        found += [f'{p.name}: {m}' for m in re.findall(rf'\S*{MARK}\S*', text)[:3]]
        if p.suffix != '.html': continue
        pg = Page(text)
        for t in pg.outputs + [pg.kind]:
            for pat in (r'\$[A-Za-z_]+/\S*', r'(?<![\w.])~/\S*', r'(?<![\w-])tmp[a-z0-9_]{8}/\S*', r'pytest-of-\S*'):
                found += [f'{p.name}: {m}' for m in re.findall(pat, t)[:3]]
    return found

def test_build_paths_never_shown(tmp_path):
    """The docs built in a copy of the checkout, with the home, temporary folder and cache in distinctively named
    folders and a run shown: no page shows any of them, however its prefix was replaced."""
    from dflash_nb.core import cache_dir
    ck, home, tmp, cache = (tmp_path / f'{n}_{MARK}' for n in ('checkout', 'home', 'tmp', 'cache'))
    clean_copy(ck); home.mkdir(); tmp.mkdir(); cache.mkdir()
    for sub in ('models', 'downloads'):   # the converted SmolLM2 and its wheel: no conversion, no network
        if (cache_dir() / sub).is_dir(): _copy_tree(cache_dir() / sub, cache / sub)
    env = {k: v for k, v in os.environ.items() if k not in ('DFLASH_NB_NBS', 'DFLASH_NB_SMOKE_DIR')}
    env.update(HOME=str(home), TMPDIR=str(tmp), DFLASH_NB_CACHE=str(cache), PYTHONPATH=str(ck), OMP_NUM_THREADS='1',
               HF_HUB_OFFLINE='1', TRANSFORMERS_OFFLINE='1', HF_DATASETS_OFFLINE='1')
    exe = [sys.executable, '-c', 'import sys; from dflash_nb.cli import main; sys.exit(main(sys.argv[1:]))']
    run = lambda *a: subprocess.run(exe + list(a), cwd=ck, env=env, capture_output=True, text=True, timeout=1800)
    r = run('run', '--quiet', '--until', 'templates')   # a run whose records the stage pages show: runs/demo
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    names = 'index,00_core,01_targets,02_pipeline,04_docs,10_sources,readme,bench_quality'
    r = run('docs', '--out', str(tmp_path / 'site'), '--run', str(ck / 'runs' / 'demo'), '--only', names)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    site = tmp_path / 'site'
    assert len(list(site.glob('*.html'))) == len(names.split(','))
    kind = Page((site / '10_sources.html').read_text()).kind
    assert 'stage cells from the run runs/demo' in kind, kind
    assert build_paths_shown(site) == []
    made = Page((site / '04_docs.html').read_text()).outputs
    assert any(re.search(r'made in nbs\b', o) for o in made), 'the example folder is shown relative to itself'

def test_build_paths_check_can_fail(tmp_path):
    "The check above finds each kind of path it looks for."
    cells = [f'<div class="jp-Cell"><div class="jp-OutputArea"><pre>{t}</pre></div></div>' for t in
             (f'/x/checkout_{MARK}/runs', '$TMPDIR/run/x.json', '~/data/a.jsonl', 'tmpab12cd34/x.json')]
    for i, c in enumerate(cells): (tmp_path / f'{i}.html').write_text(f'<html><body>{c}</body></html>')
    doc = f'<div class="jp-Cell celltag_dn-doc"><div class="jp-OutputArea"><pre>`$DFLASH_NB_CACHE`, else `~/.cache`</pre></div></div>'
    (tmp_path / 'doc.html').write_text(doc)
    assert [f.split(':')[0] for f in build_paths_shown(tmp_path)] == ['0.html', '1.html', '2.html', '3.html']

def test_no_machine_path_in_sources():
    """No notebook, module, guide or measurement page names a folder of a particular machine (a checkout, a home, the
    shared reference beside this one)."""
    files = [*ROOT.glob('nbs/*.ipynb'), *ROOT.glob('dflash_nb/**/*.py'), ROOT / 'README.md', ROOT / 'CONTRIBUTING.md',
             *ROOT.glob('guides/*.md'), *ROOT.glob('bench/results/**/*.md')]
    bad = re.compile(r'/work/|/home/[a-z]|/Users/[A-Za-z]|shared/reference|[A-Z]:\\\\Users')
    found = [f'{f.relative_to(ROOT)}: {m[0]}' for f in files for m in [bad.search(f.read_text(errors='replace'))] if m]
    assert found == []

def test_docs_cite_what_a_reader_can_open():
    """The guides and the measurements cite papers and public projects, never a file beside the checkout
    (`reference/*.md`, `../shared/...`), which a reader of the site cannot open; the docs notebook's prose neither."""
    bad = re.compile(r'reference/[\w.-]+\.md|\.\./shared|(?<![\w<])shared/(?:fixtures|reference)')
    files = [*ROOT.glob('guides/*.md'), *ROOT.glob('bench/results/**/*.md')]
    found = [f'{f.relative_to(ROOT)}: {m[0]}' for f in files for m in bad.finditer(f.read_text())]
    nb = json.loads((ROOT / 'nbs' / '04_docs.ipynb').read_text())
    found += [f'04_docs: {m[0]}' for c in nb['cells'] if c['cell_type'] == 'markdown' for m in bad.finditer(''.join(c['source']))]
    assert found == []
