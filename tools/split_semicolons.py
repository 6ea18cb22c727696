"""Put each statement of a `a; b` line on its own line (ruff E702), in notebooks and modules.

A line `if x: a; b` becomes a header and an indented body; a trailing comment stays with the last statement. Every
rewrite is checked: the cell's syntax tree (`ast.dump`, positions left out) is the same before and after, else the
cell is left as it was and named. Cells with IPython magics or shell lines are left alone.

    python tools/split_semicolons.py nbs/*.ipynb          # rewrite in place, print what changed
    python tools/split_semicolons.py --check nbs/*.ipynb  # only count
"""
import argparse, ast, io, json, keyword, sys, tokenize
from pathlib import Path

COMPOUND = {'if', 'elif', 'else', 'for', 'while', 'with', 'try', 'except', 'finally', 'def', 'class', 'async'}

def _logical_lines(src: str):
    "Yield the tokens of each logical line (up to its NEWLINE)."
    line = []
    for t in tokenize.generate_tokens(io.StringIO(src).readline):
        if t.type in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING) and not line: continue
        if t.type == tokenize.ENDMARKER: break
        line.append(t)
        if t.type == tokenize.NEWLINE: yield line; line = []

def _split_line(toks, lines) -> list[str] | None:
    "The physical lines replacing this logical line, or None when it has no top-level semicolon."
    depth, semis, colon = 0, [], None
    first = next(t for t in toks if t.type not in (tokenize.COMMENT, tokenize.NL))
    lam = 0
    for t in toks:
        if t.type == tokenize.OP and t.string in '([{': depth += 1
        elif t.type == tokenize.OP and t.string in ')]}': depth -= 1
        elif t.type == tokenize.NAME and t.string == 'lambda' and depth == 0: lam += 1
        elif t.type == tokenize.OP and t.string == ':' and depth == 0:
            if lam: lam -= 1
            elif colon is None and first.string in COMPOUND and not semis: colon = t
        elif t.type == tokenize.OP and t.string == ';' and depth == 0: semis.append(t)
    if not semis: return None
    (r0, c0), (r1, _) = first.start, toks[-1].end
    text = ''.join(lines[r0 - 1:r1])
    ind = lines[r0 - 1][:c0]
    def off(pos): return sum(len(l) for l in lines[r0 - 1:pos[0] - 1]) + pos[1]
    cuts = [(off(s.start), off(s.end)) for s in semis]
    starts, pieces = [c0], []
    for a, b in cuts: pieces.append(text[starts[-1]:a]); starts.append(b)
    pieces.append(text[starts[-1]:].rstrip('\n'))
    pieces = [p.strip() for p in pieces]
    if pieces[-1] == '' or pieces[-1].startswith('#'):   # a trailing `;` (E703): keep it on the last statement
        tail = pieces.pop(); pieces[-1] += ';' + ((' ' + tail) if tail else '')
        if len(pieces) == 1: return None
    out = []
    if colon is not None:
        h = off(colon.end) - c0
        head, body0 = pieces[0][:h], pieces[0][h:].strip()
        if body0:
            out.append(ind + head + '\n'); out += [ind + '    ' + p + '\n' for p in [body0] + pieces[1:]]
            return out
    return [ind + p + '\n' for p in pieces]

def split_source(src: str) -> str:
    "`src` with one statement a line; unchanged if it has no top-level semicolon or cannot be tokenized."
    lines = src.splitlines(keepends=True)
    if lines and not lines[-1].endswith('\n'): lines[-1] += '\n'
    try: logical = list(_logical_lines(''.join(lines)))
    except (tokenize.TokenError, SyntaxError, IndentationError): return src
    out, done = [], 0
    for toks in logical:
        new = _split_line(toks, lines)
        if new is None: continue
        r0 = toks[0].start[0]
        first = next(t for t in toks if t.type not in (tokenize.COMMENT, tokenize.NL)).start[0]
        r1 = toks[-1].end[0]
        out += lines[done:first - 1] + new; done = r1
    if done == 0: return src
    res = ''.join(out + lines[done:])
    return res if src.endswith('\n') else res.rstrip('\n')

def _same_tree(a: str, b: str) -> bool:
    try: return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))
    except SyntaxError: return False

def fix_cell(src: str) -> tuple[str, int]:
    "The cell's source one statement a line (if its tree stays the same) and how many semicolons went."
    if any(l.lstrip().startswith(('%', '!')) for l in src.splitlines()): return src, 0
    new = split_source(src)
    if new == src: return src, 0
    if not _same_tree(src, new): raise ValueError(f'the rewrite changes the program:\n{src}\n---\n{new}')
    return new, src.count(';') - new.count(';')

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('paths', nargs='+'); ap.add_argument('--check', action='store_true')
    a = ap.parse_args(argv)
    total = 0
    for p in map(Path, a.paths):
        if p.suffix == '.ipynb':
            nb, n = json.loads(p.read_text()), 0
            for c in nb['cells']:
                if c['cell_type'] != 'code': continue
                src = ''.join(c['source'])
                try: new, k = fix_cell(src)
                except ValueError as e: print(f'{p}: left alone: {e}', file=sys.stderr); continue
                if k: c['source'] = new.splitlines(keepends=True); n += k
            if n and not a.check: p.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')
        else:
            src = p.read_text(); new, n = fix_cell(src)
            if n and not a.check: p.write_text(new)
        if n: print(f'{p}: {n} semicolons')
        total += n
    print(f'{total} semicolons {"found" if a.check else "removed"}')

if __name__ == '__main__': main()
