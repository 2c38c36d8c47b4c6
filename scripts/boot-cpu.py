#!/usr/bin/env python3
"""How much CPU a bare Chromium boot takes, with and without some flags: the cost every
`process` isolation session pays on top of its page (see the README's Benchmark section).

    sudo scripts/boot-cpu.py [SETS] [ROUNDS]

boots the headless shell ROUNDS times (5) for each flag set in SETS (comma-separated, all by
default), alternating, with the workers' own flags (`pool/src/launcher/chrome.rs`), as an
unprivileged uid of its own with its sandbox, on `about:blank`, in a cgroup of its own; once
DevTools answers it waits 1 s and reads the cgroup's CPU time (every process of the boot, the
ones that exited included), then kills the group. Prints each set's median, minimum and maximum
CPU in ms and the median time to DevTools. Root only (cgroups, the uid); cgroup v2, or v1 with
`cpuacct`.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

CHROME = "/usr/lib/chromium/chromium-headless-shell"
UID = 40000
CHROME_RS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pool", "src", "launcher", "chrome.rs")


def workers_flags(path=CHROME_RS):
    """The workers' flags and disabled features as `chrome.rs` has them (`CHROME_FLAGS`, the
    `disabled_features!` literal), read from the source so this script never runs others."""
    src = open(path).read()
    features = re.search(r"macro_rules! disabled_features \{\s*\(\) => \{\s*\"([^\"]+)\"", src)
    array = re.search(r"pub const CHROME_FLAGS: &\[&str\] = &\[(.*?)\];", src, re.S)
    if not features or not array:
        sys.exit(f"{path}: CHROME_FLAGS or disabled_features! not found; update workers_flags()")
    body = "\n".join(line.split("//")[0] for line in array.group(1).splitlines())
    flags = [f for f in re.findall(r'"([^"]*)"', body) if f != "--disable-features="]
    return flags, features.group(1)


FLAGS, FEATURES = workers_flags()
# name: (extra flags, extra disabled features, extra enabled features)
SETS = {
    "workers": ([], "", ""),
    "in-process-gpu": (["--in-process-gpu"], "", ""),
    "no-crash-reporter": (["--disable-breakpad", "--disable-crash-reporter"], "", ""),
    "network-in-process": ([], "", "NetworkServiceInProcess"),
    "fewer-components": (["--disable-extensions", "--disable-component-extensions-with-background-pages",
                          "--disable-default-apps", "--mute-audio"],
                         "Translate,OptimizationHints,MediaRouter,AutofillServerCommunication", ""),
}


def cgroup(name):
    """A fresh cgroup: its directory and a function reading its CPU time in ms."""
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        d = f"/sys/fs/cgroup/{name}"
        os.makedirs(d, exist_ok=True)
        usage = lambda: next(int(l.split()[1]) for l in open(f"{d}/cpu.stat") if l.startswith("usage_usec")) / 1e3
    else:
        d = f"/sys/fs/cgroup/cpuacct/{name}"
        os.makedirs(d, exist_ok=True)
        usage = lambda: int(open(f"{d}/cpuacct.usage").read()) / 1e6
    return d, usage


def boot(flags, disabled, enabled, n):
    d, usage = cgroup(f"boot-cpu-{os.getpid()}-{n}")
    home = tempfile.mkdtemp(prefix="boot-cpu-")
    os.chown(home, UID, UID)
    args = [CHROME] + FLAGS + flags + ["--disable-features=" + FEATURES + ("," + disabled if disabled else "")]
    if enabled:
        args.append("--enable-features=" + enabled)
    args += [f"--user-data-dir={home}/chrome", "--remote-debugging-port=0", "about:blank"]
    started = time.monotonic()
    join = f'echo $$ > {d}/cgroup.procs && exec setpriv --reuid {UID} --regid {UID} --clear-groups "$@"'
    p = subprocess.Popen(["sh", "-c", join, "sh"] + args, stderr=subprocess.PIPE,
                         env={"HOME": home, "TMPDIR": home, "PATH": "/usr/bin:/bin"}, start_new_session=True)
    ready = None
    for line in p.stderr:
        if b"DevTools listening" in line:
            ready = (time.monotonic() - started) * 1000
            break
    time.sleep(1.0)
    cpu = usage()
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it did not start (said below)
    p.wait()
    for _ in range(100):
        if not open(f"{d}/cgroup.procs").read().strip():
            break
        time.sleep(0.05)
    os.rmdir(d)
    shutil.rmtree(home, ignore_errors=True)
    if ready is None:
        sys.exit(f"Chromium did not start with {args}")
    return cpu, ready


def main():
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else list(SETS)
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    unknown = [n for n in names if n not in SETS]
    if unknown:
        sys.exit(f"no flag set {unknown}; the sets: {', '.join(SETS)}")
    results = {n: [] for n in names}
    for r in range(rounds):
        for n in names:
            results[n].append(boot(*SETS[n], f"{r}-{n}"))
    for n in names:
        cpu = sorted(c for c, _ in results[n])
        ready = sorted(t for _, t in results[n])
        print(f"{n:20} cpu ms median {cpu[len(cpu) // 2]:.0f} min {cpu[0]:.0f} max {cpu[-1]:.0f}"
              f"   to DevTools median {ready[len(ready) // 2]:.0f} ms")


if __name__ == "__main__":
    main()
