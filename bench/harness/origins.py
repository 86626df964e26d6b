"""Starts the origins (bench-origin in Rust, the Node origin) and reads their counters.

Both answer `GET /__origin/stats` with `{"connections", "open", "requests"}`: TCP
connections accepted so far, open now, and requests served. Upstream connections opened
by a proxy are the difference of `connections` before and after a window.

bench-origin in TLS mode (`start(..., certs=...)`, the HTTPS origin) serves the same over
HTTPS and adds `"tls": {"full", "resumed", "failed", "tls13"}`, the handshakes it did;
`stats()` flattens them into `tls_full`, `tls_resumed`, `tls_failed`, `tls13`, and
`delta()` subtracts them like the rest. The harness's own stats request is a TLS
connection too, with a full handshake; `calibrate()` measures that and every difference
leaves it out.

bench-origin in h2c mode (`start(..., h2c=True)`) serves the same routes over HTTP/2 with
prior knowledge beside HTTP/1.1 on one port (the harness's stats request is HTTP/1.1) and
adds `"h2": {"connections", "open", "requests", "max_streams"}`: connections that carried
HTTP/2, of them open now, requests over HTTP/2, and the concurrent streams each connection
allows; `stats()` flattens them into `h2_connections`, `h2_open`, `h2_requests`,
`h2_max_streams`, and `delta()` subtracts the two counters among them.
"""

import json
import ssl
import subprocess
import urllib.request

from . import procs, sockets

# The handshake counts of an HTTPS origin, as `stats()` returns them.
TLS_KEYS = ("tls_full", "tls_resumed", "tls_failed", "tls13")
# The HTTP/2 counters of an h2c origin that `delta()` subtracts (`h2_open` and
# `h2_max_streams` are readings, not counters).
H2_KEYS = ("h2_connections", "h2_requests")


class Origin:
    """A running origin on 127.0.0.1:`port`, possibly inside a network namespace."""

    def __init__(self, kind, child, port, netns=None, certs=None, h2c=False):
        self.kind = kind
        self.h2c = h2c
        self.child = child
        self.port = port
        self.ports = (port,)  # every port it listens on (see `start`'s extra_ports)
        self.netns = netns
        self.address = f"127.0.0.1:{port}"
        self.tls = certs is not None
        self.base_url = f"{'https' if self.tls else 'http'}://{self.address}"
        # Verifies the HTTPS origin's certificate, for 127.0.0.1, against the session's CA.
        self._ssl = ssl.create_default_context(cafile=str(certs.ca)) if self.tls else None
        # What one call to stats() itself adds to the counters (its own connection and
        # request, and in TLS mode its handshake), measured once and subtracted from every
        # difference.
        self.overhead = {"connections": 0, "requests": 0}
        if self.tls:
            self.overhead |= {key: 0 for key in TLS_KEYS}
        if self.h2c:
            self.overhead |= {key: 0 for key in H2_KEYS}
        # Source ports for stats() inside a namespace (below its 40000-40999 range).
        self._source_port = 30000

    def stats(self):
        if self.netns is None:
            url = f"{self.base_url}/__origin/stats"
            with urllib.request.urlopen(url, timeout=10, context=self._ssl) as resp:
                stats = json.loads(resp.read())
            for key, value in (stats.pop("tls", None) or {}).items():
                stats["tls13" if key == "tls13" else f"tls_{key}"] = value
            for key, value in (stats.pop("h2", None) or {}).items():
                stats[f"h2_{key}"] = value
            return stats
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
        """Connections accepted, requests served, (HTTPS origin) handshakes done and (h2c
        origin) HTTP/2 connections and requests between two stats() snapshots."""
        return {k: max(0, after[k] - before[k] - self.overhead[k]) for k in self.overhead}

    def stop(self):
        self.child.stop()


def start(kind, *, port, bins, log_dir, netns=None, certs=None, h2c=False, extra_ports=(),
          workers=None):
    """Starts origin `kind` ("rust" or "node"); returns an Origin or raises RuntimeError.

    With `workers` (rust only) at most that many responses are in progress at once
    (`bench-origin --workers`), as in an app server with that many sync workers.

    With `certs` (rust only, not in a namespace) the origin serves HTTPS with the
    session's server certificate; with `h2c` (rust only, not in a namespace) it also
    speaks HTTP/2 with prior knowledge. With `extra_ports` (rust, cleartext HTTP/1.1
    only) the one process also listens on each of them: its stats, read on `port`, are
    the totals of every port, with each port's own under `listeners`.
    """
    if extra_ports and (kind != "rust" or certs is not None or h2c):
        raise ValueError("only cleartext bench-origin listens on several ports")
    if kind == "rust":
        argv = [bins["bench-origin"], "--listen", f"127.0.0.1:{port}", "--threads", "1"]
        for extra in extra_ports:
            argv += ["--listen", f"127.0.0.1:{extra}"]
        if certs is not None:
            argv += ["--tls-cert", certs.cert, "--tls-key", certs.key]
        if h2c:
            argv.append("--h2c")
        if workers is not None:
            argv += ["--workers", str(workers)]
    elif kind == "node":
        argv = [bins["node"], bins["node-origin"], "--port", str(port)]
    else:
        raise ValueError(f"unknown origin kind {kind}")
    if workers is not None and (kind != "rust" or extra_ports):
        raise ValueError("only bench-origin on one port limits its workers")
    if certs is not None and (kind != "rust" or netns is not None):
        raise ValueError("only bench-origin on the host serves HTTPS")
    if h2c and (kind != "rust" or netns is not None or certs is not None):
        raise ValueError("only bench-origin on the host, in cleartext, serves h2c")
    name = f"origin-{kind}" + ("-tls" if certs is not None else "") + ("-h2c" if h2c else "")
    child = procs.spawn(name, argv, log_dir=log_dir, cpu=procs.LOAD_CPU, netns=netns)
    for listening in (port, *extra_ports):
        if not sockets.wait_listening(listening, timeout_s=15, netns=netns, child=child):
            tail = child.stderr_tail()
            child.stop()
            raise RuntimeError(f"{kind} origin did not start on port {listening}: {tail}")
    origin = Origin(kind, child, port, netns, certs, h2c)
    origin.ports = (port, *extra_ports)
    origin.calibrate()
    return origin
