"""The contenders: renders each one's config from `bench/configs/`, starts it pinned to the
proxy core in front of a given origin, and stops it.

Every proxy gets the same budget (one worker process or thread, pinned with `taskset` to
the proxy core) and the same address scheme: it listens on the session's proxy port and forwards to the
origin's port. `direct` has no proxy; its load goes straight to the origin.

The HTTPS scenarios start a contender with `tls="client"` (its listener speaks TLS, with
the session's certificate) or `tls="origin"` (it forwards to an HTTPS origin and verifies
it against the session's CA); nginx and HAProxy then render the config for that side
(`Contender.tls_configs`), holdfast gets the matching flags.

The HTTP/2 scenarios start a contender with `h2="client"` (its cleartext listener speaks
HTTP/2 with prior knowledge, h2c; it forwards over HTTP/1.1), `h2="both"` (h2c on both
sides, to an origin in h2c mode), `h2="grpc"` (gRPC calls over h2c on both sides, to the
origin's gRPC echo) or `h2="client-tls"` (with `tls="client"`: its listener speaks TLS
and offers HTTP/2 by ALPN, as to a browser; it forwards over HTTP/1.1); nginx and HAProxy
render the config for that side (`Contender.h2_configs`), holdfast gets `--h2c` (and
`--upstream h2c://`), or for `client-tls` its TLS flags, which offer HTTP/2 by ALPN. A
contender without a config for the side does not run that scenario (see
`scenarios.contenders_for`).

`h2-floor` is no proxy to compare with but a floor: the smallest h2c-to-h2c relay on the
`h2` crate (bench/tools/src/bin/h2-floor.rs), run only in h2-to-h2c, where holdfast's CPU
per request over its own says how much of holdfast's cost is the crate's. It is not a peer.

`floor` is the same for HTTP/1.1: the smallest relay that still does a proxy's job
(bench/tools/src/bin/floor.rs: one thread, pooled upstream connections, heads forwarded
byte for byte without their hop-by-hop lines, `Content-Length` framing), run only in
keepalive-tiny, keepalive-50k, closing-tiny and rate-latency. holdfast's CPU per request
over its own is how much holdfast costs beyond relaying the bytes; the report shows it as
information and holds holdfast to at most 1.1x of it on keepalive-tiny. It is not a peer
either.
"""

import json
import re
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from . import procs, sockets

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


@dataclass(frozen=True)
class Contender:
    name: str
    program: str | None  # "nginx", "haproxy", "holdfast", "h2-floor", "h2-engine-floor" or
    # "floor"; None: direct
    config: str | None  # template in bench/configs/
    about: str
    # Runs only in the scenarios that name it (Scenario.contenders), not in every scenario.
    only_where_named: bool = False
    # (side, template) pairs for the HTTPS scenarios: "client" (TLS listener) and "origin"
    # (HTTPS upstream); a side it has no template for, it does not run.
    tls_configs: tuple = ()
    # (side, template) pairs for the HTTP/2 scenarios: "client" (h2c listener, HTTP/1.1
    # upstream), "both" (h2c upstream too), "grpc" (gRPC over h2c on both sides) and
    # "client-tls" (TLS listener offering h2 by ALPN, HTTP/1.1 upstream); template None: it
    # takes no config (h2-floor).
    h2_configs: tuple = ()

    def config_for(self, tls, h2=None):
        """The config template for TLS side `tls` or HTTP/2 side `h2` (both None: the
        cleartext HTTP/1.1 one)."""
        if h2 is not None:
            return dict(self.h2_configs).get(h2)
        if tls is None:
            return self.config
        return dict(self.tls_configs).get(tls)

    def runs_h2(self, h2):
        """Whether it can run an HTTP/2 scenario of side `h2` (holdfast: when its binary
        has the flags, checked apart)."""
        return self.program in (None, "holdfast") or h2 in dict(self.h2_configs)


