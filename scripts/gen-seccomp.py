#!/usr/bin/env python3
"""Writes helm/browserpool/files/seccomp.json: the narrowest seccomp profile the pool's
workers need as a non-root pod, an allowlist.

Every system call the kernel headers of this machine name for x86_64 and the generic table
(arm64) is allowed, except those that reach past the container: loading kernel code,
mounting, tracing other processes, clocks, swap, keyrings, BPF, perf, io_uring,
userfaultfd, reboot and their kin (DENY below). Unlike the kubelet's RuntimeDefault (on
containerd and CRI-O, derived from Docker's), it allows creating namespaces without
CAP_SYS_ADMIN (clone, clone3 and unshare with any flags, setns), which Chromium's sandbox
needs inside its user namespace, and which the server needs to give each worker a network
namespace of its own. System calls added to the kernel after these headers are refused.

    python3 scripts/gen-seccomp.py            rewrite the profile from this machine's headers
"""
import json
import pathlib
import re
import sys

HEADERS = ["/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm-generic/unistd.h"]

DENY = {
    # Kernel code and the machine itself.
    "create_module", "init_module", "finit_module", "delete_module", "query_module",
    "get_kernel_syms", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
    "iopl", "ioperm", "vm86", "vm86old", "uselib", "nfsservctl", "_sysctl", "sysfs",
    "ustat", "acct", "vhangup", "syslog", "lookup_dcookie",
    # Clocks are the host's.
    "settimeofday", "stime", "clock_settime", "clock_settime64", "clock_adjtime", "clock_adjtime64", "adjtimex",
    # Mounts and file handles that escape a mount namespace.
    "mount", "umount", "umount2", "pivot_root", "mount_setattr", "move_mount", "open_tree",
    "fsopen", "fsconfig", "fsmount", "fspick", "name_to_handle_at", "open_by_handle_at",
    "quotactl", "quotactl_fd", "fanotify_init",
    # Other processes' memory and the kernel's attack surface.
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "bpf", "perf_event_open",
    "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "add_key", "request_key", "keyctl", "mbind", "set_mempolicy", "migrate_pages", "move_pages",
    "set_mempolicy_home_node",
    # Never implemented.
    "afs_syscall", "tuxcall", "security", "getpmsg", "putpmsg",
}


def names():
    found = set()
    for header in HEADERS:
        for line in pathlib.Path(header).read_text().splitlines():
            m = re.match(r"#define __NR(?:3264)?_(\w+)\s", line)
            if m and m.group(1) not in ("syscalls", "arch_specific_syscall"):
                found.add(m.group(1))
    return found


def main():
    allowed = sorted(names() - DENY)
    missing = {"clone", "clone3", "unshare", "setns", "chroot", "execve"} - set(allowed)
    if missing:
        sys.exit(f"the headers lack {sorted(missing)}: wrong headers?")
    profile = {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
        "syscalls": [{"names": allowed, "action": "SCMP_ACT_ALLOW"}],
    }
    out = pathlib.Path(__file__).resolve().parent.parent / "helm/browserpool/files/seccomp.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(profile, indent=1) + "\n")
    print(f"{out}: {len(allowed)} system calls allowed, {len(DENY)} refused")


if __name__ == "__main__":
    main()
