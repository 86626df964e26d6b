"""Starts the origins (bench-origin in Rust, the Node origin) and reads their counters.

Both answer `GET /__origin/stats` with `{"connections", "open", "requests"}`: TCP
connections accepted so far, open now, and requests served. Upstream connections opened
by a proxy are the difference of `connections` before and after a window.
"""

import json
import subprocess
import urllib.request

from . import procs, sockets


class Origin:
    """A running origin on 127.0.0.1:`port`, possibly inside a network namespace."""

    def __init__(self, kind, child, port, netns=None):
        self.kind = kind
        self.child = child
        self.port = port
        self.netns = netns
        self.address = f"127.0.0.1:{port}"
        # What one call to stats() itself adds to the counters (its own connection and
        # request), measured once and subtracted from every difference.
        self.overhead = {"connections": 0, "requests": 0}
        # Source ports for stats() inside a namespace (below its 40000-40999 range).
        self._source_port = 30000

    def stats(self):
        if self.netns is None:
            url = f"http://{self.address}/__origin/stats"
            with urllib.request.urlopen(url, timeout=10) as resp:
                return json.loads(resp.read())
        # Inside a namespace whose local ports may all be taken, so the request comes from
        # a fixed port outside the namespace's ephemeral range, a new one for every call.
        self._source_port += 1
        script = (
            "import http.client, sys\n"
            f"c = http.client.HTTPConnection('127.0.0.1', {self.port}, timeout=10, "
            f"source_address=('127.0.0.1', {self._source_port}))\n"
            "c.request('GET', '/__origin/stats')\n"
            "sys.stdout.write(c.getresponse().read().decode())\n"
        )
        out = subprocess.run(
            ["ip", "netns", "exec", self.netns, "python3", "-c", script],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"origin stats in {self.netns}: {out.stderr.strip()[-500:]}")
        return json.loads(out.stdout)

    def open_connections(self):
        """Connections open now, not counting the one this question arrives on."""
        return self.stats()["open"] - 1

    def calibrate(self):
        first = self.stats()
        second = self.stats()
        self.overhead = {k: second[k] - first[k] for k in self.overhead}

    def delta(self, before, after):
        """Connections accepted and requests served between two stats() snapshots."""
        return {k: max(0, after[k] - before[k] - self.overhead[k]) for k in self.overhead}

    def stop(self):
        self.child.stop()


def start(kind, *, port, bins, log_dir, netns=None):
    """Starts origin `kind` ("rust" or "node"); returns an Origin or raises RuntimeError."""
    if kind == "rust":
        argv = [bins["bench-origin"], "--listen", f"127.0.0.1:{port}", "--threads", "1"]
    elif kind == "node":
        argv = [bins["node"], bins["node-origin"], "--port", str(port)]
    else:
        raise ValueError(f"unknown origin kind {kind}")
    child = procs.spawn(f"origin-{kind}", argv, log_dir=log_dir, cpu=procs.LOAD_CPU, netns=netns)
    if not sockets.wait_listening(port, timeout_s=15, netns=netns, child=child):
        tail = child.stderr_tail()
        child.stop()
        raise RuntimeError(f"{kind} origin did not start on port {port}: {tail}")
    origin = Origin(kind, child, port, netns)
    origin.calibrate()
    return origin
