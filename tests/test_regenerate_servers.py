"""Regeneration against several OpenAI-compatible servers (issue 23): requests spread over the servers, a server
that dies mid-run taken out of rotation and its requests retried on another, a restarted server taken back, a run
against servers that all die ending with every row accounted for, and a killed client resuming. The servers are
standard-library stubs on loopback (each answers with the last user message reversed and its own name, after a
small delay), so the tests need no model."""
import json, os, shutil, signal, subprocess, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
import pytest

from dflash_nb.core import iter_jsonl
from dflash_nb.backends import BackendOptions, GenConfig, HTTPBackend, make_backend
from dflash_nb.regenerate import RegenOptions, regenerate_file


class Stub:
    "An OpenAI-compatible stub server; `die_after=N` makes it crash after N answers (no reply to anything after)."
    def __init__(self, name, delay=0.02, die_after=None, port=0):
        self.name, self.delay, self.die_after, self.answered, self.dead = name, delay, die_after, [], False
        self.lock, stub = threading.Lock(), self
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a): pass
            def _send(self, obj):
                data = json.dumps(obj).encode()
                self.send_response(200); self.send_header('Content-Length', str(len(data))); self.end_headers()
                self.wfile.write(data)
            def do_GET(self):
                if stub.dead: self.close_connection = True; return
                self._send({'data': [{'id': 'stub-model'}]})
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
                time.sleep(stub.delay)
                with stub.lock:
                    if stub.dead: self.close_connection = True; return    # crashed: the connection drops, no answer
                    stub.answered.append(body['messages'][-1]['content'])
                    if stub.die_after is not None and len(stub.answered) >= stub.die_after: stub.kill(wait=False)
                text = f"{stub.name}: {body['messages'][-1]['content'][::-1]}"
                self._send({'choices': [{'message': {'role': 'assistant', 'content': text}, 'finish_reason': 'stop'}],
                            'usage': {'completion_tokens': 3}})
        self.httpd = ThreadingHTTPServer(('127.0.0.1', port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_port
        self.url = f'http://127.0.0.1:{self.port}/v1'
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def kill(self, wait=True):
        "Crash: stop listening (new connections are refused) and drop every request still in flight."
        self.dead = True
        t = threading.Thread(target=lambda: (self.httpd.shutdown(), self.httpd.server_close()), daemon=True)
        t.start()
        if wait: t.join()


def rows(n):
    return [{'id': f'r{i}', 'source': 's', 'messages': [{'role': 'user', 'content': f'question {i}'}]} for i in range(n)]

def write(path, rs):
    path.write_text(''.join(json.dumps(r) + '\n' for r in rs)); return path

def answer(row): return row['messages'][-1]['content']


def test_server_dies_mid_run(tmp_path):
    "One of two servers crashes after 10 answers: every row is regenerated exactly once, in order, by someone."
    a, b = Stub('A', die_after=10), Stub('B')
    be = make_backend(BackendOptions(backend='http', endpoint=[a.url, b.url], concurrency=2, timeout_s=10, max_retries=3))
    inp = write(tmp_path / 'in.jsonl', rows(40))
    s = regenerate_file(inp, tmp_path / 'out.jsonl', be, GenConfig(max_new_tokens=8), RegenOptions(mode='final', select='all', chunk_size=8), progress=False)
    b.kill()
    out = list(iter_jsonl(tmp_path / 'out.jsonl'))
    assert (s['rows_in'], s['rows_out'], s['failed']) == (40, 40, 0)
    assert [r['id'] for r in out] == [f'r{i}' for i in range(40)]
    for i, r in enumerate(out):
        who, text = answer(r).split(': ')
        assert text == f'question {i}'[::-1] and who in 'AB'
    by = {w: sum(answer(r).startswith(w + ':') for r in out) for w in 'AB'}
    assert by == {'A': 10, 'B': 30} and len(a.answered) == 10     # A's answers until it died, B's for the rest
    stats = {st['endpoint']: st for st in s['servers']}
    assert stats[a.url]['taken_out'] >= 1 and stats[a.url]['failed'] >= 1 and stats[b.url]['failed'] == 0
    assert s['endpoint'] == [a.url, b.url] and s['model'] == 'stub-model'


def test_restarted_server_returns(tmp_path):
    "A server that crashes and comes back on the same port gets requests again after its time out of rotation."
    a, b = Stub('A', delay=0.05, die_after=3), Stub('B', delay=0.05)
    be = HTTPBackend([a.url, b.url], concurrency=2, timeout_s=10, max_retries=3, backoff_s=0.2)
    port, again = a.port, {}
    def restart():
        while not a.dead: time.sleep(0.01)
        time.sleep(0.3); again['A'] = Stub('A2', delay=0.05, port=port)
    threading.Thread(target=restart, daemon=True).start()
    inp = write(tmp_path / 'in.jsonl', rows(80))
    s = regenerate_file(inp, tmp_path / 'out.jsonl', be, GenConfig(max_new_tokens=8), RegenOptions(mode='final', select='all', chunk_size=80), progress=False)
    assert (s['rows_out'], s['failed']) == (80, 0)
    assert len(again['A'].answered) > 0                       # back in rotation
    stat = next(st for st in s['servers'] if st['endpoint'] == a.url)
    assert stat['taken_out'] >= 1 and stat['ok'] >= 3 + len(again['A'].answered) - 1
    again['A'].kill(); b.kill()


def test_all_servers_die(tmp_path):
    "Both servers crash: the run still ends; each row is either regenerated or in the failures file, never both."
    a, b = Stub('A', die_after=4), Stub('B', die_after=8)
    be = HTTPBackend([a.url, b.url], model='stub-model', concurrency=2, timeout_s=5, max_retries=2, backoff_s=0.02)
    inp = write(tmp_path / 'in.jsonl', rows(30))
    s = regenerate_file(inp, tmp_path / 'out.jsonl', be, GenConfig(max_new_tokens=8), RegenOptions(mode='final', select='all', chunk_size=10), progress=False)
    out = [r['id'] for r in iter_jsonl(tmp_path / 'out.jsonl')]
    fails = list(iter_jsonl(tmp_path / 'out.failures.jsonl'))
    assert s['rows_in'] == len(out) + len(fails) == 30 and not set(out) & {f['id'] for f in fails}
    assert sorted(out + [f['id'] for f in fails], key=lambda x: int(x[1:])) == [f'r{i}' for i in range(30)]
    assert len(out) <= 12 and fails and all(f['reason'].startswith('http: ') and 'attempts' in f['reason'] for f in fails)
    assert s['failure_reasons'] == {'http': len(fails)}


def test_killed_client_resumes(tmp_path):
    "`dflash-nb regenerate --endpoint A B` killed after two parts: the rerun finishes them all, nothing twice."
    a, b = Stub('A', delay=0.2), Stub('B', delay=0.2)
    inp = write(tmp_path / 'in.jsonl', rows(24))
    out, parts = tmp_path / 'out.jsonl', tmp_path / '.out.jsonl.parts'
    exe = shutil.which('dflash-nb') or str(Path(sys.executable).parent / 'dflash-nb')
    cmd = [exe, 'regenerate', '--input', inp, '--output', out, '--endpoint', a.url, b.url, '--concurrency', '1',
           '--chunk-size', '2', '--max-new-tokens', '8', '--quiet']
    p = subprocess.Popen(list(map(str, cmd)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t = time.time()
    while len(list(parts.glob('part-*.jsonl'))) < 2:
        assert p.poll() is None, 'the run ended before it could be killed'
        assert time.time() - t < 240, 'no part written in time'
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL); p.wait()
    done = len(list(parts.glob('part-*.jsonl')))
    assert not out.exists() and 2 <= done < 12
    r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout[r.stdout.index('{'):])
    assert (s['chunks_resumed'], s['chunks_run'], s['rows_out']) == (done, 12 - done, 24)
    assert [x['id'] for x in iter_jsonl(out)] == [f'r{i}' for i in range(24)]
    assert not parts.exists()
    a.kill(); b.kill()
