#!/usr/bin/env python3
"""Holds one program's open of a file until another process has done a step.

    hold_open.py FILE PROGRAM PID STEP_FILE

Puts a fanotify permission mark (FAN_OPEN_PERM) on FILE and prints "armed".
Opens by anyone else are allowed at once.  The first open by a process
running PROGRAM (its /proc/PID/exe) is held: PID gets SIGUSR1, and the open
is allowed once STEP_FILE contains a line "remapped" (tests/e2e/remap.c).
Prints "released" and exits 0 then.  Every wait is bounded: after 120 s
everything is allowed and it exits 1.  Needs CAP_SYS_ADMIN and a kernel with
CONFIG_FANOTIFY_ACCESS_PERMISSIONS; exits 77 without them.
"""
import ctypes
import os
import select
import signal
import struct
import sys
import time

FAN_CLOEXEC, FAN_CLASS_CONTENT = 0x1, 0x4
FAN_MARK_ADD, FAN_OPEN_PERM, FAN_ALLOW = 0x1, 0x10000, 0x1
AT_FDCWD = -100
METADATA = struct.Struct("=IBBHQii")  # struct fanotify_event_metadata

path, program, pid, step = sys.argv[1], os.path.realpath(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
libc = ctypes.CDLL(None, use_errno=True)
libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int,
                               ctypes.c_char_p]
fan = libc.fanotify_init(FAN_CLOEXEC | FAN_CLASS_CONTENT, os.O_RDONLY | os.O_CLOEXEC)
if fan < 0 or libc.fanotify_mark(fan, FAN_MARK_ADD, FAN_OPEN_PERM, AT_FDCWD, path.encode()) != 0:
    print("fanotify permission events unavailable: " + os.strerror(ctypes.get_errno()))
    sys.exit(77)
print("armed", flush=True)

deadline = time.monotonic() + 120


def allow(fd):
    os.write(fan, struct.pack("=iI", fd, FAN_ALLOW))
    os.close(fd)


def exe_of(p):
    try:
        return os.path.realpath("/proc/%d/exe" % p)
    except OSError:
        return ""


while time.monotonic() < deadline:
    if not select.select([fan], [], [], 1)[0]:
        continue
    buf = os.read(fan, 4096)
    held = None
    while len(buf) >= METADATA.size:
        event_len, _, _, _, mask, fd, opener = METADATA.unpack_from(buf)
        buf = buf[event_len:]
        if held is None and exe_of(opener) == program:
            held = fd
        else:
            allow(fd)
    if held is None:
        continue
    os.kill(pid, signal.SIGUSR1)
    while time.monotonic() < deadline:
        try:
            if "remapped" in open(step).read().split():
                break
        except OSError:
            pass
        time.sleep(0.01)
    allow(held)
    if time.monotonic() >= deadline:
        break
    print("released", flush=True)
    sys.exit(0)
print("nothing held within 120 s (or the step never came)")
sys.exit(1)
