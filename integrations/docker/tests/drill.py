#!/usr/bin/env python3
"""The Docker discovery drill: a real holdfast (`--docker`, quick mode) routing by the labels
of real containers on a dockerd of the drill's own, under load.

run-drill is the entry point (it finds or builds holdfast and bench-origin and checks what
the drill needs); this file is the drill, engine.py its Docker side. Python 3 standard
library only; the clients and the Node app are integrations/drill's, shared with the Dokku
drill.

holdfast runs on the host on free loopback ports; every container runs with --init on the
host network (the daemon has no bridge) and listens on 127.0.0.1 and a free port of its
own. Each phase starts its own holdfast; every container carries the label
holdfast-drill=1 and all of them are removed at the start and the end.

Phases (--phase runs some of them; all by default) and what each proves:
  discovery      a container with a HEALTHCHECK is routed within 1 s of Docker's
                 `health_status: healthy` event and gets no request before it (the app's
                 own log); one without a HEALTHCHECK is routed once it listens; a
                 container that does not opt in, and one with holdfast.enable=false, are
                 never routed (404, no request in their logs, absent from /status);
                 holdfast.path routes a prefix to another container on the same host.
  listing-race   a container that starts after the daemon made holdfast's first listing
                 and before holdfast read it (a proxy on the Engine socket holds the
                 answer) is routed within 8 s, not at the next resync (30 s): the events
                 holdfast follows begin before its listing.
  traefik        a compose file written for Traefik (traefik.enable, Host(..) || Host(..),
                 Host(..) && PathPrefix(..), loadbalancer.server.port, network_mode: host),
                 brought up with docker-compose, is served unchanged; the group is the
                 compose service.
  redeploy       10 redeploys (new container, Docker says healthy, `docker stop` of the
                 old one) under keep-alive and closing load and a WebSocket on a service
                 that is not redeployed: no failed request, no request to a container
                 before it is healthy or after its SIGTERM; requests that raced the stop
                 (`late` in the app's log, retried by holdfast) are counted.
  crash          SIGKILL to one of two containers of a group under load: only requests in
                 flight on it may fail, none that started more than 100 ms after the kill.
  daemon-restart dockerd stopped and started again (--live-restore) under load: no failed
                 request, holdfast_docker_connected goes 0 then 1, routes are kept while
                 the daemon is away, a container started afterwards is discovered.
  address-reuse  a new container on a removed container's address starts with an empty
                 pool: its first request opens a new connection (its own count says 1) and
                 /status shows its container id with reused 0.
  memory         1,000 labelled containers started and removed (8 at a time): holdfast's
                 allocated bytes and /status's server count come back to where they were.
"""

import collections
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
DOKKU_TESTS = os.path.join(REPO, "integrations", "dokku", "tests")
sys.path.insert(0, os.path.join(REPO, "integrations", "drill"))

from clients import (Failure, Load, WebSocket, drill_arguments, free_port, log, now_ms,  # noqa: E402
                     read_events, request, run_drill, stop_process, wait_until)
from engine import Daemon, Events, HeldListing  # noqa: E402

APP_JS = os.path.join(REPO, "integrations", "drill", "app.js")
APP_IMAGE = "holdfast-docker-drill-app"
ORIGIN_IMAGE = "holdfast-docker-drill-origin"
# Docker's check of the app: every 200 ms; failures in the first 10 s do not count, so a
# warming-up app is `starting`, then `healthy`, never `unhealthy` first.
HEALTHCHECK = ('HEALTHCHECK --interval=200ms --timeout=2s --start-period=10s --retries=3 '
               'CMD curl -fsS -o /dev/null "http://127.0.0.1:$PORT/__health"')
PHASES = ("discovery", "listing-race", "traefik", "redeploy", "crash", "daemon-restart", "address-reuse", "memory")
# How soon the listing-race phase's container must be routed once the listing goes on:
# well under holdfast's resync (30 s), which finds it anyway.
RACE_LIMIT_SECONDS = 8
REDEPLOYS = 10
KEEPALIVE_CLIENTS = 6
CLOSING_CLIENTS = 3
MEMORY_CONTAINERS = 1000
MEMORY_PARALLEL = 8
# What 1,000 containers may leave behind in holdfast's allocated bytes (thread caches off,
# so the value is exact and flat from read to read): 256 KiB, about 260 bytes a container.
# Measured without a leak: +3.7 KiB after 320 containers joining and leaving groups that
# stay; a group removed and left in memory costs about 1 KiB, so 1 MiB would sit right
# at that leak's size.
MEMORY_TOLERANCE_BYTES = 256 << 10
# How long the memory phase waits once /status has no server left: the last requests'
# connections and tasks end within a second or two; a removed backend holds nothing
# while its drain timeout runs (the timer keeps only a flag).
DRAIN_SECONDS = 5


