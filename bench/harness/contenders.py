"""The contenders: renders each one's config from `bench/configs/`, starts it pinned to the
proxy core in front of a given origin, and stops it.

Every proxy gets the same budget (one worker process or thread, pinned with `taskset` to
the proxy core) and the same address scheme: it listens on the session's proxy port and forwards to the
origin's port. `direct` has no proxy; its load goes straight to the origin.

The HTTPS scenarios start a contender with `tls="client"` (its listener speaks TLS, with
the session's certificate) or `tls="origin"` (it forwards to an HTTPS origin and verifies
it against the session's CA); nginx and HAProxy then render the config for that side
(`Contender.tls_configs`), holdfast gets the matching flags.
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
    program: str | None  # the program it needs ("nginx", "haproxy", "holdfast"), None for direct
    config: str | None  # template in bench/configs/
    about: str
    # Runs only in the scenarios that name it (Scenario.contenders), not in every scenario.
    only_where_named: bool = False
    # (side, template) pairs for the HTTPS scenarios: "client" (TLS listener) and "origin"
    # (HTTPS upstream); a side it has no template for, it does not run.
    tls_configs: tuple = ()

    def config_for(self, tls):
        """The config template for TLS side `tls` (None: the cleartext one)."""
        if tls is None:
            return self.config
        return dict(self.tls_configs).get(tls)


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
                           ("origin", "nginx-tuned-https-origin.conf"))),
    Contender("nginx-no-reuse", "nginx", None,
              "nginx 1.22 to an HTTPS origin without keepalive and with "
              "proxy_ssl_session_reuse off: a full TLS handshake per request (reference line)",
              only_where_named=True,
              tls_configs=(("origin", "nginx-no-reuse-https-origin.conf"),)),
    Contender("haproxy", "haproxy", "haproxy.cfg",
              "HAProxy 2.6 defaults (http-reuse safe), nbthread 1",
              tls_configs=(("client", "haproxy-https.cfg"),
                           ("origin", "haproxy-https-origin.cfg"))),
    Contender("holdfast", "holdfast", None, "holdfast, no tuning, --threads 1"),
]

BY_NAME = {c.name: c for c in CONTENDERS}

# The better of these two, per metric, is the "best peer" the targets compare against.
PEERS = ("nginx-tuned", "haproxy")

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


def start(contender, *, origin, ports, bins, run_dir, nofile, netns=None, holdfast_config=None,
          tls=None, certs=None):
    """Starts `contender` in front of `origin`; raises StartError if it does not listen.

    `tls`: None (cleartext on both sides), "client" (the listener speaks TLS with `certs`'
    server certificate) or "origin" (`origin` speaks TLS; the contender verifies it
    against `certs`' CA). For direct, the load goes to `origin` as it is.
    """
    if contender.name == "direct":
        return Running(contender, None, origin.base_url)
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
    template = contender.config_for(tls)
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
        if holdfast_config:
            conf = run_dir / "holdfast.toml"
            conf.write_text(render(holdfast_config["template"], values | holdfast_config["values"]))
            argv = [bins["holdfast"], "--config", conf, "--threads", "1"]
        else:
            upstream = origin.address
            tls_args = []
            if tls == "client":
                tls_args = ["--tls-cert", certs.cert, "--tls-key", certs.key]
            elif tls == "origin":
                upstream = f"https://{origin.address}"
                tls_args = ["--upstream-ca", certs.ca]
            argv = [bins["holdfast"], "--listen", listen, *tls_args, "--upstream", upstream,
                    "--threads", "1", "--admin", admin]
        admin_url = f"http://{admin}"
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


# The flags holdfast needs for the HTTPS scenarios.
HOLDFAST_TLS_FLAGS = ("--tls-cert", "--tls-key", "--upstream-ca")


def holdfast_speaks_tls(holdfast):
    """Whether this holdfast binary has the TLS flags (its `--help` names them all)."""
    try:
        out = subprocess.run([str(holdfast), "--help"], capture_output=True, text=True,
                             timeout=30, check=False)
    except OSError:
        return False
    text = out.stdout + out.stderr
    return all(flag in text for flag in HOLDFAST_TLS_FLAGS)


def _wait_admin(admin_url, child, timeout_s=10):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and child.is_alive():
        try:
            with urllib.request.urlopen(admin_url + "/healthz", timeout=2):
                return
        except OSError:
            time.sleep(0.05)
