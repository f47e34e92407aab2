#!/usr/bin/env python3
"""Compares mmap3-reader's report, script and buildid-list with Debian's
perf 6.1 on the same perf-recorded file (tests/e2e_host.sh).

  perf_compare.py report OURS.json PERF.txt KEYS [children]
      OURS.json: report --format json --sort KEYS; PERF.txt: perf report
      --stdio -n -g none --sort KEYS' (perf's names: our tid is perf's pid).
      Every row both name a symbol for must have the same samples and the
      same percentages (Children and Self with `children`); the rows neither
      names a symbol for are compared in total; the shown samples too.
  perf_compare.py script OURS.txt PERF.txt
      OURS.txt: script; PERF.txt: perf script -F tid,time,ip,sym,symoff,dso -G.
      Same samples in the same order with the same tid, time and ip; the
      same symbol+offset and dso wherever perf names a symbol.
  perf_compare.py script-g OURS.txt PERF.txt DSO_SUFFIX...
      The same with -g (perf script -F tid,time,ip,sym,symoff,dso): the same
      number of frames per sample, and the same symbols for frames in the
      DSOs named (perf prints those frames' ips relative to their mapping).
  perf_compare.py buildid OURS.txt PERF.txt
      Every "id path" line of perf buildid-list is one of ours.
Exits 1 with what differed."""
import glob
import json
import os
import re
import subprocess
import sys


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def unresolved(sym):
    return sym.startswith("[") or re.match(r"^(0x)?[0-9a-f]+$", sym) is not None


_aliases = {}


def files_of(path, build_id):
    """The ELF files that may hold the symbols of `path` with `build_id`:
    itself, its debug file, and its copies in the build-id cache
    ($BUILDID_DIR, perf's layout)."""
    files = [path] if path.startswith("/") else []
    if build_id:
        files.append("/usr/lib/debug/.build-id/%s/%s.debug" % (build_id[:2], build_id[2:]))
        files += glob.glob(os.path.join(os.environ.get("BUILDID_DIR", "/nonexistent"), ".build-id",
                                        build_id[:2], build_id[2:], "*"))
    return tuple(f for f in files if os.path.isfile(f))


def address_of(files, name):
    """The address of symbol `name` (perf may add @@VERSION) in `files`
    (from nm: static and dynamic tables), or None: names at one address are
    aliases, which perf and we may pick differently.  A PLT stub "f@plt" is
    not f: it has no address here and is compared by name."""
    if name.endswith("@plt"):
        return None
    if files not in _aliases:
        table = {}
        for path, flags in [(p, f) for p in files for f in ([], ["-D"])]:
            try:
                out = subprocess.run(["nm", "--defined-only"] + flags + [path], capture_output=True,
                                     text=True).stdout
            except OSError:
                out = ""
            for line in out.splitlines():
                f = line.split()
                if len(f) == 3:
                    table.setdefault(f[2].split("@")[0], int(f[0], 16))
        _aliases[files] = table
    return _aliases[files].get(name.split("@")[0])


def same_symbol(files, a, b):
    if a == b:
        return True
    x = address_of(files, a)
    return x is not None and x == address_of(files, b)


def add_row(rows, k, samples, pct):
    """Rows whose keys are one key (addresses without a symbol, all
    "[unknown]": perf has a row per address) add up; their percentages,
    which only rows with a symbol are compared by, are the first row's."""
    if k in rows:
        samples += rows[k][0]
        pct = rows[k][1]
    rows[k] = (samples, pct)