def route(host=None, port=None, path=None, group=None, **extra):
    """holdfast.* labels; extra keys name other holdfast labels (enable="false")."""
    labels = {"holdfast.host": host, "holdfast.port": port and str(port), "holdfast.path": path,
              "holdfast.group": group}
    labels.update({f"holdfast.{k}": v for k, v in extra.items()})
    return {k: v for k, v in labels.items() if v is not None}


def get(port, host, path="/"):
    """A request through holdfast that may fail: (status, body) or (None, error text)."""
    try:
        resp, body = request(host, path, port=port, timeout=5)
        return resp.status, body
    except (OSError, http.client.HTTPException) as e:
        return None, f"{type(e).__name__}: {e}".encode()


def brief(server):
    """The parts of a /status server entry the drill reports."""
    keys = ("server", "container", "opened", "requests", "reused", "active", "idle", "health")
    return {k: server.get(k) for k in keys} if server else server


def served_by(body):
    try:
        return json.loads(body)["instance"]
    except (ValueError, KeyError, TypeError):
        return None


class Holdfast:
    """holdfast --listen 127.0.0.1:PORT --docker --admin 127.0.0.1:APORT, its log in a
    file, reading the daemon at DOCKER_HOST."""

    def __init__(self, binary, root, name, env):
        self.port, self.admin = free_port(), free_port()
        self.log_path = os.path.join(root, f"holdfast-{name}.log")
        argv = [binary, "--listen", f"127.0.0.1:{self.port}", "--docker", "--admin", f"127.0.0.1:{self.admin}"]
        with open(self.log_path, "w") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        wait_until(lambda: self.proc.poll() is not None or self.answers(), "holdfast's admin port answers")
        if self.proc.poll() is not None:
            raise Failure(f"holdfast exited {self.proc.returncode}: {self.log_text()[-2000:]}")

    def answers(self):
        try:
            self.status()
            return True
        except (OSError, ValueError, http.client.HTTPException):
            return False

    def admin_get(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}{path}", timeout=5) as resp:
            return resp.read().decode()

    def status(self):
        return json.loads(self.admin_get("/status"))

    def metric(self, name):
        """The value of an unlabelled metric in /metrics (`name 1` or `name{} 1`), or None."""
        for line in self.admin_get("/metrics").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] in (name, name + "{}"):
                return float(parts[1])
        return None

    def servers(self):
        """(upstream name, server entry) for every server in /status."""
        return [(u.get("name"), s) for u in self.status().get("upstreams", []) for s in u.get("servers", [])]

    def server_of(self, container_id):
        for upstream, server in self.servers():
            if (server.get("container") or {}).get("id") == container_id:
                return upstream, server
        return None

    def log_text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def log_lines(self, pattern, limit=8):
        lines = [line for line in self.log_text().splitlines() if re.search(pattern, line)]
        return lines[-limit:]

    def stop(self):
        stop_process(self.proc, 10)


class App:
    """One container of the Node app and its event log (a JSON line per event, written to
    a folder mounted at the same path)."""

    def __init__(self, name, ident, port, events_path):
        self.name = name
        self.id = ident
        self.port = port
        self.events_path = events_path

    def events(self, kind=None):
        return read_events(self.events_path, kind)

    def first(self, kind):
        events = self.events(kind)
        return events[0]["t"] if events else None


