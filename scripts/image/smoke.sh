# Part 3 of the image check: the built image run as the chart runs it (non-root, read-only
# root, the chart's seccomp profile): health, a session navigating a loopback page, SIGTERM,
# nothing left behind; then under RuntimeDefault's rule for namespaces, where workers must fail
# to boot, saying so. Sourced by scripts/check-image.sh after scripts/image/build.sh.

work="$(mktemp -d /tmp/browserpool-image-check.XXXXXX)"
name="browserpool-check-$$"
fixture_pid=""
cleanup() {
    podman rm -f -t 0 "$name" >/dev/null 2>&1 || true
    [ -z "$fixture_pid" ] || kill "$fixture_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    echo "---- container log ($name)" >&2
    podman logs "$name" 2>&1 | tail -80 >&2 || true
    exit 1
}

# Free loopback ports: gRPC, HTTP, and ten in a row for the workers' DevTools, away from the
# 9300-9399 the test suite's servers use on this same network namespace.
read -r grpc_port http_port cdp_first < <(python3 - <<'PY'
import random, socket
def free(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port)); return True
    except OSError:
        return False
    finally:
        s.close()
def any_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
while True:
    first = random.randrange(20000, 30000)
    if all(free(p) for p in range(first, first + 10)):
        break
print(any_port(), any_port(), first)
PY
)
[ -n "${cdp_first:-}" ] || fail "no free loopback ports found"

# The fixture page, served on loopback (the default tenant allows private networks).
mkdir -p "$work/site"
echo '<!doctype html><title>browserpool image check</title><h1>hello from loopback</h1>' >"$work/site/index.html"
python3 -u -c '
import functools, http.server, sys
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
print(server.server_address[1], flush=True)
server.serve_forever()' "$work/site" >"$work/fixture.port" 2>/dev/null &
fixture_pid=$!
for _ in $(seq 1 50); do [ -s "$work/fixture.port" ] && break; sleep 0.1; done
fixture_port="$(cat "$work/fixture.port")"
[ -n "$fixture_port" ] || fail "the fixture server did not start"

# The state volume, owned by the image's user as an emptyDir with fsGroup would be.
mkdir -m 0700 "$work/state"
chown "$UID_IN_IMAGE:$UID_IN_IMAGE" "$work/state"

# As the chart runs it: the image's non-root user, read-only root, no new privileges, every
# capability dropped but SYS_CHROOT, which stays in the bounding set only (the chart's
# `drop: [ALL], add: [SYS_CHROOT]` for a non-root container). Chromium's namespace sandbox
# chroots inside its new user namespace, which the bounding set must allow; `--cap-add` would
# also put the capability in the server's own ambient set, which Kubernetes does not.
# Writable: only the state volume and /tmp. The health check is run by hand below (podman's
# timer for it needs systemd).
all_but_chroot=AUDIT_CONTROL,AUDIT_READ,AUDIT_WRITE,BLOCK_SUSPEND,BPF,CHECKPOINT_RESTORE,CHOWN
all_but_chroot+=,DAC_OVERRIDE,DAC_READ_SEARCH,FOWNER,FSETID,IPC_LOCK,IPC_OWNER,KILL,LEASE
all_but_chroot+=,LINUX_IMMUTABLE,MAC_ADMIN,MAC_OVERRIDE,MKNOD,NET_ADMIN,NET_BIND_SERVICE
all_but_chroot+=,NET_BROADCAST,NET_RAW,PERFMON,SETFCAP,SETGID,SETPCAP,SETUID,SYS_ADMIN,SYS_BOOT
all_but_chroot+=,SYS_MODULE,SYS_NICE,SYS_PACCT,SYS_PTRACE,SYS_RAWIO,SYS_RESOURCE,SYS_TIME
all_but_chroot+=,SYS_TTY_CONFIG,SYSLOG,WAKE_ALARM
profile="$PWD/helm/browserpool/files/seccomp.json"
# run_as_chart NAME PROFILE: the container as the chart runs it, under seccomp profile PROFILE.
run_as_chart() {
    podman run -d --name "$1" --network host "${limits[@]}" --health-interval disable \
        --read-only --tmpfs /tmp:rw,nosuid,nodev,mode=1777 \
        --volume "$work/state:/var/lib/browserpool" \
        --cap-drop "$all_but_chroot" --security-opt no-new-privileges --security-opt seccomp="$2" \
        -e BROWSERPOOL_LISTEN="127.0.0.1:$grpc_port" \
        -e BROWSERPOOL_HTTP_LISTEN="127.0.0.1:$http_port" \
        -e BROWSERPOOL_PORT_RANGE="$cdp_first-$((cdp_first + 9))" \
        -e BROWSERPOOL_WARM=1 -e BROWSERPOOL_MAX_WORKERS=2 \
        "$image" >/dev/null 2>"$work/run.err" || { cat "$work/run.err" >&2; fail "podman run"; }
}
run_as_chart "$name" "$profile"
ctr_pid="$(podman inspect --format '{{.State.Pid}}' "$name")"
caps="$(awk '/^Cap(Eff|Bnd):/ { printf "%s=%s ", $1, $2 }' "/proc/$ctr_pid/status")"
[ "$caps" = "CapEff:=0000000000000000 CapBnd:=0000000000040000 " ] \
    || fail "the container's capabilities are not none effective, SYS_CHROOT bounding: $caps"
