"""Describes the machine and the software versions a benchmark ran on."""

import datetime
import os
import platform
import subprocess
from pathlib import Path


def _first_line(argv):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return None
    text = (out.stdout + out.stderr).strip()
    return text.splitlines()[0] if text else None


def _read(path):
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _sysctl(name):
    """A sysctl's value, runs of whitespace (ip_local_port_range's tab) as one space."""
    value = _read("/proc/sys/" + name.replace(".", "/"))
    return " ".join(value.split()) if value is not None else None


def describe(bins):
    """Machine facts and tool versions, for latest.json and BENCHMARKS.md."""
    cpu_model = None
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
    mem_kb = None
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    versions = {"python": platform.python_version()}
    for name, argv in {
        "nginx": [bins.get("nginx"), "-v"],
        "haproxy": [bins.get("haproxy"), "-v"],
        "wrk": [bins.get("wrk"), "-v"],
        "h2load": [bins.get("h2load"), "--version"],
        "node": [bins.get("node"), "-v"],
        "openssl": [bins.get("openssl"), "version"],
        "rustc": ["rustc", "-V"],
        "cargo": ["cargo", "-V"],
    }.items():
        if argv[0]:
            versions[name] = _first_line([str(a) for a in argv])
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cpu_model": cpu_model,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "os": (_first_line(["sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"]) or "").strip(),
        "ram_gib": round(mem_kb / 1048576, 1) if mem_kb else None,
        "sysctl": {
            name: _sysctl(name)
            for name in ("net.ipv4.ip_local_port_range", "net.ipv4.tcp_tw_reuse",
                         "net.core.somaxconn")
        },
        "versions": versions,
    }


def git_commit(repo):
    """The checked-out commit, with `+dirty` when the work tree has changes; None outside git."""
    commit = _first_line(["git", "-C", str(repo), "rev-parse", "HEAD"])
    if not commit or " " in commit:
        return None
    status = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True, timeout=30, check=False,
    )
    return commit + ("+dirty" if status.stdout.strip() else "")
