"""Finds the programs the benchmark needs and installs missing ones from Debian packages.

nginx, haproxy, wrk and h2load (nghttp2-client) come from apt. The packages' maintainer scripts would start nginx and
HAProxy as system services; a temporary `/usr/sbin/policy-rc.d` that exits 101 forbids that
during the install, and any service that started anyway is stopped afterwards, so only the
harness's own instances (own configs, loopback ports) ever run.
"""

import os
import shutil
import subprocess
from pathlib import Path

# program -> Debian package that provides it
PACKAGES = {
    "nginx": "nginx",
    "haproxy": "haproxy",
    "wrk": "wrk",
    "h2load": "nghttp2-client",
    "node": "nodejs",
    "ip": "iproute2",
    "ss": "iproute2",
    "taskset": "util-linux",
    "openssl": "openssl",
}

# Services whose package starts them on install: (name, pid file).
SERVICES = (("nginx", "/run/nginx.pid"), ("haproxy", "/run/haproxy.pid"))

POLICY_RC_D = Path("/usr/sbin/policy-rc.d")


def which(program):
    """Path of `program`, also looking in the sbin directories a non-login PATH may lack."""
    path = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin"
    return shutil.which(program, path=path)


def missing(programs):
    return [p for p in programs if which(p) is None]


def install(programs, log):
    """Installs the packages that provide `programs`; returns the programs still missing."""
    packages = sorted({PACKAGES[p] for p in programs if p in PACKAGES})
    if not packages:
        return missing(programs)
    log(f"installing with apt-get: {' '.join(packages)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    own_policy = not POLICY_RC_D.exists()
    if own_policy:
        POLICY_RC_D.write_text(
            "#!/bin/sh\n# Written by holdfast's bench/run during apt-get install.\nexit 101\n"
        )
        POLICY_RC_D.chmod(0o755)
    try:
        subprocess.run(["apt-get", "update", "-q"], env=env, timeout=600, check=False)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
            env=env,
            timeout=1200,
            check=False,
        )
    finally:
        if own_policy:
            POLICY_RC_D.unlink(missing_ok=True)
    stop_services(log)
    return missing(programs)


def stop_services(log):
    """Stops the nginx and HAProxy system services if their package started them."""
    for name, pid_file in SERVICES:
        try:
            pid = int(Path(pid_file).read_text().split()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            continue
        log(f"the {name} system service is running; stopping it")
        subprocess.run(["service", name, "stop"], timeout=60, check=False)