say "started $name as uid $(podman inspect --format '{{.Config.User}}' "$name"), read-only root, no capabilities (SYS_CHROOT bounding only), seccomp $profile, gRPC 127.0.0.1:$grpc_port, HTTP 127.0.0.1:$http_port"

http="http://127.0.0.1:$http_port"
for _ in $(seq 1 150); do
    curl -fsS -o /dev/null --max-time 2 "$http/healthz" 2>/dev/null && break
    [ "$(podman inspect --format '{{.State.Running}}' "$name")" = true ] || fail "the container exited before /healthz answered"
    sleep 0.2
done
curl -fsS -o /dev/null --max-time 2 "$http/healthz" || fail "/healthz did not answer 200 within 30 s"
say "/healthz 200"

podman healthcheck run "$name" >/dev/null || fail "the image's HEALTHCHECK failed"
say "HEALTHCHECK healthy"

build_info="$(curl -fsS --max-time 5 "$http/metrics" | grep '^browserpool_build_info' || true)"
case "$build_info" in
    *"revision=\"$rev\""*) say "/metrics $build_info" ;;
    *) fail "/metrics build_info is \"$build_info\", not revision $rev" ;;
esac

token="$(cat "$work/state/data/admin.token")" || fail "no admin.token in the data dir"
grpc() {
    local method="$1" body="$2"
    "$grpcurl" -plaintext -max-time 60 -H "authorization: Bearer $token" -d "$body" \
        "127.0.0.1:$grpc_port" "browserpool.v1.$method"
}
field() { python3 -c 'import json, sys; print(json.load(sys.stdin).get(sys.argv[1], ""))' "$1"; }

acquired="$(grpc Sessions/Acquire '{"wait_ms": 60000}')" || fail "Acquire: $acquired"
session="$(field sessionId <<<"$acquired")"
[ -n "$session" ] || fail "Acquire answered no session: $acquired"
say "Acquire: session $session"

# The container's processes as the host sees them: pid, start time, user namespace, command
# line; every descendant of its PID 1 (Chromium's sandboxed processes live in PID namespaces of
# their own, so the container's PID namespace does not find them).
container_procs() {
    python3 - "$1" <<'PY2'
import os, sys
procs = {}
for d in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
        cmd = open(f"/proc/{d}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        procs[int(d)] = (int(stat[1]), stat[19], os.readlink(f"/proc/{d}/ns/user"), cmd.strip())
    except OSError:
        pass
children = {}
for pid, (ppid, *_) in procs.items():
    children.setdefault(ppid, []).append(pid)
todo = [int(sys.argv[1])]
while todo:
    pid = todo.pop()
    if pid in procs:
        _, start, userns, cmd = procs[pid]
        print(pid, start, userns, cmd)
    todo.extend(children.get(pid, []))
PY2
}

# Chromium's sandbox: no --no-sandbox anywhere, and the zygote in a user namespace of its own.
container_procs "$ctr_pid" >"$work/procs"
grep -q -- '--no-sandbox' "$work/procs" && fail "a Chromium runs with --no-sandbox: $(grep -- --no-sandbox "$work/procs" | head -1)"
browser_ns="$(awk '/--remote-debugging-port=/ && !/--type=/ { print $3; exit }' "$work/procs")"
zygote_ns="$(awk '/--type=zygote/ && !/--no-zygote-sandbox/ { print $3; exit }' "$work/procs")"
[ -n "$browser_ns" ] && [ -n "$zygote_ns" ] || fail "no Chromium browser and zygote process found in the container: $(cat "$work/procs")"
[ "$zygote_ns" != "$browser_ns" ] || fail "Chromium's zygote shares the browser's user namespace: no sandbox"
say "Chromium sandboxed: no --no-sandbox, its zygote in a user namespace of its own ($(grep -c chromium "$work/procs") Chromium processes)"
# As the chart runs it (non-root), workers run as the image's uid, and the server's own check
# of its first worker says the sandbox is on.
browser_pid="$(awk '/--remote-debugging-port=/ && !/--type=/ { print $1; exit }' "$work/procs")"
browser_uid="$(awk '/^Uid:/ { print $2 }' "/proc/$browser_pid/status")"
[ "$browser_uid" = "$UID_IN_IMAGE" ] || fail "the worker's browser runs as uid $browser_uid, not the image's $UID_IN_IMAGE"
status="$(grpc Admin/PoolStatus '{}')" || fail "PoolStatus: $status"
sandbox="$(python3 -c 'import json, sys; r = json.load(sys.stdin); print(r["replicas"][0].get("sandbox", ""), r.get("unsandboxed", False))' <<<"$status")"
case "$sandbox" in
    "sandboxed: workers run as the server's uid"*" False") ;;
    *) fail "PoolStatus does not report the sandbox on: $sandbox" ;;
