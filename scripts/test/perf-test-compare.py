#!/usr/bin/env python3
"""Compares runs of `perf test` (make perf-test-full).

    perf-test-compare.py LOG...

Each LOG holds runs that scripts/test/perf-test-full-guest framed with
"@@ NAME" and "@@ NAME exit N seconds S"; NAME is PERF@KERNEL.  Prints the
totals of each run, then every test whose result differs between runs, and
exits 1 if on some kernel a test's result differs between the series' perf
("series@K") and the unpatched one ("unpatched@K"), other than the series'
own tests (MMAP3 in the name), or if those are not all Ok with the series'
perf on the patched kernel, or FAILED on the stock one.  A run that is
missing, did not finish, exited non-zero or has no results is a failure too.
"""
import re
import sys

RESULT = re.compile(r'^\s*(\d+)(?:\.(\d+))?:\s+(.*?)\s*:\s*(Ok|FAILED!|Skip\b.*)\s*$')
PARENT = re.compile(r'^\s*(\d+):\s+(.*?)\s*:\s*$')
START = re.compile(r'^@@ (\S+)$')
END = re.compile(r'^@@ (\S+) exit (\d+) seconds (\d+)$')
OWN = 'MMAP3'
RUNS = ['series@patched', 'unpatched@patched', 'series@stock',
        'unpatched@stock', 'debian@stock']


def short(result):
    if result == 'Ok':
        return 'Ok'
    if result.startswith('FAILED'):
        return 'FAILED'
    return 'Skip'


def parse(paths):
    """{run: {'tests': {name: result}, 'exit': int|None, 'seconds': int}}"""
    runs = {}
    for path in paths:
        cur = None
        parent = ''
        with open(path, errors='replace') as f:
            for line in f:
                line = line.rstrip('\n').replace('\r', '')
                m = END.match(line)
                if m:
                    if m.group(1) in runs:
                        runs[m.group(1)]['exit'] = int(m.group(2))
                        runs[m.group(1)]['seconds'] = int(m.group(3))
                    cur = None
                    continue
                m = START.match(line)
                if m:
                    cur = runs.setdefault(m.group(1), {'tests': {}, 'exit': None,
                                                       'seconds': 0})
                    parent = ''
                    continue
                if cur is None:
                    continue
                m = RESULT.match(line)
                if m:
                    name = m.group(3)
                    if m.group(2) is None:
                        parent = ''
                    elif parent:
                        name = parent + ': ' + name
                    cur['tests'][name] = short(m.group(4))
                    continue
                m = PARENT.match(line)
                if m:
                    parent = m.group(2)
    return runs


def main(argv):
    runs = parse(argv[1:])
    problems = []
    for name in RUNS:
        run = runs.get(name)
        if run is None:
            problems.append('%s: no run' % name)
        elif run['exit'] is None:
            problems.append('%s: did not finish' % name)
        elif run['exit'] != 0:
            # perf test exits 0 when tests fail; anything else is a crash,
            # a timeout (124) or a kill
            problems.append('%s: perf test exited with %d' % (name, run['exit']))
        elif not run['tests']:
            problems.append('%s: no results' % name)

    present = [r for r in RUNS if r in runs]
    print('%-18s %5s %7s %5s %7s' % ('run', 'Ok', 'FAILED', 'Skip', 'seconds'))
    for name in present:
        vals = list(runs[name]['tests'].values())
        print('%-18s %5d %7d %5d %7d' % (name, vals.count('Ok'), vals.count('FAILED'),
                                         vals.count('Skip'), runs[name]['seconds']))

    names = []
    for name in present:
        for t in runs[name]['tests']:
            if t not in names:
                names.append(t)
    # Debian's perf is built with more (python, DWARF, BPF, ...): its column
    # is shown beside the others, but tests differ by it alone are only counted.
    core = [r for r in present if not r.startswith('debian@')]
    differ = [t for t in names
              if len({runs[r]['tests'].get(t, '-') for r in core}) > 1]
    if differ:
        print()
        print('Tests whose results differ between the builds of the tree ("-": not in that run):')
        print('%-60s %s' % ('test', ' '.join('%-17s' % r for r in present)))
        for t in differ:
            print('%-60s %s' % (t[:60], ' '.join('%-17s' % runs[r]['tests'].get(t, '-')
                                                  for r in present)))
    deb, ref = runs.get('debian@stock'), runs.get('unpatched@stock')
    if deb and ref:
        other = [t for t in names if deb['tests'].get(t, '-') != ref['tests'].get(t, '-')]
        print()
        print("Debian's perf on the stock kernel differs from the unpatched build on %d "
              "tests (its build has what make perf leaves out)" % len(other))

    for kernel in ('patched', 'stock'):
        a, b = runs.get('series@' + kernel), runs.get('unpatched@' + kernel)
        if not a or not b:
            continue
        for t in names:
            if OWN in t:
                continue
            ra, rb = a['tests'].get(t, '-'), b['tests'].get(t, '-')
            if ra != rb:
                problems.append('on the %s kernel, "%s" is %s with the series\' perf and '
                                '%s with the unpatched one' % (kernel, t, ra, rb))
    own = runs.get('series@patched')
    if own:
        mine = {t: r for t, r in own['tests'].items() if OWN in t}
        if len(mine) < 2:
            problems.append('the series\' own tests did not run (%d found)' % len(mine))
        for t, r in mine.items():
            if r != 'Ok':
                problems.append('"%s" is %s on the patched kernel' % (t, r))
        print()
        print('The series\' own tests with its perf on the patched kernel: ' +
              ', '.join('%s: %s' % kv for kv in sorted(mine.items())))
    # On a kernel without MMAP3 they may skip, never fail
    stock = runs.get('series@stock')
    if stock:
        for t, r in stock['tests'].items():
            if OWN in t and r == 'FAILED':
                problems.append('"%s" is FAILED on the stock kernel' % t)

    print()
    if problems:
        for p in problems:
            print('perf-test-full: FAIL: ' + p)
        return 1
    print('perf-test-full: ok: on each kernel every test gives the series\' perf the '
          'result it gives the unpatched perf, and the series\' own tests pass')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
