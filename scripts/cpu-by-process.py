#!/usr/bin/env python3
"""Where a `compare` run's CPU goes, by process: Chromium's by process type (browser,
renderer, gpu-process, utility/NetworkService, zygote) and the `compare` process's own (the
in-process server and the clients, or chromiumoxide's clients for the direct systems).

    scripts/cpu-by-process.py COMPARE_BINARY SESSIONS SYSTEM

runs `COMPARE_BINARY SESSIONS <tmp>.json SYSTEM` (build it with `cargo build --release -p
browserpool-server --example compare`) and reads every process's utime and stime in /proc
every 50 ms, adding what each live process used since the last read. The last 50 ms of a
process that exits are missed, and the reads cost some CPU of their own: compare systems with
each other through this script, not with `compare`'s own figures. Linux only.
"""
import collections
import os
import re
import subprocess
import sys
import tempfile
import time

TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def kind(pid):
    """The process type of a Chromium or compare process, else None."""
    try:
        comm = open(f"/proc/{pid}/comm").read().strip()
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return None
    if comm.startswith("compare"):
        return "compare (server and clients)"
    if "chrom" not in comm and "chromium" not in cmd:
        return None
    t = re.search(r"--type=([\w-]+)", cmd)
    sub = re.search(r"--utility-sub-type=([\w.]+)", cmd)
    return (t.group(1) if t else "browser") + ("/" + sub.group(1).split(".")[-1] if sub else "")


def ticks(pid):
    """utime + stime of a process, in clock ticks."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    binary, sessions, system = sys.argv[1:]
    out = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    run = subprocess.Popen([binary, sessions, out, system], stdout=subprocess.DEVNULL)
    seen = {}  # pid -> (kind, ticks at the last read)
    used = collections.Counter()
    while run.poll() is None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            if pid not in seen:
                k = kind(pid)
                if k is None:
                    continue
                seen[pid] = (k, 0)
            k, last = seen[pid]
            now = ticks(pid)
            if now is not None and now >= last:
                used[k] += now - last
                seen[pid] = (k, now)
        time.sleep(0.05)
    os.unlink(out)
    if run.returncode != 0:
        sys.exit(f"compare exited {run.returncode}")
    total = sum(used.values())
    parts = ", ".join(f"{k} {v * TICK_MS:.0f}" for k, v in used.most_common())
    print(f"{system}: {total * TICK_MS:.0f} ms of CPU in all: {parts}")


if __name__ == "__main__":
    main()
