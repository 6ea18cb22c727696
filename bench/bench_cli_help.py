"""How long `dflash-nb --help` (and a few sub-commands' help) takes: the console script in a fresh process each time.

Measures wall seconds and CPU seconds (user + system of the child, from `resource.getrusage`), so a figure taken on a
loaded machine still says what the command itself cost. Prints a table; writes bench/results/cli_help.json.

    python bench/bench_cli_help.py [--repeat 5]
"""
import argparse, json, os, resource, shutil, statistics, subprocess, sys, time
from pathlib import Path

COMMANDS = [['--help'], ['run', '--help'], ['plan', '--help'], ['train', '--help'], ['evaluate', '--help']]

def measure(exe: str, args: list, repeat: int) -> dict:
    "Median and spread of wall and CPU seconds over `repeat` fresh processes."
    wall, cpu = [], []
    for _ in range(repeat):
        r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
        subprocess.run([exe, *args], capture_output=True, check=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall.append(time.time() - t0); cpu.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    return {'wall_median_s': round(statistics.median(wall), 3), 'wall_min_s': round(min(wall), 3),
            'wall_max_s': round(max(wall), 3), 'cpu_median_s': round(statistics.median(cpu), 3)}

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--repeat', type=int, default=5, help='fresh processes per command')
    a = ap.parse_args()
    exe = shutil.which('dflash-nb') or str(Path(sys.executable).parent / 'dflash-nb')
    rows = {' '.join(c): measure(exe, c, a.repeat) for c in COMMANDS}
    print(f"{'command':<22} {'wall median':>12} {'wall min':>9} {'wall max':>9} {'CPU median':>11}")
    for k, v in rows.items():
        print(f"{k:<22} {v['wall_median_s']:>11.2f}s {v['wall_min_s']:>8.2f}s {v['wall_max_s']:>8.2f}s "
              f"{v['cpu_median_s']:>10.2f}s")
    load = os.getloadavg()[0] if hasattr(os, 'getloadavg') else None
    print(f'load average (1 min) while measuring: {load}; cores: {os.cpu_count()}')
    out = Path(__file__).resolve().parent / 'results' / 'cli_help.json'
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({'repeat': a.repeat, 'load_avg_1min': load, 'cpus': os.cpu_count(),
                               'commands': rows}, indent=1) + '\n')
    print(f'wrote {out}')

if __name__ == '__main__':
    main()
