#!/usr/bin/env python
"""Size and build time of the rendered docs (`dflash-nb docs`), and screenshots of a few pages.

Builds the site twice: first as it comes (every notebook executed unless the cache already has it), then again
with everything cached (rendering only). For each build it records the wall time and the CPU seconds of this
process and its children (the notebooks run in child processes), so a figure taken on a loaded machine still
means something. Then it measures the pages (count, total, largest), the shared files and the search index, and
with chromium installed takes screenshots (index, 21_explorer, 80_train, search results for `explore`, the
README's page and a measurement's).

    python bench/bench_docs.py [--out _docs] [--names 00_core,20_templates] [--fresh]

`--fresh` uses an empty cache, so the first build executes every notebook. Writes bench/results/docs.json and
bench/results/docs/*.png.
"""
import argparse, json, os, platform, resource, shutil, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHOTS = [('index.html', '', 'index.png', (1300, 1100)), ('21_explorer.html', '', '21_explorer.png', (1300, 1600)),
         ('80_train.html', '', '80_train.png', (1300, 1600)), ('index.html', '?q=explore', 'search.png', (1300, 900)),
         ('readme.html', '', 'readme.png', (1300, 1100)), ('bench_quality.html', '', 'bench_quality.png', (1300, 1100))]

def cpu() -> float:
    "CPU seconds of this process and its waited-for children."
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

def build(out, names, cache) -> dict:
    from dflash_nb.docs import render_docs
    lines = []
    t, c = time.time(), cpu()
    pages = render_docs(out, names=names, cache=cache, echo=lines.append)
    return {'wall_s': round(time.time() - t, 1), 'cpu_s': round(cpu() - c, 1), 'pages': len(pages),
            'executed': sum(l.startswith('docs: executing') for l in lines)}

def api_entries(out: Path) -> dict:
    "How many `show_doc` entries the site has, and how many of them have a table of parameters (docments)."
    index = json.loads((out / 'search_index.js').read_text().split(' = ', 1)[1].rstrip(';\n'))
    tables = sum(p.read_text().count('<strong>Details</strong>') for p in out.glob('*.html'))
    return {'api_entries': sum(e[3] == 'api' for e in index), 'with_parameter_table': tables,
            'search_index_entries': len(index)}

def sizes(out: Path) -> dict:
    pages = {p.name: p.stat().st_size for p in sorted(out.glob('*.html'))}
    big = max(pages, key=pages.get)
    return {'pages': len(pages), 'total_bytes': sum(pages.values()), 'largest_page': big, 'largest_bytes': pages[big],
            **api_entries(out),
            'shared_bytes': {n: (out / n).stat().st_size for n in ('dflash_nb.css', 'dflash_nb.js', 'search_index.js')},
            'per_page': pages}

def screenshot(url: str, png: Path, size) -> bool:
    exe = shutil.which('chromium') or shutil.which('chromium-browser')
    if exe is None: return False
    with tempfile.TemporaryDirectory() as prof:
        r = subprocess.run([exe, '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
                            '--disable-background-networking', '--disable-component-update', '--disable-sync',
                            '--hide-scrollbars', f'--user-data-dir={prof}', f'--window-size={size[0]},{size[1]}',
                            f'--screenshot={png}', url], capture_output=True, timeout=120)
    return r.returncode == 0 and png.exists()

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', default=None, help='the site folder (default: a temporary one)')
    ap.add_argument('--names', default=None, help='only these notebooks, comma-separated')
    ap.add_argument('--fresh', action='store_true', help='start from an empty cache of executed notebooks')
    a = ap.parse_args()
    out = Path(a.out or tempfile.mkdtemp(prefix='docs_bench_'))
    names = a.names.split(',') if a.names else None
    cache = Path(tempfile.mkdtemp(prefix='docs_cache_')) if a.fresh else None
    first, again = build(out, names, cache), build(out, names, cache)
    res = {'first_build': first, 'cached_build': again, **sizes(out), 'machine': platform.platform(),
           'cores': os.cpu_count(), 'load_avg_1min': round(os.getloadavg()[0], 2)}
    shots = ROOT / 'bench' / 'results' / 'docs'; shots.mkdir(parents=True, exist_ok=True)
    res['screenshots'] = [f'bench/results/docs/{png}' for page, query, png, size in SHOTS
                          if (out / page).exists() and screenshot((out / page).resolve().as_uri() + query, shots / png, size)]
    print(f"{'build':<14}{'wall s':>9}{'CPU s':>9}{'executed':>10}")
    for k in ('first_build', 'cached_build'):
        print(f"{k:<14}{res[k]['wall_s']:>9}{res[k]['cpu_s']:>9}{res[k]['executed']:>10}")
    print(f"show_doc entries {res['api_entries']}, with a parameter table {res['with_parameter_table']}; "
          f"search index {res['search_index_entries']} entries")
    print(f"pages {res['pages']}, total {res['total_bytes']:,} bytes, largest {res['largest_page']} "
          f"{res['largest_bytes']:,} bytes; shared {res['shared_bytes']}; load {res['load_avg_1min']}")
    print('screenshots:', ', '.join(res['screenshots']) or 'none (chromium not installed)')
    (ROOT / 'bench' / 'results' / 'docs.json').write_text(json.dumps(res, indent=2) + '\n')

if __name__ == '__main__': main()