class Drill:
    def __init__(self, args):
        self.args = args
        self.root = tempfile.mkdtemp(prefix="holdfast-docker-drill.")
        self.events_dir = os.path.join(self.root, "events")
        os.makedirs(self.events_dir)
        self.daemon = Daemon(os.path.join(DOKKU_TESTS, "start-docker"))
        self.engine = self.daemon.engine
        self.events = None
        self.hf = None
        self.problems = []
        self.passed = 0
        self.numbers = collections.OrderedDict()

    # --- reporting ---------------------------------------------------------------------

    def expect(self, ok, message):
        if ok:
            self.passed += 1
            log(f"PASS: {message}")
        else:
            self.problems.append(message)
            log(f"FAIL: {message}")
        return ok

    # --- setup ---------------------------------------------------------------------------

    def setup(self):
        took = self.daemon.start()
        log(f"dockerd of the drill answers after {took:.2f} s ({self.daemon.sock})")
        self.events = Events(self.engine)
        env = self.daemon.env
        make_image = os.path.join(DOKKU_TESTS, "make-image")
        base = f"{APP_IMAGE}-base"
        subprocess.run([make_image, base, shutil.which("node"), f"{APP_JS}:/app/app.js",
                        "/usr/bin/dash:/bin/sh", shutil.which("curl")], check=True, env=env)
        context = os.path.join(self.root, "image")
        os.makedirs(context)
        with open(os.path.join(context, "Dockerfile"), "w") as f:
            f.write(f"FROM {base}\n{HEALTHCHECK}\n")
        subprocess.run(["docker", "build", "-q", "-t", APP_IMAGE, context], check=True,
                       env=dict(env, DOCKER_BUILDKIT="0"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        subprocess.run([make_image, ORIGIN_IMAGE, self.args.origin], check=True, env=env)

    def holdfast(self, phase, env=None):
        self.stop_holdfast()
        self.hf = Holdfast(self.args.holdfast, self.root, phase, dict(self.daemon.env, **(env or {})))
        return self.hf

    def stop_holdfast(self):
        if self.hf is not None:
            self.hf.stop()
            self.hf = None

    def start_app(self, name, labels, health=True, healthy_after_ms=0, port=None):
        """`docker run -d --init --network host` of the Node app as `name` on 127.0.0.1:`port`
        (a free one unless given); `labels` may name `{port}`, filled in here."""
        port = port or free_port()
        labels = {k: v.replace("{port}", str(port)) for k, v in labels.items()}
        events = os.path.join(self.events_dir, f"{name}.jsonl")
        env = [f"PORT={port}", f"INSTANCE={name}", f"EVENTS={events}", "DROP_LATE=1",
               f"HEALTHY_AFTER_MS={healthy_after_ms}"]
        ident = self.engine.run(name, APP_IMAGE, ["node", "/app/app.js"], env=env, labels=labels,
                                health=health, binds=[f"{self.events_dir}:{self.events_dir}"])
        return App(name, ident, port, events)

    def probe(self, host, path="/", want=None, timeout=15, interval=0.02):
        """GETs through holdfast every `interval` s until a 200 (served by `want` when
        given); returns (time of that answer in ms, Counter of what came before)."""
        seen = collections.Counter()
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, body = get(self.hf.port, host, path)
            if status == 200 and (want is None or served_by(body) == want):
                return now_ms(), seen
            seen[status if status != 200 else f"200 from {served_by(body)}"] += 1
            time.sleep(interval)
        raise Failure(f"{host}{path} not served{' by ' + want if want else ''} through holdfast within "
                      f"{timeout} s (answers: {dict(seen)}); holdfast's log: {self.hf.log_lines('.')}")

    def requests_of(self, app):
        return [e["t"] for e in app.events("req")]

    # --- phases ------------------------------------------------------------------------

    def phase_discovery(self):
        hf = self.holdfast("discovery")
        hidden = self.start_app("drill-hidden", {}, health=False)
        disabled = self.start_app("drill-disabled", route("disabled.test", "{port}", enable="false"), health=False)

        log("a container with a HEALTHCHECK (503 for its first 1.5 s), probed every 20 ms")
        hc = self.start_app("drill-hc", route("hc.test", "{port}"), healthy_after_ms=1500)
        routed_ms, before = self.probe("hc.test")
        healthy = Events.t_ms(self.events.wait(hc.id, "health_status: healthy", timeout=5))
        app_healthy = hc.first("healthy")
        lag = routed_ms - healthy
        self.expect(0 <= lag <= 1000, f"drill-hc routed {lag:.0f} ms after Docker's healthy event "
                                      f"(limit 1000; answers before: {dict(before)})")
        reqs = self.requests_of(hc)
        early = [t for t in reqs if t < healthy]
        self.expect(app_healthy is not None and not early,
                    f"drill-hc got {len(early)} of {len(reqs)} requests before Docker's healthy event (its "
                    f"first 200 on /__health came {(app_healthy or 0) - hc.first('listen'):.0f} ms after it "
                    f"listened, Docker's event {healthy - (app_healthy or healthy):.0f} ms after that)")
        entry = hf.server_of(hc.id)
        self.expect(entry is not None and entry[1]["container"].get("name", "").lstrip("/") == "drill-hc"
                    and entry[1].get("server") == f"127.0.0.1:{hc.port}",
                    f"/status names drill-hc's container (id, name) at 127.0.0.1:{hc.port}: "
                    f"{entry and brief(entry[1])}")

        log("a container without a HEALTHCHECK")
        plain = self.start_app("drill-plain", route("plain.test", "{port}"), health=False)
        routed_ms, before = self.probe("plain.test")
        listen = plain.first("listen")
        self.expect(listen is not None and routed_ms - listen <= 3000,
                    f"drill-plain routed {routed_ms - (listen or 0):.0f} ms after it listened "
                    f"(limit 3000; answers before: {dict(before)})")

        log("holdfast.path=/api on the same host, another container")
        api = self.start_app("drill-api", route("plain.test", "{port}", path="/api"), health=False)
        self.probe("plain.test", "/api/x", want=api.name)
        status, body = get(hf.port, "plain.test", "/other")
        self.expect(status == 200 and served_by(body) == "drill-plain",
                    f"plain.test/other still goes to drill-plain: {status} {served_by(body)}")
        status, body = get(hf.port, "plain.test", "/api/y")
        self.expect(status == 200 and served_by(body) == "drill-api",
                    f"plain.test/api/y goes to drill-api: {status} {served_by(body)}")

        log("containers that do not opt in, or opt out, are never routed")
        for host in ("drill-hidden", "hidden.test", "disabled.test"):
            status, _ = get(hf.port, host)
            self.expect(status == 404, f"Host {host}: {status} (expected 404)")
        for app in (hidden, disabled):
            self.expect(not app.events("req") and hf.server_of(app.id) is None,
                        f"{app.name}: {len(app.events('req'))} requests, in /status: {hf.server_of(app.id)}")
        self.numbers["discovery"] = dict(healthy_to_routed_ms=round(lag), plain_listen_to_routed_ms=round(
            routed_ms - (listen or 0)))

    def phase_listing_race(self):
        # The race lasts microseconds on its own: the proxy widens it by holding the
        # daemon's answer to holdfast's first listing while a container starts.
        proxy = HeldListing(os.path.join(self.root, "engine.sock"), self.daemon.sock)
        try:
            hf = self.holdfast("listing-race", env={"DOCKER_HOST": f"unix://{proxy.path}"})
            wait_until(proxy.holding.is_set, "the proxy holds the answer to holdfast's first listing")
            log("holdfast's first listing is made and held; a container starts")
            app = self.start_app("drill-race", route("race.test", "{port}"), health=False)
            proxy.release()
            wait_until(lambda: proxy.went_on, "the listing's answer goes on")
            released_ms = proxy.went_on * 1000
            self.expect(not proxy.ran_out, f"drill-race started while the listing was held "
                                           f"({proxy.held_for:.2f} s; at most {proxy.hold_max:g})")
            try:
                routed_ms, before = self.probe("race.test", timeout=RACE_LIMIT_SECONDS)
            except Failure:
                self.expect(False, f"drill-race, which started after the daemon made holdfast's first "
                                   f"listing, is not routed within {RACE_LIMIT_SECONDS} s of holdfast reading "
                                   f"that listing: holdfast's events missed its start, and only the next "
                                   f"resync (30 s) would find it; holdfast's log: {hf.log_lines('docker')}")
                return
            listen = app.first("listen")
            self.expect(True, f"drill-race routed {routed_ms - released_ms:.0f} ms after holdfast read its "
                              f"listing, {routed_ms - (listen or 0):.0f} ms after it listened "
                              f"(limit {RACE_LIMIT_SECONDS} s; answers before: {dict(before)})")
            self.numbers["listing_race"] = dict(held_s=round(proxy.held_for, 2),
                                                routed_after_listing_ms=round(routed_ms - released_ms))
        finally:
            proxy.close()

    def phase_traefik(self):
        hf = self.holdfast("traefik")
        project = f"hfdrill{os.getpid()}"
        web_port, api_port = free_port(), free_port()
        compose = os.path.join(self.root, "docker-compose.yml")

        def service(name, port, labels):
            lines = [f"  {name}:", f"    image: {APP_IMAGE}", "    init: true", "    network_mode: host",
                     '    command: ["node", "/app/app.js"]', "    environment:",
                     f"      PORT: \"{port}\"", f"      INSTANCE: {name}",
                     f"      EVENTS: {self.events_dir}/traefik-{name}.jsonl",
                     f"    volumes: [\"{self.events_dir}:{self.events_dir}\"]", "    labels:",
                     '      holdfast-drill: "1"']
            lines += [f"      {k}: \"{v}\"" for k, v in labels.items()]
            return "\n".join(lines)

        with open(compose, "w") as f:
            f.write("\n".join([
                'version: "2.4"', "services:",
                service("web", web_port, {
                    "traefik.enable": "true",
                    "traefik.http.routers.web.rule": "Host(`a.test`) || Host(`b.test`)",
                    "traefik.http.services.web.loadbalancer.server.port": web_port}),
                service("api", api_port, {
                    "traefik.enable": "true",
                    "traefik.http.routers.api.rule": "Host(`c.test`) && PathPrefix(`/api`)",
                    "traefik.http.services.api.loadbalancer.server.port": api_port}),
            ]) + "\n")
        cmd = ["docker-compose", "-p", project, "-f", compose]
        up = subprocess.run([*cmd, "up", "-d"], env=self.daemon.env, capture_output=True, text=True, timeout=120)
        if up.returncode != 0:
            raise Failure(f"docker-compose up failed: {up.stderr.strip()[-1000:]}")
        try:
            # Both services' containers start together but join as each becomes
            # healthy: the checks below begin once both are routed.
            self.probe("a.test", want="web")
            self.probe("c.test", path="/api/x", want="api")
            for host, path, want in (("b.test", "/", "web"), ("c.test", "/api/x", "api"), ("a.test", "/api/x", "web")):
                status, body = get(hf.port, host, path)
                self.expect(status == 200 and served_by(body) == want,
                            f"{host}{path} -> {want}: {status} {served_by(body)}")
            status, _ = get(hf.port, "c.test", "/other")
            self.expect(status == 404, f"c.test/other (outside PathPrefix(`/api`)): {status} (expected 404)")
            ids = {}
            for name in ("web", "api"):
                ps = subprocess.run([*cmd, "ps", "-q", name], env=self.daemon.env, capture_output=True, text=True)
                ids[name] = ps.stdout.strip()
            for name, ident in ids.items():
                entry = hf.server_of(ident)
                upstream = entry and entry[0]
                self.expect(upstream is not None and re.search(rf"(^|[^A-Za-z0-9_-]){name}$", upstream),
                            f"the compose service {name}'s container is in an upstream named for the "
                            f"service: {upstream!r}")
            self.numbers["traefik"] = dict(upstreams=sorted({u for u, _ in hf.servers()}))
        finally:
            subprocess.run([*cmd, "down", "-t", "5"], env=self.daemon.env, capture_output=True, timeout=120)

    def phase_redeploy(self):
        hf = self.holdfast("redeploy")
        labels = route("deploy.test", "{port}", group="deploy")
        ws_app = self.start_app("drill-ws", route("ws.test", "{port}", group="ws"))
        first = self.start_app("drill-deploy-0", labels, healthy_after_ms=500)
        apps = [first]
        self.probe("ws.test", timeout=20)
        self.probe("deploy.test", timeout=20)
        known = {first.name}
        load = Load(hf.port, "deploy.test", known, KEEPALIVE_CLIENTS, CLOSING_CLIENTS, max_seconds=120)
        ws = WebSocket(hf.port, "ws.test", interval=0.1)
        load.start()
        started = time.time()
        log(f"{REDEPLOYS} redeploys under load ({KEEPALIVE_CLIENTS} keep-alive, {CLOSING_CLIENTS} closing "
            "clients, a WebSocket to drill-ws echoing every 100 ms)")
        try:
            for n in range(1, REDEPLOYS + 1):
                new_name = f"drill-deploy-{n}"
                known.add(new_name)
                new = self.start_app(new_name, labels, healthy_after_ms=500)
                apps.append(new)
                self.events.wait(new.id, "health_status: healthy")
                self.engine.stop(apps[-2].id)
                time.sleep(0.3)
            time.sleep(1.0)
        finally:
            load.finish()
        seconds = time.time() - started
        self.expect(ws.error is None and time.time() - ws.last_echo < 1,
                    f"the WebSocket to {ws.instance} still echoes after {2 * REDEPLOYS} route table changes: "
                    f"{ws.echoes} echoes, {ws.error or 'no error'}")
        ws.close()
        for f in load.failures[:10]:
            log(f"  failed request: {f}")
        self.expect(not load.failures, f"{len(load.failures)} of {load.total()} requests failed during "
                                       f"{REDEPLOYS} redeploys ({seconds:.1f} s)")
        late_total = 0
        rows = []
        for app in apps:
            reqs = app.events("req")
            late = app.events("late")
            late_total += len(late)
            sigterm = app.first("sigterm")
            healthy = self.events.find(app.id, "health_status: healthy")
            early = [e for e in reqs if healthy is None or e["t"] < Events.t_ms(healthy)]
            self.expect(not early, f"{app.name}: {len(early)} of {len(reqs)} requests before Docker's healthy event")
            if sigterm is not None:
                after = [e for e in reqs if e["t"] > sigterm]
                self.expect(not after, f"{app.name}: {len(after)} requests served after its SIGTERM")
            conns = len({e.get("remote") for e in reqs + late})
            rows.append((app.name, len(reqs), conns, len(late)))
        log(f"requests that raced a stop signal (the app's `late`, retried by holdfast): {late_total}")
        for name, reqs, conns, late in rows:
            log(f"  {name:16} {reqs:6} requests on {conns:3} upstream connections, {late} late")
        self.numbers["redeploy"] = dict(requests=load.total(), failed=len(load.failures), late=late_total,
                                        ws_echoes=ws.echoes, seconds=round(seconds, 1),
                                        per_container=rows)
        ws_reqs = ws_app.events("ws")
        self.expect(len(ws_reqs) == 1, f"drill-ws saw {len(ws_reqs)} WebSocket upgrades (1: no reconnect)")

    def phase_crash(self):
        hf = self.holdfast("crash")
        labels = route("crash.test", "{port}", group="crash")
        pair = [self.start_app("drill-crash-a", labels), self.start_app("drill-crash-b", labels)]
        self.probe("crash.test", timeout=20)
        wait_until(lambda: all((hf.server_of(app.id) or ("", {}))[1].get("health") == "healthy" for app in pair),
                   "both containers of the group healthy in /status", timeout=20)
        load = Load(hf.port, "crash.test", {app.name for app in pair}, KEEPALIVE_CLIENTS, CLOSING_CLIENTS,
                    max_delay_ms=40, max_seconds=60)
        load_started = now_ms()
        load.start()
        try:
            time.sleep(2.0)
            # The one serving more of the load is killed (the balancer may favour one).
            a, b = sorted(pair, key=lambda app: -len(app.events("req")))
            killed_at = now_ms()
            self.engine.kill(a.id)
            time.sleep(2.5)
        finally:
            load.finish()
        log(f"killed {a.name} ({len(a.events('req'))} requests); {b.name} had "
            f"{len([e for e in b.events('req') if e['t'] < killed_at])} before the kill")
        arrived = len([e for e in a.events("req") if e["t"] >= load_started])  # not the probes'
        answered = load.per_instance.get(a.name, 0)
        in_flight = arrived - answered
        failed = [x for x in load.exchanges if not x.ok]
        after = [x for x in failed if x.start_ms > killed_at + 100]
        for x in failed[:10]:
            log(f"  failed request started {x.start_ms - killed_at:+.0f} ms from the kill: {x.detail}")
        self.expect(len(failed) <= in_flight, f"{len(failed)} requests failed; {in_flight} were in flight on "
                                              f"{a.name} when it was killed ({arrived} reached it, "
                                              f"{answered} answered)")
        self.expect(not after, f"{len(after)} requests that started more than 100 ms after the kill failed "
                               f"(of {sum(1 for x in load.exchanges if x.start_ms > killed_at + 100)})")
        self.numbers["crash"] = dict(requests=load.total(), failed=len(failed), in_flight=in_flight,
                                     retried=in_flight - len(failed))

    def phase_daemon_restart(self):
        hf = self.holdfast("daemon-restart")
        app = self.start_app("drill-restart", route("restart.test", "{port}"))
        self.probe("restart.test", timeout=20)
        wait_until(lambda: hf.metric("holdfast_docker_connected") == 1, "holdfast_docker_connected is 1")
        seen = []
        watching = threading.Event()

        def watch():
            while not watching.is_set():
                try:
                    value = hf.metric("holdfast_docker_connected")
                except OSError:
                    value = None
                if not seen or seen[-1] != value:
                    seen.append(value)
                watching.wait(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        load = Load(hf.port, "restart.test", {app.name}, KEEPALIVE_CLIENTS, CLOSING_CLIENTS, max_seconds=90)
        load.start()
        try:
            time.sleep(1.0)
            log("stopping dockerd (SIGTERM; --live-restore keeps the containers)")
            stopped = time.time()
            self.daemon.stop()
            wait_until(lambda: 0 in seen, "holdfast_docker_connected goes to 0 with dockerd stopped", timeout=15)
            log(f"  holdfast_docker_connected 0 after {time.time() - stopped:.2f} s")
            time.sleep(1.0)
            status, body = get(hf.port, "restart.test")
            self.expect(status == 200 and served_by(body) == app.name,
                        f"with dockerd down the route is kept: {status} {served_by(body)}")
            took = self.daemon.start()
            log(f"dockerd answers again after {took:.2f} s")
            wait_until(lambda: seen[-1] == 1, "holdfast_docker_connected back to 1", timeout=30)
            log(f"  holdfast_docker_connected 1 again {time.time() - stopped:.2f} s after the stop")
            later = self.start_app("drill-restart-later", route("later.test", "{port}"))
            routed_ms, _ = self.probe("later.test", timeout=20)
            self.expect(True, f"a container started after the restart is routed "
                              f"{routed_ms - later.first('listen'):.0f} ms after it listened")
            time.sleep(0.5)
        finally:
            load.finish()
            watching.set()
            watcher.join(timeout=5)
        self.expect(seen[:1] == [1] and 0 in seen and seen[-1] == 1,
                    f"holdfast_docker_connected went {' -> '.join(str(v) for v in seen)}")
        for f in load.failures[:10]:
            log(f"  failed request: {f}")
        self.expect(not load.failures, f"{len(load.failures)} of {load.total()} requests failed across the "
                                       "daemon restart")
        self.numbers["daemon_restart"] = dict(requests=load.total(), failed=len(load.failures),
                                              connected=seen)

    def phase_address_reuse(self):
        hf = self.holdfast("address-reuse")
        port = free_port()
        labels = route("reuse.test", "{port}", group="reuse")
        a = self.start_app("drill-reuse-a", labels, health=False, port=port)
        self.probe("reuse.test", want=a.name, timeout=20)
        conn = http.client.HTTPConnection("127.0.0.1", hf.port, timeout=5)
        for _ in range(5):
            conn.request("GET", "/", headers={"Host": "reuse.test"})
            conn.getresponse().read()
        conn.close()
        entry_a = hf.server_of(a.id)
        log(f"drill-reuse-a in /status: {entry_a and brief(entry_a[1])}")
        self.engine.remove(a.id)
        wait_until(lambda: hf.server_of(a.id) is None, "drill-reuse-a leaves /status")
        b = self.start_app("drill-reuse-b", labels, health=False, port=port)
        wait_until(lambda: b.first("listen"), "drill-reuse-b listens")
        entry = wait_until(lambda: hf.server_of(b.id), "drill-reuse-b in /status")
        before = b.events("conn")
        status, body = get(hf.port, "reuse.test")
        self.expect(status == 200 and served_by(body) == b.name,
                    f"the first request after the swap reaches drill-reuse-b: {status} {served_by(body)}")
        reqs = b.events("req")
        carrying = {e.get("remote") for e in reqs}
        self.expect(len(reqs) == 1 and len(carrying) == 1,
                    f"drill-reuse-b: {len(reqs)} request on {len(carrying)} connection "
                    f"(it accepted {len(b.events('conn'))} in all, {len(before)} before the request)")
        upstream, entry = hf.server_of(b.id)
        self.expect(entry.get("server") == f"127.0.0.1:{port}" and entry.get("requests") == 1
                    and entry.get("reused") == 0 and entry.get("opened", 0) >= 1,
                    f"/status for drill-reuse-b (same address as drill-reuse-a) after its first request: "
                    f"{json.dumps(brief(entry))}")
        self.numbers["address_reuse"] = dict(a=entry_a and brief(entry_a[1]), b=brief(entry))

    def phase_memory(self):
        # Without thread caches, jemalloc's allocated bytes are what holdfast holds: with
        # them, freed objects waiting in a thread's cache count as allocated, several MiB
        # that drain only as that thread allocates again (measured: 6.4 MiB at start with
        # caches, 0.2 MiB without; with caches the value drifts by MiB over 45 s idle).
        hf = self.holdfast("memory", env={"_RJEM_MALLOC_CONF": "tcache:false"})
        metric = "holdfast_memory_allocated_bytes"
        ports = [free_port() for _ in range(MEMORY_PARALLEL)]
        counter = iter(range(MEMORY_CONTAINERS + 10 * MEMORY_PARALLEL))
        lock = threading.Lock()
        errors = []
        routed = collections.Counter()

        def cycle(worker, n, check):
            host = f"mem-{worker}.test"
            ident = self.engine.run(f"drill-mem-{n}", ORIGIN_IMAGE,
                                    ["bench-origin", "--listen", f"127.0.0.1:{ports[worker]}"],
                                    labels=route(host, ports[worker], group=f"mem-{worker}"), health=True,
                                    init=False)
            if check:
                self.probe(host, timeout=10, interval=0.01)
                routed[worker] += 1
            self.engine.remove(ident)

        def worker_loop(worker, count, check_every):
            for i in range(count):
                with lock:
                    n = next(counter)
                try:
                    cycle(worker, n, check_every and i % check_every == 0)
                except (Failure, OSError, http.client.HTTPException) as e:
                    errors.append(f"drill-mem-{n}: {e}")

        def run(per_worker, check_every):
            threads = [threading.Thread(target=worker_loop, args=(w, per_worker, check_every))
                       for w in range(MEMORY_PARALLEL)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        def settle():
            """Once /status has no server left, waits DRAIN_SECONDS for the last
            connections and tasks to end and returns 5 reads 0.5 s apart."""
            wait_until(lambda: len(hf.servers()) == 0, "/status has no server left", timeout=60, interval=0.2)
            first = hf.metric(metric)
            time.sleep(DRAIN_SECONDS)
            samples = []
            for _ in range(5):
                samples.append(hf.metric(metric))
                time.sleep(0.5)
            log(f"  {int(first)} bytes when /status had no server left, {int(min(samples))} "
                f"{DRAIN_SECONDS} s later")
            return samples

        fresh = hf.metric(metric)
        if fresh is None:
            raise Failure(f"/metrics has no {metric}")
        servers_before = len(hf.servers())
        log(f"warm-up: {2 * MEMORY_PARALLEL} containers, each routed once")
        run(2, 1)
        start = settle()
        log(f"{metric}: {int(fresh)} at holdfast's start, after the warm-up {[int(s) for s in start]}")
        log(f"{MEMORY_CONTAINERS} containers started and removed, {MEMORY_PARALLEL} at a time "
            f"(every 10th per worker routed through holdfast before its removal)")
        began = time.time()
        run(MEMORY_CONTAINERS // MEMORY_PARALLEL, 10)
        took = time.time() - began
        end = settle()
        log(f"{metric} after {MEMORY_CONTAINERS} containers ({took:.0f} s): {[int(s) for s in end]}")
        for e in errors[:5]:
            log(f"  error: {e}")
        self.expect(not errors, f"{len(errors)} of the {MEMORY_CONTAINERS} container cycles failed"
                                + "".join(f"\n    {e}" for e in errors[:3]))
        servers_after = len(hf.servers())
        self.expect(servers_after == servers_before,
                    f"servers in /status: {servers_before} before, {servers_after} after")
        grew = min(end) - min(start)
        self.expect(grew <= MEMORY_TOLERANCE_BYTES,
                    f"allocated bytes {min(start) / 1048576:.2f} MiB -> {min(end) / 1048576:.2f} MiB after "
                    f"{MEMORY_CONTAINERS} containers ({grew / 1024:+.0f} KiB, {grew / MEMORY_CONTAINERS:+.0f} bytes "
                    f"a container; tolerance {MEMORY_TOLERANCE_BYTES >> 10} KiB; smallest of 5 reads each)")
        self.numbers["memory"] = dict(seconds=round(took), start_bytes=int(min(start)), end_bytes=int(min(end)),
                                      routed=sum(routed.values()))

    # --- the run ---------------------------------------------------------------------------

    def run(self):
        started = time.time()
        self.setup()
        left = self.engine.remove_drill_containers()
        if left:
            log(f"removed {left} containers left by an earlier run")
        wanted = self.args.phase or PHASES
        for name in PHASES:
            if name not in wanted:
                continue
            log(f"== phase {name}")
            phase_started = time.time()
            try:
                getattr(self, f"phase_{name.replace('-', '_')}")()
            except Failure as e:
                self.expect(False, f"{name}: {e}")
                if self.hf:
                    for line in self.hf.log_lines(r"WARN|ERROR|docker", 10):
                        log(f"  holdfast: {line}")
            finally:
                self.stop_holdfast()
                if not self.engine.ping():  # a phase that failed with the daemon stopped
                    self.daemon.start()
                removed = self.engine.remove_drill_containers()
                self.numbers[f"{name}_seconds"] = round(time.time() - phase_started, 1)
                log(f"phase {name}: {self.numbers[f'{name}_seconds']} s, {removed} containers removed")
        self.numbers["duration_seconds"] = round(time.time() - started, 1)

    def cleanup(self):
        self.stop_holdfast()
        if self.events:
            self.events.close()
        self.daemon.destroy()
        if not self.problems and not self.args.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def summary(self):
        print("\n== Docker discovery drill summary ==")
        print(f"temp dir: {self.root}")
        for key, value in self.numbers.items():
            print(f"  {key}: {value}")
        if self.problems:
            print(f"FAILED: {len(self.problems)} problem(s), {self.passed} checks passed:")
            for p in self.problems:
                print(f"  - {p}")
        else:
            print(f"PASSED: {self.passed} checks")


def main():
    parser = drill_arguments(__doc__, PHASES)
    parser.add_argument("--origin", required=True, help="the bench-origin binary (the memory phase's image)")
    args = parser.parse_args()
    return run_drill(Drill(args))


if __name__ == "__main__":
    sys.exit(main())