CONTENDERS = [
    Contender("direct", None, None, "no proxy: the load generator talks to the origin"),
    Contender("nginx-default", "nginx", "nginx-default.conf",
              "nginx 1.22 as in Dokku's template: upstream without keepalive, HTTP/1.1 "
              "upstream, Upgrade and Connection copied"),
    Contender("nginx-recipe", "nginx", "nginx-recipe.conf",
              "nginx 1.22, keepalive 16, HTTP/1.1, Connection \"\""),
    Contender("nginx-keepalive32", "nginx", "nginx-keepalive32.conf",
              "nginx 1.22 set up as nginx 1.29.7's defaults: keepalive 32 per worker, "
              "HTTP/1.1, Connection \"\"", only_where_named=True),
    Contender("nginx-tuned", "nginx", "nginx-tuned.conf",
              "nginx 1.22, keepalive 1024, keepalive_requests 100000, keepalive_timeout 60s",
              tls_configs=(("client", "nginx-tuned-https.conf"),
                           ("origin", "nginx-tuned-https-origin.conf")),
              h2_configs=(("client", "nginx-tuned-h2.conf"),
                          ("grpc", "nginx-tuned-grpc.conf"),
                          ("client-tls", "nginx-tuned-h2-https.conf"))),
    Contender("nginx-grpc", "nginx", None,
              "nginx 1.22 with grpc_pass grpc:// to an h2c origin (its only HTTP/2 upstream), "
              "keepalive 1024, HTTP/2 clients", only_where_named=True,
              h2_configs=(("both", "nginx-grpc-h2c.conf"),)),
    Contender("nginx-no-reuse", "nginx", None,
              "nginx 1.22 to an HTTPS origin without keepalive and with "
              "proxy_ssl_session_reuse off: a full TLS handshake per request (reference line)",
              only_where_named=True,
              tls_configs=(("origin", "nginx-no-reuse-https-origin.conf"),)),
    Contender("haproxy", "haproxy", "haproxy.cfg",
              "HAProxy 2.6 defaults (http-reuse safe), nbthread 1",
              tls_configs=(("client", "haproxy-https.cfg"),
                           ("origin", "haproxy-https-origin.cfg")),
              h2_configs=(("client", "haproxy-h2.cfg"), ("both", "haproxy-h2c.cfg"),
                          ("grpc", "haproxy-h2c.cfg"), ("client-tls", "haproxy-h2-https.cfg"))),
    Contender("holdfast", "holdfast", None, "holdfast, no tuning, --threads 1"),
    Contender("h2-floor", "h2-floor", None,
              "the smallest h2c-to-h2c relay on the h2 crate (bench/tools/src/bin/h2-floor.rs), "
              "one upstream connection: the crate's own cost, a floor for holdfast",
              only_where_named=True, h2_configs=(("both", None),)),
    Contender("h2-engine-floor", "h2-engine-floor", None,
              "the same relay on holdfast's own HTTP/2 engine, holdfast-h2 "
              "(bench/tools/src/bin/h2-engine-floor.rs), one upstream connection per client "
              "connection, one task for both: the floor holdfast moves to with the engine",
              only_where_named=True, h2_configs=(("both", None),)),
    Contender("floor", "floor", None,
              "the smallest HTTP/1.1 relay with pooled upstream connections "
              "(bench/tools/src/bin/floor.rs), one thread: the cost of relaying the bytes, "
              "a floor for holdfast", only_where_named=True),
]

BY_NAME = {c.name: c for c in CONTENDERS}

# The better of these two, per metric, is the "best peer" the targets compare against
# (h2-floor, h2-engine-floor and floor never are: they are floors, see report.h2_floor_line and
# report.floor_table).
PEERS = ("nginx-tuned", "haproxy")

# The HTTP/2 sides whose clients speak h2c to the proxy, and those whose proxy speaks h2c
# to the origin.
H2C_LISTENER_SIDES = ("client", "both", "grpc")
H2C_UPSTREAM_SIDES = ("both", "grpc")