def report(ours_path, perf_path, keys, children):
    keys = keys.split(",")
    d = json.load(open(ours_path))
    files = {os.path.basename(m["path"]): files_of(m["path"], m["build_id"])
             for m in d["capture"]["mappings"]}

    def canon(dso, sym):
        addr = address_of(files[dso], sym) if dso in files and sym != "[unknown]" else None
        return sym if addr is None else "%s@%#x" % (dso, addr)

    ours = {}
    for r in d["rows"]:
        k = []
        for key in keys:
            if key == "comm":
                k.append(r["comm"])
            elif key == "tid":
                k.append(str(r["tid"]))
            elif key == "dso":
                k.append(os.path.basename(r["path"]))
            elif key == "sym":
                k.append(r["symbol"] if r["symbol_status"] == "found" else "[unknown]")
        if "dso" in keys and "sym" in keys:
            k[keys.index("sym")] = canon(k[keys.index("dso")], k[keys.index("sym")])
        pct = ("%.2f" % r["children_percent"] if children else "", "%.2f" % r["percent"])
        add_row(ours, tuple(k), r["samples"], pct)
    theirs = {}
    npct = 2 if children else 1
    for line in open(perf_path):
        if line.startswith("#") or not line.strip():
            continue
        tok = line.split()
        if not tok[0].endswith("%"):
            continue
        pcts = [t.rstrip("%") for t in tok[:npct]]
        samples = int(tok[npct])
        rest = tok[npct + 1:]
        k = []
        for key in keys:
            if key == "comm":
                k.append(rest.pop(0))
            elif key == "tid":  # perf's pid key: "tid:comm"
                k.append(rest.pop(0).split(":")[0])
            elif key == "dso":
                k.append(rest.pop(0))
            elif key == "sym":
                rest.pop(0)  # [.] or [k]
                sym = " ".join(rest)
                rest = []
                k.append("[unknown]" if unresolved(sym) or re.match(r"^0x[0-9a-f]+$", sym) else sym)
        if "dso" in keys and "sym" in keys:
            k[keys.index("sym")] = canon(k[keys.index("dso")], k[keys.index("sym")])
        pct = (pcts[0] if children else "", pcts[-1])
        add_row(theirs, tuple(k), samples, pct)
    if not theirs:
        fail("perf report showed no rows")
    sym_i = keys.index("sym") if "sym" in keys else None
    compared = 0
    unnamed_by_us = {}
    for k, (samples, pct) in sorted(theirs.items()):
        if sym_i is not None and k[sym_i] == "[unknown]":
            continue
        if k not in ours:
            # perf named it, we did not (a file we found no copy of, as
            # perf's [vdso] in its own cache): it must be one of our rows
            # without a symbol.
            k_unknown = k[:sym_i] + ("[unknown]",) + k[sym_i + 1:] if sym_i is not None else None
            if k_unknown in ours:
                print("NOTE: perf names %s (%d samples); we do not" % (k, samples))
                unnamed_by_us[k_unknown] = unnamed_by_us.get(k_unknown, 0) + samples
                continue
            fail("perf's row %s (%d samples, %s) is not ours" % (k, samples, pct))
        if ours[k] != (samples, pct):
            fail("row %s: ours %s, perf's %s" % (k, ours[k], (samples, pct)))
        compared += 1
    for k, v in sorted(ours.items()):
        if (sym_i is None or k[sym_i] != "[unknown]") and k not in theirs and v[0] > 0:
            # A known difference: perf 6.1 names the stubs of .plt only, by
            # position; we name those of .plt.got and .plt.sec too, from
            # the jump's GOT slot.  perf must have no symbol there.
            # Not when perf names a stub there that we do not: two names
            # for one stub would pass as two notes.
            k_unknown = k[:sym_i] + ("[unknown]",) + k[sym_i + 1:] if sym_i is not None else None
            rest = lambda key: key[:sym_i] + key[sym_i + 1:]
            if (sym_i is not None and k[sym_i].endswith("@plt") and k_unknown in theirs and
                    not any(t[sym_i].endswith("@plt") and t not in ours and rest(t) == rest(k)
                            for t in theirs)):
                print("NOTE: we name the PLT stub %s (%d samples); perf does not" % (k, v[0]))
                continue
            fail("our row %s %s is not perf's" % (k, v))
    total = lambda rows: sum(s for s, _ in rows.values())
    if total(ours) != total(theirs):
        fail("samples shown: ours %d, perf's %d" % (total(ours), total(theirs)))
    print("NOTE: %d rows the same as perf's, %d samples" % (compared, total(ours)))


SCRIPT_OURS = re.compile(
    r"^\s*(?P<comm>.+?)\s+(?P<pid>\d+)/(?P<tid>\d+)\s+(\[\d+\]\s+)?(?P<time>\d+\.\d+):\s+\d+"
    r"(\s+(?P<event>[a-z][a-z0-9-]*):)?"
    r"(\s+(?P<ip>[0-9a-f]+) (?P<sym>.*?) \((?P<dso>[^()]*)\) ((?P<bid>[0-9a-f]*)\S*|\[no build-id\]))?$")
SCRIPT_PERF = re.compile(
    r"^\s*(?P<tid>\d+)\s+(?P<time>\d+\.\d+):\s*(\s+(?P<ip>[0-9a-f]+) (?P<sym>.*) \((?P<dso>[^()]*)\))?$")
FRAME = re.compile(r"^\t\s*(?P<ip>[0-9a-f]+) (?P<sym>.*?) \((?P<dso>[^()]*)\)"
                   r"( (?P<bid>[0-9a-f]*)\S*| \[no build-id\])?$")


