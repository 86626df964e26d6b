"""Creates and deletes the network namespaces of the port-exhaustion scenario.

A namespace `hfbench-N` has its own loopback, a local port range of 1000 ports
(40000-40999) and `tcp_tw_reuse = 0`, so a proxy that closes upstream connections runs
out of source ports within seconds, as on a busy host. Namespaces are deleted when their
`with` block ends, also on failure, and at exit.
"""

import atexit
import itertools
import os
import subprocess
from contextlib import contextmanager

PORT_RANGE = "40000 40999"

_created = set()
_counter = itertools.count(1)


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def _delete(name):
    _ip("netns", "delete", name, check=False)
    _created.discard(name)


@contextmanager
def namespace():
    """Yields the name of a fresh namespace, set up as described above."""
    name = f"hfbench-{os.getpid()}-{next(_counter)}"
    _ip("netns", "add", name)
    _created.add(name)
    try:
        _ip("-n", name, "link", "set", "lo", "up")
        for setting in (
            f"net.ipv4.ip_local_port_range={PORT_RANGE}",
            "net.ipv4.tcp_tw_reuse=0",
        ):
            subprocess.run(
                ["ip", "netns", "exec", name, "sysctl", "-q", "-w", setting],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
        yield name
    finally:
        _delete(name)


def delete_all():
    for name in list(_created):
        _delete(name)


atexit.register(delete_all)