_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def render(template, values):
    """The template with every `{name}` replaced; nginx's own braces are left alone."""
    text = (CONFIG_DIR / template).read_text()

    def substitute(match):
        key = match.group(1)
        if key not in values:
            raise KeyError(f"{template}: no value for placeholder {{{key}}}")
        return str(values[key])

    return _PLACEHOLDER.sub(substitute, text)


class StartError(RuntimeError):
    """A contender did not come up; the run is recorded as failed."""


class Running:
    """A started contender: its process (None for direct) and the URL the load goes to."""

    def __init__(self, contender, child, base_url, admin_url=None):
        self.contender = contender
        self.child = child
        self.base_url = base_url
        self.admin_url = admin_url

    def pids(self):
        return self.child.pids() if self.child else []

    def is_alive(self):
        return self.child is None or self.child.is_alive()

    def status(self):
        """holdfast's /status JSON (read between windows only), else None."""
        if not self.admin_url:
            return None
        try:
            with urllib.request.urlopen(self.admin_url + "/status", timeout=10) as resp:
                return json.loads(resp.read())
        except OSError:
            return None

    def stop(self):
        if self.child:
            self.child.stop()


def start(contender, *, origin, ports, bins, run_dir, nofile, netns=None, config=None,
          threads=1, tls=None, certs=None, h2=None):
    """Starts `contender` in front of `origin`, once the proxy port is free; raises
    StartError if the port stays taken or the contender does not listen.

    `tls`: None (cleartext on both sides), "client" (the listener speaks TLS with `certs`'
    server certificate) or "origin" (`origin` speaks TLS; the contender verifies it
    against `certs`' CA). `h2`: None (HTTP/1.1), "client" (the listener speaks h2c, the
    upstream HTTP/1.1), "both" or "grpc" (h2c to `origin` too) or "client-tls" (with
    `tls="client"`: the TLS listener offers HTTP/2 by ALPN, the upstream HTTP/1.1). For
    direct, the load goes to `origin` as it is.

    `config` ({"template": file in configs/, "values": {...}}) replaces the contender's
    own config (nginx, HAProxy or holdfast) with that template, rendered with the usual
    values and these; a holdfast config names its admin listener itself (`{admin}`).
    `threads` is holdfast's `--threads` (nginx's and HAProxy's come with their config).
    """
    if contender.name == "direct":
        return Running(contender, None, origin.base_url)
    _wait_port_free(ports["proxy"], contender, netns)
    if tls is not None and certs is None:
        raise ValueError("a TLS scenario needs the session's certificates")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    listen = f"127.0.0.1:{ports['proxy']}"
    admin = f"127.0.0.1:{ports['admin']}"
    values = {"run_dir": run_dir, "listen": listen, "origin": origin.address, "admin": admin,
              "nofile": nofile, "maxconn": min(50_000, max(1000, nofile - 100))}
    if certs is not None:
        values |= {"tls_cert": certs.cert, "tls_key": certs.key, "tls_pem": certs.combined,
                   "tls_ca": certs.ca}
    template = config["template"] if config else contender.config_for(tls, h2)
    if config:
        values |= config["values"]
    if contender.program in ("nginx", "haproxy") and template is None:
        raise StartError(f"{contender.name} has no config for "
                         + (f"HTTP/2 side {h2!r}" if h2 else f"TLS side {tls!r}"))
    admin_url = None
    if contender.program == "nginx":
        for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (run_dir / "temp" / sub).mkdir(parents=True, exist_ok=True)
            (run_dir / "temp" / sub).chmod(0o777)
        conf = run_dir / template
        conf.write_text(render(template, values))
        argv = [bins["nginx"], "-p", run_dir, "-c", conf, "-e", run_dir / "error.log"]
    elif contender.program == "haproxy":
        conf = run_dir / template
        conf.write_text(render(template, values))
        argv = [bins["haproxy"], "-f", conf, "-db"]
    elif contender.program == "holdfast":
        if config:
            conf = run_dir / template
            conf.write_text(render(template, values))
            argv = [bins["holdfast"], "--config", conf, "--threads", str(threads)]
        else:
            upstream = origin.address
            tls_args = []
            if tls == "client":
                tls_args = ["--tls-cert", certs.cert, "--tls-key", certs.key]
            elif tls == "origin":
                upstream = f"https://{origin.address}"
                tls_args = ["--upstream-ca", certs.ca]
            # A TLS listener offers HTTP/2 by ALPN by itself; --h2c is for cleartext ones.
            h2_args = ["--h2c"] if h2 in H2C_LISTENER_SIDES else []
            if h2 in H2C_UPSTREAM_SIDES:
                upstream = f"h2c://{origin.address}"
            argv = [bins["holdfast"], "--listen", listen, *tls_args, *h2_args, "--upstream",
                    upstream, "--threads", str(threads), "--admin", admin]
        admin_url = f"http://{admin}"
    elif contender.program == "h2-floor":
        if h2 != "both":
            raise StartError(f"{contender.name} only relays h2c clients to an h2c origin")
        argv = [bins["h2-floor"], "--listen", listen, "--upstream", origin.address]
    elif contender.program == "h2-engine-floor":
        if h2 != "both":
            raise StartError(f"{contender.name} only relays h2c clients to an h2c origin")
        argv = [bins["h2-engine-floor"], "--listen", listen, "--upstream", origin.address]
    elif contender.program == "floor":
        if tls is not None or h2 is not None:
            raise StartError(f"{contender.name} only relays cleartext HTTP/1.1")
        argv = [bins["floor"], "--listen", listen, "--upstream", origin.address]
    else:
        raise ValueError(f"unknown contender {contender.name}")
    child = procs.spawn(contender.name, argv, log_dir=run_dir, cpu=procs.PROXY_CPU, netns=netns)
    if not sockets.wait_listening(ports["proxy"], timeout_s=15, netns=netns, child=child):
        tail = child.stderr_tail()
        log = run_dir / "error.log"
        if log.exists():
            tail += log.read_text(errors="replace")[-1000:]
        child.stop()
        raise StartError(f"{contender.name} did not start listening on {listen}: {tail.strip()}")
    if admin_url and netns is None:
        _wait_admin(admin_url, child)
    scheme = "https" if tls == "client" else "http"
    return Running(contender, child, f"{scheme}://{listen}",
                   admin_url if netns is None else None)