def script(ours_path, perf_path):
    ours = [SCRIPT_OURS.match(l.rstrip("\n")) for l in open(ours_path)]
    theirs = [SCRIPT_PERF.match(l.rstrip("\n")) for l in open(perf_path)]
    if None in ours or None in theirs:
        fail("unparsed line: %s" % ((open(ours_path).readlines() + [""])[ours.index(None)] if None in ours
                                    else open(perf_path).readlines()[theirs.index(None)]))
    if len(ours) != len(theirs):
        fail("samples: ours %d, perf's %d" % (len(ours), len(theirs)))
    named = 0
    for i, (o, t) in enumerate(zip(ours, theirs)):
        if o["tid"] != t["tid"] or o["time"] != t["time"] or int(o["ip"], 16) != int(t["ip"], 16):
            fail("sample %d: ours %s, perf's %s" % (i, o.group(0), t.group(0)))
        if unresolved(t["sym"]):
            if "@plt+" in o["sym"]:
                print("NOTE: sample %d is on our PLT stub %s; perf names none" % (i, o["sym"]))
            continue
        if "@plt+" in t["sym"] and unresolved(o["sym"]):
            # perf 6.1 names an IBT file's lazy-binding stubs by position;
            # they are not the stub a call enters, which we name.
            print("NOTE: known difference: sample %d is on perf's PLT stub %s, ours has no symbol" %
                  (i, t["sym"]))
            continue
        osym, _, ooff = o["sym"].rpartition("+")
        tsym, _, toff = t["sym"].rpartition("+")
        if (not same_symbol(files_of(o["dso"], o["bid"]), osym, tsym) or ooff != toff or
                os.path.basename(o["dso"]) != os.path.basename(t["dso"])):
            fail("sample %d: ours %s, perf's %s" % (i, o.group(0), t.group(0)))
        named += 1
    print("NOTE: %d samples in the same order, %d with perf's symbol+offset" % (len(ours), named))


def samples_with_frames(path, head):
    out = []
    for line in open(path):
        line = line.rstrip("\n")
        if not line:
            continue
        if line.startswith("\t"):
            m = FRAME.match(line)
            if not m:
                fail("unparsed frame: %r" % line)
            out[-1][1].append(m)
        else:
            m = head.match(line)
            if not m:
                fail("unparsed line: %r" % line)
            out.append((m, []))
    return out


def script_g(ours_path, perf_path, dsos):
    ours = samples_with_frames(ours_path, SCRIPT_OURS)
    theirs = samples_with_frames(perf_path, SCRIPT_PERF)
    if len(ours) != len(theirs):
        fail("samples: ours %d, perf's %d" % (len(ours), len(theirs)))
    frames = 0
    for i, ((oh, of), (th, tf)) in enumerate(zip(ours, theirs)):
        if oh["tid"] != th["tid"] or oh["time"] != th["time"]:
            fail("sample %d: ours %s, perf's %s" % (i, oh.group(0), th.group(0)))
        if len(of) != len(tf):
            fail("sample %d at %s: ours %d frames, perf's %d" % (i, oh["time"], len(of), len(tf)))
        for o, t in zip(of, tf):
            if not any(t["dso"].endswith(s) for s in dsos):
                continue
            if (unresolved(t["sym"]) and "@plt+" in o["sym"] or
                    "@plt+" in t["sym"] and unresolved(o["sym"])):
                continue  # the PLT differences of script, above
            osym, _, ooff = o["sym"].rpartition("+")
            tsym, _, toff = t["sym"].rpartition("+")
            if (not same_symbol(files_of(o["dso"], o["bid"]), osym, tsym) or ooff != toff or
                    o["dso"] != t["dso"]):
                fail("sample %d at %s: frame ours %s, perf's %s" % (i, oh["time"], o.group(0), t.group(0)))
            frames += 1
    print("NOTE: %d samples with as many frames as perf's; %d frames in %s the same" % (
        len(ours), frames, " ".join(dsos)))


def buildid(ours_path, perf_path):
    ours = set()
    for line in open(ours_path):
        f = line.split()
        ours.add((f[0], f[1]))
    n = 0
    for line in open(perf_path):
        f = line.split()
        if (f[0], f[1]) not in ours:
            fail("perf's %s %s is not ours" % (f[0], f[1]))
        n += 1
    if n == 0:
        fail("perf buildid-list printed nothing")
    print("NOTE: perf's %d lines all ours; ours %d lines" % (n, len(ours)))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "report":
        report(sys.argv[2], sys.argv[3], sys.argv[4], len(sys.argv) > 5 and sys.argv[5] == "children")
    elif cmd == "script":
        script(sys.argv[2], sys.argv[3])
    elif cmd == "script-g":
        script_g(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif cmd == "buildid":
        buildid(sys.argv[2], sys.argv[3])
    else:
        fail("unknown command " + cmd)