esac
say "workers run as uid $browser_uid; PoolStatus: $sandbox"
# Non-root, the server still keeps each worker's DevTools out of the pod's network namespace:
# the browser is in a network namespace of its own, inside a user namespace the server owns.
browser_net="$(readlink "/proc/$browser_pid/ns/net")"
[ "$browser_net" != "$(readlink "/proc/$ctr_pid/ns/net")" ] \
    || fail "the worker's browser shares the server's network namespace: its DevTools port is open to the pod"
# The log is read whole first: `grep -q` stops at the first match, and under pipefail the
# SIGPIPE that gives `podman logs` would fail the check whenever more log followed the line.
server_log="$(podman logs "$name" 2>&1)"
grep -q 'inside an unprivileged user namespace' <<<"$server_log" \
    || fail "the server did not say its workers' namespaces are unprivileged ones"
say "the worker's DevTools lives in a network namespace of its own ($browser_net)"

url="http://127.0.0.1:$fixture_port/"
navigated="$(grpc Sessions/Act "{\"session_id\": \"$session\", \"action\": {\"action\": \"navigate\", \"payload\": \"$url\"}}")" \
    || fail "Act navigate: $navigated"
[ "$(field ok <<<"$navigated")" = True ] || fail "navigate $url: $navigated"
title="$(grpc Sessions/Act "{\"session_id\": \"$session\", \"action\": {\"action\": \"title\"}}")" || fail "Act title: $title"
[ "$(field value <<<"$title")" = "browserpool image check" ] || fail "the fixture's title was not read back: $title"
say "Act navigate $url, title \"browserpool image check\""

released="$(grpc Sessions/Release "{\"session_id\": \"$session\"}")" || fail "Release: $released"
got="$(grpc Sessions/Get "{\"session_id\": \"$session\"}")" || fail "Get after Release: $got"
state="$(field state <<<"$got")"
[ "$state" = SESSION_STATE_CLOSED ] || fail "after Release the session is $state"
say "Release: $state"

podman kill --signal TERM "$name" >/dev/null
code="$(timeout 60 podman wait "$name")" || fail "the container did not stop within 60 s of SIGTERM"
[ "$code" = 0 ] || fail "the container exited $code after SIGTERM"
podman logs "$name" >"$work/log" 2>&1
grep -q 'stopped' "$work/log" || fail "the server did not log its stop"
say "SIGTERM: exited 0"

# Every process the container ran while the session was live (the pid with its start time, so
# a reused pid is not taken for it) is gone.
left="$(python3 - "$work/procs" <<'PY2'
import sys
for line in open(sys.argv[1]):
    pid, start, _, cmd = (line.rstrip("\n").split(" ", 3) + [""])[:4]
    try:
        if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[19] == start:
            print(pid, cmd)
    except OSError:
        pass
PY2
)"
[ -z "$left" ] || fail "processes of the container left on the host: $left"
# Workers' profiles live in the container's /tmp (a tmpfs, gone with it), never in the state
# volume, which holds only the server's own files.
strays="$(find "$work/state" -mindepth 2 -maxdepth 2 -path '*/data/profiles*' 2>/dev/null | wc -l)"
[ "$strays" -eq 0 ] || fail "worker profiles in the state volume"
say "no Chromium process left, no profile in the state volume"

# The same container under RuntimeDefault's rule for namespaces: the profile without unshare
# and setns, clone only without namespace flags (CLONE_NEWNS, UTS, IPC, USER, PID, NET,
# CGROUP: 0x7e020000), and clone3 answering ENOSYS so that glibc falls back to clone, as
# containerd's and CRI-O's defaults have it for a container that lacks CAP_SYS_ADMIN. Chromium's sandbox cannot start there: workers fail to boot, and /readyz says
# why rather than serving pages unsandboxed.
python3 - "$profile" "$work/no-namespaces.json" <<'PY2'
import json, sys
p = json.load(open(sys.argv[1]))
names = [n for n in p["syscalls"][0]["names"] if n not in ("unshare", "setns", "clone3", "clone")]
p["syscalls"] = [
    {"names": names, "action": "SCMP_ACT_ALLOW"},
    {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
     "args": [{"index": 0, "value": 0x7E020000, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]},
    {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
]
json.dump(p, open(sys.argv[2], "w"))
PY2
podman rm -f -t 0 "$name" >/dev/null
name="$name-runtime-default"
run_as_chart "$name" "$work/no-namespaces.json"
ready=""
for _ in $(seq 1 300); do
    ready="$(curl -sS --max-time 2 "$http/readyz" 2>/dev/null || true)"
    case "$ready" in *"fail to boot"*) break ;; esac
    [ "$(podman inspect --format '{{.State.Running}}' "$name")" = true ] || fail "the container exited under RuntimeDefault's namespace rule"
    sleep 0.2
done
case "$ready" in
    *"fail to boot"*) say "under RuntimeDefault's rule for namespaces, /readyz: $(head -c 200 <<<"$ready")" ;;
    *) fail "under RuntimeDefault's rule for namespaces /readyz said \"$ready\", not that workers fail to boot" ;;
esac
podman rm -f -t 0 "$name" >/dev/null

say "image check passed in $((SECONDS - started)) s"