def _wait_port_free(port, contender, netns, timeout_s=10):
    """Waits until the previous run's proxy has let go of the proxy port; StartError if
    it still listens after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while sockets.is_listening(port, netns):
        if time.monotonic() > deadline:
            raise StartError(f"port {port} is still in use before starting {contender.name}")
        time.sleep(0.1)


# The flags holdfast needs for the HTTPS scenarios.
HOLDFAST_TLS_FLAGS = ("--tls-cert", "--tls-key", "--upstream-ca")


def _holdfast_has_flags(holdfast, flags):
    """Whether this holdfast binary has every one of `flags` (its `--help` names them)."""
    try:
        out = subprocess.run([str(holdfast), "--help"], capture_output=True, text=True,
                             timeout=30, check=False)
    except OSError:
        return False
    text = out.stdout + out.stderr
    return all(flag in text for flag in flags)


def holdfast_speaks_tls(holdfast):
    """Whether this holdfast binary has the TLS flags."""
    return _holdfast_has_flags(holdfast, HOLDFAST_TLS_FLAGS)


# The flag holdfast needs for the HTTP/2 scenarios (`--upstream h2c://` goes with it).
HOLDFAST_H2_FLAGS = ("--h2c",)


def holdfast_speaks_h2(holdfast):
    """Whether this holdfast binary has the HTTP/2 flags."""
    return _holdfast_has_flags(holdfast, HOLDFAST_H2_FLAGS)


def _wait_admin(admin_url, child, timeout_s=10):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and child.is_alive():
        try:
            with urllib.request.urlopen(admin_url + "/healthz", timeout=2):
                return
        except OSError:
            time.sleep(0.05)
