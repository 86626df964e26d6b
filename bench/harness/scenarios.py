"""The scenarios: how each one starts a contender, warms it up, drives load through it, and
what it measures around the load window.

A measured window samples, just before and just after the load: the contender's CPU time
(utime and stime of all its processes, and their threads' schedstat as a cross-check), the
origin's CPU time, the origin's counters (connections accepted,
requests), per-core busy time from /proc/stat and the clock. During the window a thread
samples the contender's RSS; right after it the harness reads VmRSS and VmHWM and counts the
TIME_WAIT sockets the window left. Each scenario returns one run record (a dict).
"""

import http.client
import math
import re
import socket
import ssl
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from . import contenders, load, netns, origins, procs, sockets, threads_reuse


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    origin: str  # "rust", "rust-tls" (bench-origin over HTTPS) or "node"
    needs: tuple  # programs the scenario needs besides the contender's own
    clients: int = 64  # wrk's connections
    timeout_s: int | None = None  # wrk's --timeout, where the scenario counts timeouts
    # The contenders it runs, by name; None: every contender but those that only run where
    # named (see Contender.only_where_named).
    contenders: tuple | None = None
    # HTTPS: None; "client" (clients speak TLS to the proxy, which forwards to the cleartext
    # origin; `direct` goes to the HTTPS origin); "origin" (clients speak cleartext, the
    # origin HTTPS).
    tls: str | None = None
    # HTTP/2: None; "client" (clients speak HTTP/2 with prior knowledge, h2c, to the
    # proxy, which forwards over HTTP/1.1); "both" (h2c on both sides, the origin in h2c
    # mode); "grpc" (gRPC calls over h2c on both sides, to the origin's gRPC echo);
    # "client-tls" (with tls="client": clients speak HTTP/2 over TLS, chosen by ALPN, to
    # the proxy, which forwards over HTTP/1.1). `direct` goes to the h2c origin in the
    # cleartext ones.
    h2: str | None = None
    # h2load's (or bench-load grpc's) concurrent streams per client connection (HTTP/2
    # scenarios).
    streams: int = 1
    # gRPC: the messages each call sends (1: unary calls; more: bidirectional streams).
    messages: int = 1
    # The contenders that make "best peer" here; None: contenders.PEERS.
    peers: tuple | None = None
    # The origin's path the clients ask for (the Node origin serves "/" whatever it is).
    path: str = "/tiny"
    # Latency at a share of each contender's own capacity: a wrk probe measures its
    # requests/s first, then bench-load rate runs at round(share x that) (see `_latency`).
    capacity_share: float | None = None
    # Runs per contender in a round, interleaved across the contenders (A B C A B C ...),
    # each a fresh start with the window split evenly among them (`slice_window_s`).
    slices: int = 1

    @property
    def many_clients(self):
        """More clients than any pool here keeps idle: upstream connections opened and
        held open are the point, so they are also sampled during the window."""
        return self.clients > 64


# The high-concurrency scenarios compare holdfast with nginx as its current version sets
# itself up (keepalive 32 by default), nginx tuned, HAProxy and no proxy at all.
MANY_CLIENTS = ("direct", "nginx-keepalive32", "nginx-tuned", "haproxy", "holdfast")
# Silent clients cost a proxy the same whatever it does upstream, so one nginx is enough.
PROXIES_CLIENT_SIDE = ("nginx-tuned", "haproxy", "holdfast")
# HTTPS: the proxies that have a TLS config, and no proxy at all (the load side's ceiling,
# against the HTTPS origin); to an HTTPS origin, nginx without reuse as the reference line.
HTTPS_CLIENTS = ("direct", "nginx-tuned", "haproxy", "holdfast")
HTTPS_ORIGIN = ("nginx-tuned", "nginx-no-reuse", "haproxy", "holdfast")
# HTTP/2: the proxies with an h2c listener, and no proxy at all (h2load straight to the
# h2c origin, the load side's ceiling). To an h2c origin nginx runs as nginx-grpc
# (`grpc_pass`), its only HTTP/2 upstream; h2-floor, the h2 crate's own relay, and
# h2-engine-floor, the same relay on holdfast-h2, run there as floors (not peers).
H2_TO_H1 = ("direct", "nginx-tuned", "haproxy", "holdfast")
H2_TO_H2C = ("direct", "nginx-grpc", "haproxy", "holdfast", "h2-floor", "h2-engine-floor")
# The HTTP/1.1 scenarios floor runs in: every contender that runs wherever it is not named
# (contenders.Contender.only_where_named), then floor, the smallest HTTP/1.1 relay, as
# holdfast's floor (not a peer).
WITH_FLOOR = ("direct", "nginx-default", "nginx-recipe", "nginx-tuned", "haproxy", "holdfast",
              "floor")
# h2load's client connections and streams per connection: 64 requests in flight, as the
# 64 connections of the HTTP/1.1 scenarios.
H2_CONNECTIONS = 4
H2_STREAMS = 16
# gRPC: the proxies with a gRPC config (nginx-tuned's is grpc_pass, its gRPC proxy) and no
# proxy at all (bench-load grpc straight to the origin's gRPC echo). The same clients as
# h2load's: 4 connections with 16 calls in flight each.
GRPC = ("direct", "nginx-tuned", "haproxy", "holdfast")
# Bytes of each gRPC message after its 5-byte prefix: a protobuf message of 100 bytes.
GRPC_PAYLOAD_BYTES = 100
# Messages per call in grpc-streaming, each echoed before the next goes out.
GRPC_STREAM_MESSAGES = 100
# The methods' paths (the origin echoes any gRPC call, whatever its path).
GRPC_PATHS = {"grpc-unary": "/holdfast.bench.Echo/Unary",
              "grpc-streaming": "/holdfast.bench.Echo/Stream"}
# HTTP/2 over TLS to an HTTP/1.1 origin: the proxies with a TLS listener that offers h2.
# No `direct`: the HTTPS origin speaks HTTP/1.1 only.
HTTPS_H2 = ("nginx-tuned", "haproxy", "holdfast")
# Latency under load: the proxies compared elsewhere with 64 keep-alive clients, and no
# proxy at all (the load side's own latency).
LATENCY = ("direct", "nginx-tuned", "haproxy", "holdfast")
# The share of the lowest proxy capacity the latency scenarios run at: busy, with room
# left, where tail latency says how a proxy queues rather than that it is saturated.
LATENCY_SHARE = 0.7
# Slices per contender and round in the latency scenarios. This machine's speed drifts by
# up to a third over seconds (the same closed-loop wrk run gave 20k to 30k req/s from one
# second to the next), and at 70% of a capacity probed in a fast second a slow stretch
# saturates whichever proxy is running then, whose tail then grows for as long as the
# stretch lasts. Short interleaved slices spread such stretches over every contender, and
# the medians over rounds x slices say how a proxy usually queues.
LATENCY_SLICES = 3


SCENARIOS = [
    Scenario("keepalive-tiny", "64 keep-alive clients (wrk), 100-byte responses", "rust", ("wrk",),
             contenders=WITH_FLOOR),
    Scenario("keepalive-50k", "64 keep-alive clients (wrk), 50 kB responses", "rust", ("wrk",),
             path="/50k", contenders=WITH_FLOOR),
    Scenario("closing-tiny", "64 clients, `Connection: close` on every request (wrk), 100 B",
             "rust", ("wrk",), contenders=WITH_FLOOR),
    Scenario("rate-latency", "a fixed rate over 64 keep-alive connections (bench-load rate)",
             "rust", (), contenders=WITH_FLOOR),
    Scenario("idle-clients", "10,000 idle client connections held open while 64 keep-alive "
             "clients run (wrk), 100 B", "rust", ("wrk",)),
    Scenario("silent-clients", "10,000 client connections that never send a byte "
             "(bench-load hold --silent): proxy RSS before, while they are held and after "
             "they all closed", "rust", (), contenders=PROXIES_CLIENT_SIDE),
    Scenario("node-50k", "64 keep-alive clients (wrk) against a Node 20 origin, 50 kB",
             "node", ("wrk", "node")),
    Scenario("c500", "500 keep-alive clients (wrk --timeout 2s) against the Node origin, 50 kB",
             "node", ("wrk", "node"), clients=500, timeout_s=2, contenders=MANY_CLIENTS),
    Scenario("c1000", "1,000 keep-alive clients (wrk --timeout 2s) against the Node origin, "
             "50 kB", "node", ("wrk", "node"), clients=1000, timeout_s=2,
             contenders=MANY_CLIENTS),
    Scenario("port-exhaustion", "network namespace with 1000 local ports and tcp_tw_reuse=0: "
             "64 keep-alive + 64 closing clients (bench-load mixed)", "rust", ("ip",)),
    Scenario("c500-netns", "c500 in a network namespace with 1000 local ports and "
             "tcp_tw_reuse=0, from a cold start: 500 keep-alive clients (wrk --timeout 2s), "
             "Node origin, 50 kB", "node", ("wrk", "node", "ip"), clients=500, timeout_s=2,
             contenders=("direct", "nginx-default") + MANY_CLIENTS[1:]),
    Scenario("pool-memory", "holdfast only: memory per idle pooled upstream connection, "
             "10,000 idle (fewer if the open-file limit is low)", "rust", ()),
    Scenario("https-keepalive-tiny", "64 keep-alive HTTPS clients (wrk over TLS 1.3), 100 B "
             "responses; the proxies forward to the cleartext origin over pooled "
             "connections, direct goes to the HTTPS origin", "rust", ("wrk", "openssl"),
             contenders=HTTPS_CLIENTS, tls="client"),
    Scenario("https-handshakes", "64 HTTPS clients, a new TLS connection and handshake per "
             "request (bench-load handshakes, `Connection: close`): one window of full "
             "handshakes, then one in which every client resumes its last session",
             "rust", ("openssl",), contenders=HTTPS_CLIENTS, tls="client"),
    Scenario("https-origin", "64 keep-alive cleartext clients (wrk) through the proxy to an "
             "HTTPS origin (bench-origin in TLS mode), 100 B responses; the origin counts "
             "the TLS handshakes", "rust-tls", ("wrk", "openssl"), contenders=HTTPS_ORIGIN,
             tls="origin"),
    Scenario("h2-to-h1", f"HTTP/2 clients with prior knowledge (h2load -c{H2_CONNECTIONS} "
             f"-m{H2_STREAMS}: {H2_CONNECTIONS * H2_STREAMS} streams in flight over "
             f"{H2_CONNECTIONS} connections) through the proxy to the HTTP/1.1 origin, 100 B "
             "responses; direct goes to the h2c origin", "rust", ("h2load",),
             clients=H2_CONNECTIONS, streams=H2_STREAMS, contenders=H2_TO_H1, h2="client"),
    Scenario("h2-to-h2c", f"the same HTTP/2 clients (h2load -c{H2_CONNECTIONS} "
             f"-m{H2_STREAMS}) through the proxy to an h2c origin (bench-origin --h2c, 100 "
             "concurrent streams per connection), 100 B responses; nginx runs as "
             "nginx-grpc (grpc_pass); h2-floor, the smallest relay on the h2 crate, and "
             "h2-engine-floor, the same on holdfast's own engine, run as floors, not peers", "rust-h2c", ("h2load",), clients=H2_CONNECTIONS,
             streams=H2_STREAMS, contenders=H2_TO_H2C, h2="both",
             peers=("nginx-grpc", "haproxy")),
    Scenario("grpc-unary", f"unary gRPC calls over h2c (bench-load grpc, {H2_CONNECTIONS} "
             f"connections x {H2_STREAMS} calls in flight), each a {GRPC_PAYLOAD_BYTES}-byte "
             "protobuf message in gRPC's length-prefixed framing, through the proxy to the "
             "h2c origin's gRPC echo, which answers the same bytes and `grpc-status: 0`",
             "rust-h2c", (), clients=H2_CONNECTIONS, streams=H2_STREAMS, contenders=GRPC,
             h2="grpc"),
    Scenario("grpc-streaming", f"bidirectional gRPC streams over h2c (bench-load grpc, "
             f"{H2_CONNECTIONS} connections x {H2_STREAMS} streams), each sending "
             f"{GRPC_STREAM_MESSAGES} messages of {GRPC_PAYLOAD_BYTES} bytes, one at a time "
             "as the origin's echo of the one before comes back, then `grpc-status: 0`",
             "rust-h2c", (), clients=H2_CONNECTIONS, streams=H2_STREAMS, contenders=GRPC,
             h2="grpc", messages=GRPC_STREAM_MESSAGES),
    Scenario("https-h2-to-h1", f"HTTP/2 clients over TLS, h2 chosen by ALPN as a browser's "
             f"(h2load -c{H2_CONNECTIONS} -m{H2_STREAMS}, TLS 1.3), through the proxy to the "
             "HTTP/1.1 origin, 100 B responses", "rust", ("h2load", "openssl"),
             clients=H2_CONNECTIONS, streams=H2_STREAMS, contenders=HTTPS_H2, tls="client",
             h2="client-tls"),
    Scenario("latency-tiny", f"latency at one fixed rate, {LATENCY_SHARE:.0%} of the lowest "
             "capacity among the proxies, 100 B responses: a capacity probe of each proxy "
             "(wrk, 64 keep-alive clients) bounded by an open-loop calibration, then for "
             f"every contender a fixed rate of round({LATENCY_SHARE:g} x the lowest capacity) "
             f"over 64 keep-alive connections (bench-load rate), in {LATENCY_SLICES} "
             "interleaved slices",
             "rust", ("wrk",), contenders=LATENCY, capacity_share=LATENCY_SHARE,
             slices=LATENCY_SLICES),
    Scenario("latency-50k", f"latency-tiny with 50 kB responses: the probes, then "
             f"round({LATENCY_SHARE:g} x the lowest) over 64 keep-alive connections, in "
             f"{LATENCY_SLICES} interleaved slices", "rust", ("wrk",), contenders=LATENCY,
             path="/50k", capacity_share=LATENCY_SHARE, slices=LATENCY_SLICES),
    # its runner, configs, table and targets: threads_reuse.py
    Scenario(threads_reuse.NAME, threads_reuse.ABOUT, "rust", (),
             contenders=threads_reuse.CONTENDERS),
]

BY_NAME = {s.name: s for s in SCENARIOS}

# The HTTPS scenarios; their results go to results/https.json (see cli.py).
HTTPS = ("https-keepalive-tiny", "https-handshakes", "https-origin")

# The HTTP/2 scenarios; their results go to results/h2.json (see cli.py).
H2 = ("h2-to-h1", "h2-to-h2c")

# The gRPC scenarios and HTTP/2 over TLS; their results go to results/grpc-h2-tls.json
# (see cli.py), apart from h2.json, so either group's run rewrites its own file only.
GRPC_H2_TLS = ("grpc-unary", "grpc-streaming", "https-h2-to-h1")

# The performance scenarios; their results go to results/perf.json (see cli.py). A
# scenario joins the group, its results file and BENCHMARKS.md's Performance section by
# its name here.
PERF = ("latency-tiny", "latency-50k", threads_reuse.NAME)

# latency-tiny is the one performance scenario in it: the probe and the rate run are the
# code latency-50k shares, and it adds about 25 s. The gRPC and HTTP/2-over-TLS scenarios
# add about 40 s (11 short runs).
SMOKE = (("keepalive-tiny", "closing-tiny", "rate-latency", "latency-tiny") + HTTPS + H2
         + GRPC_H2_TLS)

# Scenarios that measure memory, not requests: no requests/s, CPU per request or errors.
NO_REQUESTS = ("pool-memory", "silent-clients")
# Scenarios run inside a network namespace of their own (see netns.py).
IN_NAMESPACE = ("port-exhaustion", "c500-netns")


def contenders_for(scenario, plan_contenders, *, holdfast_tls=True, holdfast_h2=True):
    """The contenders of `plan_contenders` that run `scenario`, in their order; holdfast
    sits out the HTTPS scenarios when its binary has no TLS flags (`holdfast_tls`) and the
    HTTP/2 scenarios when it has no HTTP/2 flags (`holdfast_h2`), and a proxy without a
    config for an HTTP/2 scenario's side sits it out (`sitting_out` says who and why)."""
    if scenario.tls is not None and not holdfast_tls:
        plan_contenders = [c for c in plan_contenders if c.name != "holdfast"]
    if scenario.h2 is not None:
        plan_contenders = [c for c in plan_contenders if c.runs_h2(scenario.h2)
                           and (holdfast_h2 or c.name != "holdfast")]
    if scenario.name == "pool-memory":
        return [c for c in plan_contenders if c.name == "holdfast"]
    if scenario.contenders is not None:
        return [c for c in plan_contenders if c.name in scenario.contenders]
    return [c for c in plan_contenders if not c.only_where_named]


def sitting_out(scenario, plan_contenders, *, holdfast_h2=True):
    """[(contender, reason)] of the scenario's contenders in `plan_contenders` that cannot
    run it: an HTTP/2 scenario a proxy has no config for, or a holdfast without `--h2c`."""
    if scenario.h2 is None:
        return []
    named = [c for c in plan_contenders
             if (c.name in scenario.contenders if scenario.contenders is not None
                 else not c.only_where_named)]
    out = []
    for c in named:
        if c.name == "holdfast" and not holdfast_h2:
            out.append((c.name, "this holdfast binary has no --h2c"))
        elif not c.runs_h2(scenario.h2):
            out.append((c.name, "no config for " + H2_SIDE_WORDS[scenario.h2]))
    return out


# What a contender without a config for an HTTP/2 side lacks, in words.
H2_SIDE_WORDS = {"client": "HTTP/2 clients", "both": "an h2c origin",
                 "grpc": "gRPC to an h2c origin", "client-tls": "HTTP/2 clients over TLS"}


# Seconds idle-clients waits after the last idle client's request before it reads RSS.
IDLE_SETTLE_S = 2

# Idle client connections in idle-clients, and idle pooled connections in pool-memory.
# Fewer when the open-file limit cannot hold them (see `idle_counts`).
IDLE_CONNECTIONS = 10_000


def idle_counts(nofile):
    """(idle clients, idle pooled connections) that fit in `nofile` descriptors per process.

    A proxy holding N idle clients needs N descriptors plus a few hundred; during
    pool-memory's second burst holdfast holds N idle pooled connections, N client and N
    upstream connections at once.
    """
    return min(IDLE_CONNECTIONS, nofile - 500), min(IDLE_CONNECTIONS, (nofile - 300) // 3)


class RunFailed(RuntimeError):
    """The run could not be measured (start failure, crash, load generator failure)."""


def run(ctx, scenario, contender, round_no, plan=None, slice_no=None):
    """Runs one scenario for one contender; returns its record, also when it failed.

    `plan`: the latency scenarios' rate for the round (`latency_plan`); `slice_no`: which
    of the round's `scenario.slices` runs this is (1-based), None when it has one."""
    record = {"scenario": scenario.name, "contender": contender.name, "round": round_no,
              "ok": False, "error": None, "metrics": {}, "load": None}
    suffix = ""
    if slice_no is not None:
        record["slice"] = slice_no
        suffix = f"-s{slice_no}"
    run_dir = Path(ctx.log_dir) / f"r{round_no}-{scenario.name}-{contender.name}{suffix}"
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        if scenario.name == "port-exhaustion":
            _port_exhaustion(ctx, contender, run_dir, record)
        elif scenario.name == "c500-netns":
            _many_clients_in_namespace(ctx, scenario, contender, run_dir, record)
        elif scenario.name == "pool-memory":
            _pool_memory(ctx, run_dir, record)
        elif scenario.name == threads_reuse.NAME:
            threads_reuse.run(ctx, contender, run_dir, record)
        elif scenario.name == "silent-clients":
            _silent_clients(ctx, scenario, contender, run_dir, record)
        elif scenario.name == "https-handshakes":
            _handshakes(ctx, scenario, contender, run_dir, record)
        elif scenario.h2 == "grpc":
            _grpc(ctx, scenario, contender, run_dir, record)
        elif scenario.h2 is not None:
            _h2(ctx, scenario, contender, run_dir, record)
        elif scenario.capacity_share is not None:
            _latency(ctx, scenario, contender, run_dir, record, plan)
        else:
            origin = _origin_for(ctx, scenario, contender)
            running = _start(ctx, contender, origin, run_dir, tls=scenario.tls)
            record["command"] = running.child.argv if running.child else None
            try:
                if scenario.tls is not None:
                    record["tls_probe"] = _probe(ctx, running, tls=scenario.tls)
                _on_host(ctx, scenario, running, origin, run_dir, record)
            finally:
                running.stop()
        record["ok"] = True
    except Exception as err:  # any failure is this run's, recorded; the session goes on
        record["error"] = f"{type(err).__name__}: {err}"[:2000]
    record["seconds"] = round(time.monotonic() - started, 2)
    return record


def _start(ctx, contender, origin, run_dir, *, netns_name=None, tls=None, h2=None):
    return contenders.start(contender, origin=origin, ports=ctx.ports, bins=ctx.bins,
                            run_dir=run_dir, nofile=ctx.nofile, netns=netns_name,
                            tls=tls, certs=ctx.certs, h2=h2)


def _origin_for(ctx, scenario, contender):
    """The origin a contender forwards to in `scenario`; with HTTPS clients, `direct` has
    no proxy to end TLS, so its clients go to the HTTPS origin; with HTTP/2 clients, to
    the h2c origin."""
    if scenario.tls == "client" and contender.name == "direct":
        return ctx.origins["rust-tls"]
    if scenario.h2 is not None and contender.name == "direct":
        return ctx.origins["rust-h2c"]
    return ctx.origins[scenario.origin]


def _probe(ctx, running, *, tls):
    """One GET /tiny before the load: over HTTPS, verifying the certificate for 127.0.0.1
    against the session's CA, when the clients speak TLS (returns the negotiated version
    and cipher, so a reader can see every contender offered the same); cleartext through
    to the HTTPS origin otherwise. Raises RunFailed unless it answers 200, so a contender
    that cannot serve HTTPS fails its run with the reason."""
    if tls != "client":
        _get_ok(running.base_url + "/tiny")
        return None
    host, port = running.base_url.removeprefix("https://").rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(ctx.certs.ca))
    context.set_alpn_protocols(["http/1.1"])
    conn = http.client.HTTPSConnection(host, int(port), timeout=10, context=context)
    try:
        conn.request("GET", "/tiny")
        response = conn.getresponse()
        response.read()
        probe = {"status": response.status, "version": conn.sock.version(),
                 "cipher": conn.sock.cipher()[0],
                 "alpn": conn.sock.selected_alpn_protocol()}
    except (OSError, ssl.SSLError, http.client.HTTPException) as err:
        raise RunFailed(f"{running.contender.name} does not serve HTTPS at "
                        f"{running.base_url}: {err}") from err
    finally:
        conn.close()
    if probe["status"] != 200:
        raise RunFailed(f"GET {running.base_url}/tiny over HTTPS answered {probe['status']}")
    return probe


def _on_host(ctx, scenario, running, origin, run_dir, record):
    url = running.base_url
    ctx_run = ctx.for_run(run_dir)
    duration = ctx.duration_s
    if scenario.name == "rate-latency":
        record["metrics"], record["load"] = measure(
            running, origin, ctx.ports,
            lambda: load.rate(ctx_run, "load", url + "/tiny", rate=ctx.rate,
                              duration_s=duration, warmup_s=ctx.warmup_s))
        saturated = record["load"]["rps"] < SATURATED_BELOW * ctx.rate
        record["metrics"]["saturated"] = saturated
        return
    path = "/" if scenario.origin == "node" else scenario.path
    closing = scenario.name == "closing-tiny"

    def wrk(name, seconds):
        return load.wrk(ctx_run, name, url + path, duration_s=seconds,
                        connections=scenario.clients, closing=closing,
                        timeout_s=scenario.timeout_s)

    # The origin's counters before the warm-up: upstream connections opened from a cold
    # start (warm-up and window) as well as in the window alone.
    cold = origin.stats()
    warmup = wrk("warmup", ctx.warmup_s)
    record["warmup_argv"] = warmup["argv"]
    # The warm-up's own closes must be over a second old when the window starts, so the
    # TIME_WAIT count (whole seconds) after the window does not include them.
    time.sleep(ctx.settle_s)
    holder = None
    if scenario.name == "idle-clients":
        holder = load.Holder(ctx_run, "hold", url + "/tiny", connections=ctx.idle_clients,
                             hold_s=duration + 180)
        record["hold_argv"] = holder.child.argv
        try:
            record["holding"] = holder.wait_holding()
        except load.LoadError:
            holder.stop()
            raise
        # Read once the last client has been idle for IDLE_SETTLE_S too, as the first
        # ones long have: what an idle client costs, not one that has just been answered
        # (holdfast parks a connection idle for a second; nginx and HAProxy free their
        # request state at once).
        time.sleep(IDLE_SETTLE_S)
        rss, _ = procs.memory_kb(running.pids())
        record["metrics"]["idle_rss_kb"] = rss
    holdfast_tls_before = _holdfast_tls_handshakes(running) if scenario.tls == "origin" else None
    try:
        metrics, result = measure(
            running, origin, ctx.ports, lambda: wrk("load", duration),
            sample_upstream=scenario.many_clients)
        if holdfast_tls_before is not None:
            # holdfast's own count of its upstream handshakes, beside the origin's
            after = _holdfast_tls_handshakes(running)
            if after is not None:
                metrics["holdfast_tls_full"] = after["full"] - holdfast_tls_before["full"]
                metrics["holdfast_tls_resumed"] = (after["resumed"]
                                                   - holdfast_tls_before["resumed"])
        warm = origin.delta(cold, metrics["origin_stats"]["before"])
        metrics["upstream_connections_warmup"] = warm["connections"]
        metrics["upstream_connections_total"] = warm["connections"] + metrics[
            "upstream_connections"]
        if origin.tls:
            metrics["upstream_tls_full_warmup"] = warm["tls_full"]
            metrics["upstream_tls_resumed_warmup"] = warm["tls_resumed"]
        if scenario.many_clients:
            _per_client(metrics, scenario.clients)
        record["metrics"].update(metrics)
        record["load"] = result
        if holder:
            serving_port = ctx.ports["proxy"] if running.child else origin.port
            record["metrics"]["idle_clients_open_after"] = sockets.established(serving_port)
    finally:
        if holder:
            record["hold_final"] = holder.stop()
    if running.admin_url:
        record["holdfast_status"] = running.status()


# The capacity probe of the latency scenarios: as long as this (at most the window), with
# keepalive-tiny's and keepalive-50k's wrk clients.
CAPACITY_PROBE_S = 3
# After the probe, an open-loop calibration at this share of the probe's requests/s, with a
# short warm-up and a window this long (at most the window): the proxy's CPU per request
# there gives the rate its core sustains open loop (`open_loop_capacity`).
CALIBRATION_SHARE = 0.5
CALIBRATION_WARMUP_S = 0.5
CALIBRATION_S = 2
# A rate run that reached less than this share of the rate asked is `saturated`.
SATURATED_BELOW = 0.97


def latency_plan(ctx, scenario, contenders_in_round, round_no):
    """The one rate every contender of latency scenario `scenario` is asked in round
    `round_no`: `scenario.capacity_share` of the lowest capacity among its proxies.

    Each proxy (not `direct`) is probed first, all before any rate run of the round:
    started afresh, a wrk warm-up (`ctx.warmup_s`, at least 1 s, discarded) so the probe
    does not measure a cold proxy, then wrk with 64 keep-alive clients, as keepalive-tiny
    and keepalive-50k run it, for CAPACITY_PROBE_S s, then an open-loop calibration
    (`_calibrate`). The proxy's capacity is the lower of the probe's requests/s and the
    calibration's open-loop capacity. Returns {"rate", "from" (the proxy the rate came
    from), "probes" (name: the probe's figures, or {"error"} when it failed)}; "rate" is
    None when no probe served a request.

    One rate for all, not a rate per proxy at its own share: the load generator and the
    origin share the other core, so a higher rate loads them more and lengthens every
    tail, which would count against the proxy with the most capacity. At one rate the load
    side is the same for all, every proxy runs at most at the share of its own capacity,
    and a proxy with more capacity runs further below it, which is what capacity buys.

    Why the calibration: a closed-loop probe overstates what a proxy sustains open loop.
    With 64 clients always in flight each wake-up serves many requests, while at a fixed
    rate fewer arrive per wake-up and each costs more CPU; 70% of a fast probe kept every
    proxy's core 89-98% busy in some slices.
    """
    probes = {}
    for contender in contenders_in_round:
        if contender.name == "direct":
            continue
        run_dir = Path(ctx.log_dir) / f"r{round_no}-{scenario.name}-probe-{contender.name}"
        run_dir.mkdir(parents=True, exist_ok=True)
        try:
            probes[contender.name] = _capacity_probe(ctx, scenario, contender, run_dir)
        except Exception as error:  # noqa: BLE001 - a failed probe is reported, not fatal
            probes[contender.name] = {"error": f"{type(error).__name__}: {error}"}
    served = {name: probe["capacity_rps"] for name, probe in probes.items()
              if probe.get("capacity_rps")}
    if not served:
        return {"rate": None, "from": None, "probes": probes}
    slowest = min(served, key=served.get)
    rate = max(1, round(scenario.capacity_share * served[slowest]))
    return {"rate": rate, "from": slowest, "probes": probes}


def _capacity_probe(ctx, scenario, contender, run_dir):
    """A proxy's capacity for `latency_plan`: warm-up, the wrk probe, then the open-loop
    calibration; the probe's figures, "calibration" and "capacity_rps" (the lower of the
    probe's requests/s and the open-loop capacity)."""
    origin = _origin_for(ctx, scenario, contender)
    running = _start(ctx, contender, origin, run_dir)
    ctx_run = ctx.for_run(run_dir)
    url = running.base_url + scenario.path
    try:
        load.wrk(ctx_run, "probe-warmup", url, duration_s=max(1, ctx.warmup_s),
                 connections=scenario.clients)
        probe = load.wrk(ctx_run, "probe", url, duration_s=min(CAPACITY_PROBE_S, ctx.duration_s),
                         connections=scenario.clients)
        calibration = (_calibrate(ctx_run, scenario, running, origin, url, probe["rps"])
                       if probe.get("rps") else None)
    finally:
        running.stop()
    figures = {k: probe.get(k) for k in (
        "requests", "rps", "errors", "socket_errors_by_kind", "latency_us", "duration_s")}
    open_loop = (calibration or {}).get("open_loop_rps")
    return figures | {"argv": probe["argv"], "calibration": calibration,
                      "capacity_rps": _lowest(probe.get("rps"), open_loop)}


def _lowest(*figures):
    """The lowest of `figures` that are there (not None, not zero); None when none is."""
    present = [figure for figure in figures if figure]
    return min(present) if present else None


def _calibrate(ctx_run, scenario, running, origin, url, probe_rps):
    """The open-loop calibration after a capacity probe: `bench-load rate` at
    CALIBRATION_SHARE of the probe's requests/s over the scenario's connections, the
    proxy's CPU measured over it. Returns its rate, CPU per request and CPU share, and
    "open_loop_rps": the rate at which that CPU per request fills the proxy's core
    (`open_loop_capacity`), or None when it served nothing."""
    rate = max(1, round(CALIBRATION_SHARE * probe_rps))
    metrics, _ = measure(
        running, origin, ctx_run.ports,
        lambda: load.rate(ctx_run, "calibration", url, rate=rate,
                          duration_s=min(CALIBRATION_S, ctx_run.duration_s),
                          connections=scenario.clients, warmup_s=CALIBRATION_WARMUP_S))
    cpu_us = metrics.get("cpu_us_per_request")
    return {"rate": rate, "rps": metrics.get("rps"), "cpu_us_per_request": cpu_us,
            "proxy_cpu_share": metrics.get("proxy_cpu_share"),
            "open_loop_rps": open_loop_capacity(cpu_us)}


def open_loop_capacity(cpu_us_per_request):
    """The requests/s at which a proxy costing `cpu_us_per_request` µs of CPU per request
    keeps its one core fully busy; None without a figure."""
    return 1e6 / cpu_us_per_request if cpu_us_per_request else None


def slice_window_s(duration_s, scenario):
    """The window of one of `scenario`'s slices: the run's window (`duration_s`) split
    evenly among them, in whole seconds (at least 1)."""
    return max(1.0, float(int(duration_s / scenario.slices)))


def _latency(ctx, scenario, contender, run_dir, record, plan):
    """latency-tiny and latency-50k: latency at the round's one rate (`latency_plan`), one
    slice.

    The contender starts afresh and bench-load rate asks for `plan["rate"]` requests/s
    over 64 keep-alive connections, for the warm-up and the slice's window
    (`slice_window_s`), measured like any window (CPU and the origin's counts cover both,
    at the same rate).

    bench-load counts a request's latency from its due time when its connection was still
    busy with the previous one (a stall shows in every request queued behind it: no
    coordinated omission), else from when it went out (see bench/tools/src/load/rate.rs).
    A run that reached less than 97% of the rate asked is `saturated`: its latency
    includes the generator's own queueing.
    """
    probe = plan["probes"].get(contender.name) or {}
    record["probe"] = {k: v for k, v in probe.items() if k != "argv"}
    record["probe_argv"] = probe.get("argv")
    record["rate_from"] = plan["from"]
    asked = plan["rate"]
    if asked is None:
        raise RunFailed(f"no capacity probe of {scenario.name} served requests in this round: "
                        + "; ".join(f"{name}: {p.get('error') or p.get('errors')}"
                                    for name, p in plan["probes"].items()))
    origin = _origin_for(ctx, scenario, contender)
    running = _start(ctx, contender, origin, run_dir)
    record["command"] = running.child.argv if running.child else None
    ctx_run = ctx.for_run(run_dir)
    url = running.base_url + scenario.path
    try:
        metrics, result = measure(
            running, origin, ctx.ports,
            lambda: load.rate(ctx_run, "load", url, rate=asked,
                              duration_s=slice_window_s(ctx.duration_s, scenario),
                              connections=scenario.clients, warmup_s=ctx.warmup_s))
        if running.admin_url:
            record["holdfast_status"] = running.status()
    finally:
        running.stop()
    achieved = (result.get("rps") or 0) / asked
    capacity = probe.get("capacity_rps")
    metrics.update({
        "capacity_rps": capacity,
        "probe_rps": probe.get("rps"),
        "open_loop_rps": (probe.get("calibration") or {}).get("open_loop_rps"),
        "capacity_errors": probe.get("errors"),
        # the rate asked over this contender's own capacity (direct has no probe)
        "capacity_share": asked / capacity if capacity else None,
        "rate_asked": asked,
        "rate_achieved_share": achieved,
        "saturated": achieved < SATURATED_BELOW,
        # due in the window but never sent, and bench-load's own lateness on idle
        # connections (milliseconds here mean the generator was short of CPU)
        "unsent": result.get("unsent"),
        "max_send_lag_us": result.get("max_send_lag_us"),
    })
    record["metrics"].update(metrics)
    record["load"] = result


def measure(running, origin, ports, drive, *, netns_name=None, sample_upstream=False):
    """Runs `drive()` (the load) between two samples; returns (metrics, load result).

    With `sample_upstream`, the connections open at the origin are also counted every
    half second during the window (`ss`, filtered in the kernel), for their peak.
    """
    rss_max = [0]
    upstream_open_max = [0]
    stop = threading.Event()

    def sample_rss():
        ticks = 0
        while not stop.wait(0.25):
            rss_max[0] = max(rss_max[0], procs.memory_kb(running.pids())[0])
            ticks += 1
            if sample_upstream and ticks % 2 == 0:
                upstream_open_max[0] = max(
                    upstream_open_max[0], sockets.established_count(origin.port, netns_name))

    origin_before = origin.stats()
    cores_before = procs.core_times()
    proxy_pids = running.pids()
    proxy_before = procs.cpu_times(proxy_pids)
    proxy_ns_before = procs.cpu_ns(proxy_pids)
    origin_cpu_before = procs.cpu_times(origin.child.pids())
    started = time.monotonic()
    sampler = threading.Thread(target=sample_rss, daemon=True)
    sampler.start()
    try:
        result = drive()
    finally:
        stop.set()
        sampler.join()
    wall_s = time.monotonic() - started
    proxy_pids = running.pids()
    proxy_after = procs.cpu_times(proxy_pids)
    proxy_ns_after = procs.cpu_ns(proxy_pids)
    origin_cpu_after = procs.cpu_times(origin.child.pids())
    cores_after = procs.core_times()
    rss_end, hwm = procs.memory_kb(running.pids())
    proxied = running.child is not None
    if proxied and not running.is_alive():
        raise RunFailed(f"{running.contender.name} exited during the window: "
                        f"{running.child.stderr_tail(1000)}")
    since_s = time.monotonic() - started + 0.1
    client_port = ports["proxy"] if proxied else origin.port
    tw_client = sockets.time_wait([client_port], since_s=since_s, netns=netns_name)
    tw_upstream = (sockets.time_wait([origin.port], since_s=since_s, netns=netns_name)
                   if proxied else 0)
    origin_after = origin.stats()
    upstream = origin.delta(origin_before, origin_after)
    busy = procs.core_busy(cores_before, cores_after)

    requests = result.get("requests", 0)
    upstream_requests = upstream["requests"]
    upstream_connections = upstream["connections"]
    proxy_cpu = proxy_after - proxy_before
    proxy_cpu_s = proxy_cpu.total_s if proxied else None
    proxy_schedstat_s = (proxy_ns_after - proxy_ns_before) / 1e9
    origin_cpu_s = (origin_cpu_after - origin_cpu_before).total_s
    served = max(requests, upstream_requests)

    def per_request(seconds):
        """Microseconds of proxy CPU per request served; None without a proxy."""
        return seconds * 1e6 / served if proxied and served else None

    by_kind = result.get("socket_errors_by_kind") or result.get("errors_by_kind") or {}
    metrics = {
        "requests": requests,
        "rps": result.get("rps"),
        "errors": result.get("errors"),
        "non_2xx": result.get("non_2xx"),
        "timeouts": by_kind.get("timeout"),
        "latency_us": result.get("latency_us"),
        "upstream_requests": upstream_requests,
        "upstream_connections": upstream_connections,
        "reuse": (max(0.0, 1 - upstream_connections / upstream_requests)
                  if upstream_requests else None),
        "requests_per_upstream_connection": (upstream_requests / upstream_connections
                                             if upstream_connections else None),
        # utime + stime of all the proxy's processes (nginx's master and worker alike),
        # split into user and system (kernel) time; schedstat of their threads as a check
        "proxy_cpu_s": proxy_cpu_s,
        "proxy_cpu_user_s": proxy_cpu.user_s if proxied else None,
        "proxy_cpu_sys_s": proxy_cpu.sys_s if proxied else None,
        "proxy_cpu_schedstat_s": proxy_schedstat_s if proxied else None,
        "cpu_us_per_request": per_request(proxy_cpu.total_s),
        "cpu_user_us_per_request": per_request(proxy_cpu.user_s),
        "cpu_sys_us_per_request": per_request(proxy_cpu.sys_s),
        "cpu_us_per_request_schedstat": per_request(proxy_schedstat_s),
        "proxy_cpu_share": proxy_cpu_s / wall_s if proxied else None,
        "origin_cpu_share": origin_cpu_s / wall_s,
        "loadgen_cpu_share": result.get("loadgen_cpu_s", 0.0) / wall_s,
        "core_busy": {str(k): round(v, 3) for k, v in busy.items()},
        # Busy time on the proxy core that is not the proxy's: other processes on the host.
        "proxy_core_other": max(0.0, busy.get(procs.PROXY_CPU, 0.0) - (proxy_cpu_s or 0) / wall_s),
        "rss_kb": rss_end if proxied else None,
        "rss_kb_max": max(rss_max[0], rss_end) if proxied else None,
        "hwm_kb": hwm if proxied else None,
        "time_wait_client": tw_client,
        "time_wait_upstream": tw_upstream,
        "upstream_open_max": upstream_open_max[0] if sample_upstream else None,
        "origin_stats": {"before": origin_before, "after": origin_after},
        "wall_s": round(wall_s, 3),
    }
    if origin.tls:
        # The HTTPS origin's handshakes: the proxy's upstream ones (the clients' for direct)
        handshakes = upstream["tls_full"] + upstream["tls_resumed"]
        metrics.update({
            "upstream_tls_full": upstream["tls_full"],
            "upstream_tls_resumed": upstream["tls_resumed"],
            "upstream_tls_failed": upstream["tls_failed"],
            "upstream_tls_handshakes": handshakes,
            "upstream_tls_per_request": (handshakes / upstream_requests
                                         if upstream_requests else None),
            "upstream_tls_resumed_share": (upstream["tls_resumed"] / handshakes
                                           if handshakes else None),
        })
    if origin.h2c:
        # The h2c origin's own count of what came over HTTP/2 (the proxy's upstream
        # requests; the clients' for direct), and the connections open at the window's end
        h2_requests = upstream["h2_requests"]
        metrics.update({
            "upstream_h2_connections": upstream["h2_connections"],
            "upstream_h2_requests": h2_requests,
            "upstream_h2_share": h2_requests / upstream_requests if upstream_requests else None,
            "upstream_h2_open_end": origin_after.get("h2_open"),
            "origin_max_streams": origin_after.get("h2_max_streams"),
        })
    # Connections open at the origin at the window's end; its `open` counts the stats
    # request's own connection too.
    metrics["upstream_open_end"] = max(0, (origin_after.get("open") or 1) - 1)
    return metrics, result


def _per_client(metrics, clients):
    """Upstream connections opened in the window per client connection. The window's
    load generator opens its own N client connections, so 1 is one upstream connection
    per client connection; a pool that kept the warm-up's connections shows less, one
    that closes and reopens connections more."""
    metrics["clients"] = clients
    metrics["upstream_connections_per_client"] = metrics["upstream_connections"] / clients


# What each window of https-handshakes records, suffixed with the window's name (`rps_full`,
# `cpu_us_per_request_resumed`, ...).
HANDSHAKE_WINDOWS = ("full", "resumed")
HANDSHAKE_WINDOW_KEYS = (
    "rps", "requests", "errors", "p50_us", "p99_us", "cpu_us_per_request",
    "cpu_user_us_per_request", "cpu_sys_us_per_request", "cpu_us_per_request_schedstat",
    "proxy_cpu_share", "loadgen_cpu_share", "origin_cpu_share", "proxy_core_other",
    "upstream_connections", "upstream_tls_full", "upstream_tls_resumed", "client_full",
    "client_resumed", "resumed_share", "rss_kb",
)


def _handshakes(ctx, scenario, contender, run_dir, record):
    """https-handshakes: HTTPS clients that open a new connection per request.

    After a check that the contender serves HTTPS and a warm-up (which also fills the
    proxy's upstream pool, so the windows measure the client side), two windows, each
    measured like any other: one where every handshake is full (bench-load keeps no
    sessions), then one where every client offers the session it got last time. The
    client counts what the server did with the offer (`client_full`, `client_resumed`);
    for `direct` the HTTPS origin counts it too (`upstream_tls_*`). Proxy CPU per request
    is CPU per handshake here: every request is one new connection with one handshake.
    """
    origin = _origin_for(ctx, scenario, contender)
    running = _start(ctx, contender, origin, run_dir, tls=scenario.tls)
    record["command"] = running.child.argv if running.child else None
    ctx_run = ctx.for_run(run_dir)
    url = running.base_url + "/tiny"

    def drive(name, seconds, resume):
        return load.handshakes(ctx_run, name, url, ca=ctx.certs.ca, connections=scenario.clients,
                               duration_s=seconds, resume=resume)

    metrics = record["metrics"]
    try:
        record["tls_probe"] = _probe(ctx, running, tls=scenario.tls)
        record["warmup_argv"] = drive("warmup", ctx.warmup_s, True)["argv"]
        time.sleep(ctx.settle_s)
        for window in HANDSHAKE_WINDOWS:
            measured, result = measure(
                running, origin, ctx.ports,
                lambda window=window: drive(f"load-{window}", ctx.duration_s,
                                            window == "resumed"))
            measured = _flat_latency(measured)
            measured["client_full"] = result.get("handshakes_full")
            measured["client_resumed"] = result.get("handshakes_resumed")
            done = (measured["client_full"] or 0) + (measured["client_resumed"] or 0)
            measured["resumed_share"] = measured["client_resumed"] / done if done else None
            for key in HANDSHAKE_WINDOW_KEYS:
                metrics[f"{key}_{window}"] = measured.get(key)
            record[f"load_{window}"] = result
        record["load"] = {"argv": record["load_resumed"]["argv"]}
        record["full_argv"] = record["load_full"]["argv"]
    finally:
        running.stop()
    metrics["requests"] = sum(metrics.get(f"requests_{w}") or 0 for w in HANDSHAKE_WINDOWS)
    metrics["errors"] = sum(metrics.get(f"errors_{w}") or 0 for w in HANDSHAKE_WINDOWS)


def _flat_latency(metrics):
    """`metrics` with its latency percentiles as `p50_us`, `p99_us`, ... keys."""
    flat = dict(metrics)
    for key, value in (metrics.get("latency_us") or {}).items():
        flat[f"{key}_us"] = value
    return flat


_TLS_METRIC = "holdfast_backend_tls_handshakes_total{"


def _holdfast_metrics(running):
    """holdfast's /metrics text from its admin listener; None without one, or when it
    does not answer."""
    if not running.admin_url:
        return None
    try:
        with urllib.request.urlopen(running.admin_url + "/metrics", timeout=10) as resp:
            return resp.read().decode()
    except OSError:
        return None


def _holdfast_tls_handshakes(running):
    """holdfast's own count of its upstream TLS handshakes, {"full": n, "resumed": n}, from
    `holdfast_backend_tls_handshakes_total{..., session="full|resumed"}` on its admin
    listener; None when it has no admin listener or does not export the metric."""
    text = _holdfast_metrics(running)
    if text is None:
        return None
    counts = {}
    for line in text.splitlines():
        if line.startswith(_TLS_METRIC):
            session = dict(_LABEL.findall(line.split("}", 1)[0])).get("session")
            if session in ("full", "resumed"):
                counts[session] = counts.get(session, 0) + int(float(line.rsplit(" ", 1)[1]))
    if not counts:
        return None
    return {"full": counts.get("full", 0), "resumed": counts.get("resumed", 0)}


def _h2(ctx, scenario, contender, run_dir, record):
    """h2-to-h1, h2-to-h2c and https-h2-to-h1: h2load's HTTP/2 clients (h2c, prior
    knowledge; or over TLS with h2 chosen by ALPN in https-h2-to-h1) through the proxy,
    measured like the wrk scenarios.

    Over TLS, the TLS check first (`_probe_tls_h2`: the certificate, and h2 chosen by
    ALPN). A check first (a few requests with h2load, which must all answer 2xx over h2c,
    or h2 over TLS, so a contender that cannot serve HTTP/2 fails its run with the
    reason), then a warm-up with
    the same clients (it fills the proxy's upstream connections), then the window. During
    the window the connections open at the origin are counted every half second (`ss`),
    for the most the proxy had open at once; after it holdfast's own gauge of its HTTP/2
    upstream connections is read. To an h2c origin, `upstream_connections_bound` is what
    a proxy that fills each upstream connection up to the origin's stream limit needs,
    plus one: ceil(streams in flight / the origin's max streams) + 1.
    """
    origin = _origin_for(ctx, scenario, contender)
    running = _start(ctx, contender, origin, run_dir, tls=scenario.tls, h2=scenario.h2)
    record["command"] = running.child.argv if running.child else None
    ctx_run = ctx.for_run(run_dir)
    url = running.base_url + "/tiny"

    def drive(name, seconds):
        return load.h2load(ctx_run, name, url, connections=scenario.clients,
                           streams=scenario.streams, duration_s=seconds)

    try:
        if scenario.tls == "client":
            record["tls_probe"] = _probe_tls_h2(ctx, running)
        record["h2_probe"] = _probe_h2(ctx_run, running, url)
        cold = origin.stats()
        record["warmup_argv"] = drive("warmup", ctx.warmup_s)["argv"]
        time.sleep(ctx.settle_s)
        metrics, result = measure(running, origin, ctx.ports,
                                  lambda: drive("load", ctx.duration_s), sample_upstream=True)
        gauge = _holdfast_gauge(running, "holdfast_backend_h2_connections")
        if gauge is not None:
            metrics["holdfast_h2_connections"] = gauge
        if running.admin_url:
            record["holdfast_status"] = running.status()
        if not running.is_alive():
            raise RunFailed(f"{contender.name} exited during the window: "
                            f"{running.child.stderr_tail(1000)}")
    finally:
        running.stop()
    warm = origin.delta(cold, metrics["origin_stats"]["before"])
    metrics["upstream_connections_warmup"] = warm["connections"]
    metrics["upstream_connections_total"] = warm["connections"] + metrics["upstream_connections"]
    in_flight = scenario.clients * scenario.streams
    metrics["streams_in_flight"] = in_flight
    if origin.h2c and metrics.get("origin_max_streams"):
        metrics["upstream_connections_bound"] = math.ceil(
            in_flight / metrics["origin_max_streams"]) + 1
    metrics["protocol"] = result.get("protocol")
    if scenario.tls is not None:
        metrics["tls_protocol"] = result.get("tls_protocol")
        metrics["tls_cipher"] = result.get("tls_cipher")
    record["metrics"].update(metrics)
    record["load"] = result


# Requests of the check before an HTTP/2 scenario's load, over one connection.
H2_PROBE_REQUESTS = 8


def _probe_h2(ctx, running, url):
    """A few requests over one HTTP/2 connection (h2load) before the load; raises
    RunFailed unless every one answered 2xx over HTTP/2: h2c for an http:// URL, h2 over
    TLS for an https:// one. Returns what h2load saw."""
    over_tls = url.startswith("https://")
    expected = "h2" if over_tls else "h2c"
    how = "over TLS" if over_tls else "with prior knowledge"
    try:
        result = load.h2load(ctx, "probe", url, connections=1, streams=1,
                             requests=H2_PROBE_REQUESTS)
    except load.LoadError as err:
        raise RunFailed(f"{running.contender.name} does not serve HTTP/2 {how} at "
                        f"{running.base_url}: {err}") from err
    probe = {"protocol": result["protocol"], "requests": result["requests"],
             "status_2xx": result["status_2xx"], "errors": result["errors"]}
    if result["protocol"] != expected or result["status_2xx"] != H2_PROBE_REQUESTS:
        raise RunFailed(f"{running.contender.name} at {running.base_url}: {H2_PROBE_REQUESTS} "
                        f"requests over HTTP/2 {how} gave {probe}")
    return probe


def _probe_tls_h2(ctx, running):
    """A TLS handshake with the proxy before the load, offering h2 and http/1.1 by ALPN as
    a browser does and verifying the certificate for 127.0.0.1 against the session's CA;
    returns the version, cipher and ALPN protocol chosen. Raises RunFailed unless the
    handshake succeeds and the proxy chose h2."""
    host, port = running.base_url.removeprefix("https://").rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(ctx.certs.ca))
    context.set_alpn_protocols(["h2", "http/1.1"])
    try:
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                probe = {"version": tls.version(), "cipher": tls.cipher()[0],
                         "alpn": tls.selected_alpn_protocol()}
    except (OSError, ssl.SSLError) as err:
        raise RunFailed(f"{running.contender.name} does not serve TLS at "
                        f"{running.base_url}: {err}") from err
    if probe["alpn"] != "h2":
        raise RunFailed(f"{running.contender.name} at {running.base_url} chose ALPN "
                        f"{probe['alpn']!r} when offered h2 and http/1.1")
    return probe


# gRPC: the check before the load, one call at a time over one connection, this long.
GRPC_PROBE_S = 0.2


def _grpc(ctx, scenario, contender, run_dir, record):
    """grpc-unary and grpc-streaming: bench-load grpc's calls over h2c through the proxy to
    the origin's gRPC echo, measured like the other windows.

    A check first (`_probe_grpc`: calls over one connection, every one good), then a
    warm-up with the same clients, then the window. Besides the window's figures, whose
    requests are calls (`requests`, `rps`, `cpu_us_per_request`; also as `calls_per_s`
    and `cpu_us_per_call`), per message: `messages`, `messages_per_s` and the proxy's
    CPU per message (`cpu_us_per_message` and its user and system parts); for unary
    calls a message is a call. Latency is a message's round trip. The h2c origin counts
    the calls that reached it over HTTP/2 (`upstream_h2_share`).
    """
    origin = _origin_for(ctx, scenario, contender)
    running = _start(ctx, contender, origin, run_dir, h2=scenario.h2)
    record["command"] = running.child.argv if running.child else None
    ctx_run = ctx.for_run(run_dir)
    url = running.base_url + GRPC_PATHS[scenario.name]

    def drive(name, seconds, connections=scenario.clients, streams=scenario.streams):
        return load.grpc(ctx_run, name, url, connections=connections, streams=streams,
                         messages=scenario.messages, payload_bytes=GRPC_PAYLOAD_BYTES,
                         duration_s=seconds)

    try:
        record["grpc_probe"] = _probe_grpc(running, lambda: drive(
            "probe", GRPC_PROBE_S, connections=1, streams=1))
        cold = origin.stats()
        record["warmup_argv"] = drive("warmup", ctx.warmup_s)["argv"]
        time.sleep(ctx.settle_s)
        metrics, result = measure(running, origin, ctx.ports,
                                  lambda: drive("load", ctx.duration_s), sample_upstream=True)
        if running.admin_url:
            record["holdfast_status"] = running.status()
        if not running.is_alive():
            raise RunFailed(f"{contender.name} exited during the window: "
                            f"{running.child.stderr_tail(1000)}")
    finally:
        running.stop()
    warm = origin.delta(cold, metrics["origin_stats"]["before"])
    metrics["upstream_connections_warmup"] = warm["connections"]
    metrics["upstream_connections_total"] = warm["connections"] + metrics["upstream_connections"]
    metrics.update(_per_message(metrics, result))
    record["metrics"].update(metrics)
    record["load"] = result


def _probe_grpc(running, drive):
    """Calls over one connection, one at a time, for GRPC_PROBE_S before the load; raises
    RunFailed unless some were made and every one was good (each echo right, status 200,
    `grpc-status: 0`). Returns what the client counted."""
    try:
        result = drive()
    except load.LoadError as err:
        raise RunFailed(f"{running.contender.name} does not carry gRPC calls at "
                        f"{running.base_url}: {err}") from err
    probe = {key: result.get(key) for key in ("requests", "ok", "messages", "errors",
                                              "errors_by_kind")}
    if not result.get("ok") or result.get("errors"):
        first = "; ".join(f"{kind}: {message}" for kind, message in
                          result.get("first_errors") or [])
        raise RunFailed(f"{running.contender.name} at {running.base_url}: gRPC calls over "
                        f"one connection gave {probe}" + (f" ({first})" if first else ""))
    return probe


def _per_message(metrics, result):
    """A gRPC window's figures per call and per message: the window's per-request figures
    under the names of calls (`calls_per_s`, `cpu_us_per_call` and its parts), the
    messages echoed right, their rate, and the proxy's CPU per message (total, user,
    system); None without a proxy or a message."""
    messages = result.get("messages") or 0

    def per_message(seconds):
        return seconds * 1e6 / messages if seconds is not None and messages else None

    return {"calls_per_s": metrics.get("rps"), "grpc_ok": result.get("ok"),
            "cpu_us_per_call": metrics.get("cpu_us_per_request"),
            "cpu_user_us_per_call": metrics.get("cpu_user_us_per_request"),
            "cpu_sys_us_per_call": metrics.get("cpu_sys_us_per_request"),
            "messages": messages, "messages_per_s": result.get("messages_per_s"),
            "cpu_us_per_message": per_message(metrics.get("proxy_cpu_s")),
            "cpu_user_us_per_message": per_message(metrics.get("proxy_cpu_user_s")),
            "cpu_sys_us_per_message": per_message(metrics.get("proxy_cpu_sys_s"))}


def _holdfast_gauge(running, name):
    """The sum of holdfast's metric `name` over its labels, from /metrics on its admin
    listener; None without an admin listener or when it does not export the metric."""
    text = _holdfast_metrics(running)
    if text is None:
        return None
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name + "{") or line.startswith(name + " ")]
    return sum(values) if values else None


def _port_exhaustion(ctx, contender, run_dir, record):
    """Cold start inside a namespace with 1000 local ports; keep-alive and closing clients."""
    duration = ctx.exhaustion_s
    with netns.namespace() as name:
        record["netns"] = name
        origin = origins.start("rust", port=ctx.ports["origin"], bins=ctx.bins,
                               log_dir=run_dir, netns=name)
        running = None
        try:
            running = _start(ctx, contender, origin, run_dir, netns_name=name)
            record["command"] = running.child.argv if running.child else None
            url = running.base_url + "/tiny"
            metrics, result = measure(
                running, origin, ctx.ports,
                lambda: load.mixed(ctx.for_run(run_dir), "load", url, keepalive=64, closing=64,
                                   duration_s=duration, netns=name),
                netns_name=name)
        finally:
            if running:
                running.stop()
            origin.stop()
    timeline = result.get("timeline", [])
    first_error = next((p["t_s"] for p in timeline if p.get("errors")), None)
    metrics["first_error_s"] = first_error
    metrics["errors_by_kind"] = result.get("errors_by_kind")
    record["metrics"] = metrics
    record["load"] = result


def _many_clients_in_namespace(ctx, scenario, contender, run_dir, record):
    """c500 from a cold start inside a namespace with 1000 local ports and tcp_tw_reuse=0.

    The same load as c500 (wrk, keep-alive clients, the Node origin), but every closed
    upstream connection keeps a local port in TIME_WAIT for 60 s (the side that closes
    first holds it), so a proxy that opens more than about 1000 upstream connections in
    the window runs out of source ports and answers with errors.
    """
    with netns.namespace() as name:
        record["netns"] = name
        origin = origins.start(scenario.origin, port=ctx.ports["node"], bins=ctx.bins,
                               log_dir=run_dir, netns=name)
        running = None
        try:
            running = _start(ctx, contender, origin, run_dir, netns_name=name)
            record["command"] = running.child.argv if running.child else None
            url = running.base_url + "/"
            metrics, result = measure(
                running, origin, ctx.ports,
                lambda: load.wrk(ctx.for_run(run_dir), "load", url, duration_s=ctx.duration_s,
                                 connections=scenario.clients, timeout_s=scenario.timeout_s,
                                 netns=name),
                netns_name=name, sample_upstream=True)
        finally:
            if running:
                running.stop()
            origin.stop()
    # A cold start: everything was opened in the window.
    metrics["upstream_connections_total"] = metrics["upstream_connections"]
    _per_client(metrics, scenario.clients)
    metrics["socket_errors_by_kind"] = result.get("socket_errors_by_kind")
    # What running out of ports looks like: error responses and failed connections. Slow
    # responses (timeouts) come apart: `direct` has them too, from the origin itself.
    metrics["failures"] = (metrics["errors"] or 0) - (metrics["timeouts"] or 0)
    error_log = run_dir / "error.log"
    if contender.program == "nginx" and error_log.exists():
        # nginx logs every failed connect: errno 99 is a source port shortage
        metrics["connect_eaddrnotavail"] = error_log.read_text(errors="replace").count(
            "(99: Cannot assign requested address)")
    record["metrics"] = metrics
    record["load"] = result


# silent-clients: after the proxy accepted every connection, a pause before RSS is read;
# holdfast closes a connection that has not sent a complete request head within 10 s of
# the accept, so the reading comes well before that.
SILENT_SETTLE_S = 0.5
# How long bench-load would hold if the harness did not stop it first (a bound, not a wait).
SILENT_HOLD_S = 120
# After the clients closed: how long the proxy gets to close its side; RSS is then read
# once it has settled (`procs.settled_memory_kb`).
SILENT_CLOSE_WAIT_S = 15.0


def _silent_clients(ctx, scenario, contender, run_dir, record):
    """RSS of a proxy before, while and after it holds N connections that send nothing.

    One request goes through the proxy first (it works and reached the origin), then RSS
    is read (start). bench-load opens N connections and sends nothing on them; once the
    proxy has accepted all of them (its accept queue is empty) RSS is read again (held),
    and the connections the proxy still has open are counted. Then bench-load closes them
    all, the harness waits until the proxy has closed its side too, and RSS is read a last
    time (after), once it has settled: an allocator that returns memory on a timer is
    read when it has. (held - start) / open is the memory one silent connection holds;
    after - start is what the proxy did not give back.
    """
    origin = ctx.origins[scenario.origin]
    port = ctx.ports["proxy"]
    wanted = ctx.idle_clients
    metrics = record["metrics"] = {"silent_wanted": wanted}
    if wanted < IDLE_CONNECTIONS:
        metrics["note"] = (f"open-file limit {ctx.nofile}: {wanted:,} connections, not "
                           f"{IDLE_CONNECTIONS:,}")
    running = _start(ctx, contender, origin, run_dir)
    record["command"] = running.child.argv if running.child else None
    try:
        _get_ok(running.base_url + "/tiny")
        metrics["listen_backlog"] = sockets.listen_backlog(port)
        time.sleep(SILENT_SETTLE_S)
        metrics["rss_kb_start"], _ = procs.memory_kb(running.pids())
        holder = load.Holder(ctx.for_run(run_dir), "hold", running.base_url + "/",
                             connections=wanted, hold_s=SILENT_HOLD_S, silent=True)
        record["load"] = {"argv": holder.child.argv}
        try:
            record["holding"] = holding = holder.wait_holding()
            held_from = time.monotonic()
            metrics["establish_s"] = round(holding["establish_s"], 2)
            _wait_accepted(port, running)
            time.sleep(SILENT_SETTLE_S)
            metrics["rss_kb_held"], metrics["hwm_kb"] = procs.memory_kb(running.pids())
            metrics["silent_connections"] = sockets.established_count(port)
            metrics["held_s"] = round(time.monotonic() - held_from + holding["establish_s"], 2)
        finally:
            record["hold_final"] = final = holder.stop()
        metrics["silent_failed"] = holding["failed"]
        metrics["silent_closed_by_proxy"] = (final or {}).get("closed_by_peer")
        deadline = time.monotonic() + SILENT_CLOSE_WAIT_S
        while sockets.not_closed(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        metrics["silent_open_after"] = sockets.not_closed(port)
        metrics["rss_kb_after"], _, metrics["rss_settle_s_after"] = procs.settled_memory_kb(
            running.pids())
        if not running.is_alive():
            raise RunFailed(f"{contender.name} exited during the run: "
                            f"{running.child.stderr_tail(1000)}")
    finally:
        running.stop()
    held = metrics["silent_connections"]
    if held < 0.9 * wanted:
        raise RunFailed(
            f"{contender.name} held {held:,} of {wanted:,} silent connections when RSS was "
            f"read, {metrics['held_s']} s after the first connect ({holding['failed']:,} "
            f"failed to connect, {metrics['silent_closed_by_proxy']} closed by "
            f"{contender.name} by then; connecting took {metrics['establish_s']} s, listen "
            f"backlog {metrics['listen_backlog']})")
    metrics["bytes_per_silent_connection"] = (
        (metrics["rss_kb_held"] - metrics["rss_kb_start"]) * 1024 / held)
    metrics["rss_kb_left"] = metrics["rss_kb_after"] - metrics["rss_kb_start"]
    metrics["bytes_left_per_connection"] = metrics["rss_kb_left"] * 1024 / held


def _get_ok(url):
    """One GET; raises RunFailed unless it answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            resp.read()
            status = resp.status
    except OSError as err:
        raise RunFailed(f"GET {url} failed: {err}") from err
    if status != 200:
        raise RunFailed(f"GET {url} answered {status}")


def _wait_accepted(port, running, timeout_s=5.0):
    """Waits until the proxy on `port` has accepted every connection that reached it: none
    waits in its accept queue and no handshake is unfinished. After `timeout_s` it goes on
    with what is open then (holdfast closes silent connections 10 s after the accept, so
    waiting longer would measure fewer); raises RunFailed if the proxy exits.

    bench-load reports `holding` once every connect() returned. Most server sides are
    established by then; when the accept queue was full, the kernel dropped the client's
    last ACK and finishes the handshake on a retry.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if sockets.accept_queue(port) == 0 and sockets.handshaking(port) == 0:
            return
        if not running.is_alive():
            raise RunFailed(f"{running.contender.name} exited while accepting: "
                            f"{running.child.stderr_tail(1000)}")
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)


HOLDFAST_POOL_TEMPLATE = "holdfast-pool-memory.toml"

# Each burst goes to the origin's `/gate?n=N&ms=M`: every request waits there until all N
# have arrived, so all N are in flight at once (N upstream connections, however slowly
# they open on a busy machine), and all are answered together right after the last one
# arrives. M bounds the wait if some never arrive.
POOL_GATE_WAIT_MS = 40_000
# holdfast's pool keeps no more idle connections than were recently in flight at once,
# and forgets a peak after 10 to 20 s; both readings are taken well within that.
POOL_SETTLE_S = 3.0


def _pool_memory(ctx, run_dir, record):
    """RSS growth from N idle pooled connections, per connection (see the README).

    One holdfast with two upstream groups, `a` and `b`, each with its own origin and
    listener. Burst 1 leaves N idle connections in pool a; RSS is read once it has
    settled (1). Burst 2, the same shape through b, runs while a's N connections sit
    idle and leaves N idle in b; RSS is read once settled again (2). Settled readings
    leave out what a burst's clients used and the allocator returned afterwards
    (holdfast's jemalloc purges freed pages after about 1 s), and what burst 1 grew once
    for good (tables, the runtime's registrations) is in both. So (2) - (1) is the memory
    of N more idle pooled connections.
    """
    wanted = ctx.pool_connections
    metrics = record["metrics"] = {"idle_connections_wanted": wanted}
    if wanted < IDLE_CONNECTIONS:
        metrics["note"] = (f"open-file limit {ctx.nofile}: {wanted:,} connections per pool "
                           f"(holdfast needs 3 descriptors per connection), not "
                           f"{IDLE_CONNECTIONS:,}")
    pool_ports = dict(ctx.ports, origin=ctx.ports["pool_origin"])
    started = []
    try:
        origin_a = origins.start("rust", port=ctx.ports["pool_origin"], bins=ctx.bins,
                                 log_dir=_mkdir(run_dir / "origin-a"))
        started.append(origin_a)
        origin_b = origins.start("rust", port=ctx.ports["pool_origin_b"], bins=ctx.bins,
                                 log_dir=_mkdir(run_dir / "origin-b"))
        started.append(origin_b)
        running = contenders.start(
            contenders.BY_NAME["holdfast"], origin=origin_a, ports=pool_ports, bins=ctx.bins,
            run_dir=run_dir, nofile=ctx.nofile,
            config={"template": HOLDFAST_POOL_TEMPLATE, "values": {
                "listen_b": f"127.0.0.1:{ctx.ports['proxy_b']}",
                "origin_b": origin_b.address}})
        started.append(running)
        record["command"] = running.child.argv
        if not sockets.wait_listening(ctx.ports["proxy_b"], timeout_s=10, child=running.child):
            raise RunFailed(f"holdfast does not listen on its second listener "
                            f"127.0.0.1:{ctx.ports['proxy_b']}")
        pool = _PoolRun(ctx, run_dir, running, wanted,
                        pools={"a": origin_a.address, "b": origin_b.address})
        metrics["rss_kb_start"], _ = procs.memory_kb(running.pids())
        first = pool.burst("a", ctx.ports["proxy"], origin_a)
        record["load"] = {"argv": first["burst"].get("argv")}
        record["bursts"] = [first]
        second = pool.burst("b", ctx.ports["proxy_b"], origin_b)
        record["bursts"].append(second)
        # pool a's connections, still idle, as burst 2 left them
        idle = second["idle"].get("a")
        metrics.update({
            "idle_connections": idle,
            "rss_kb_one_pool": first["rss_kb"],
            "rss_kb_two_pools": second["rss_kb"],
            "hwm_kb": second["hwm_kb"],
            "burst_errors": first["burst"].get("errors", 0) + second["burst"].get("errors", 0),
            # how long pool a had been idle when RSS was read the second time
            "read_s_after_first_burst": round(second["rss_read_s"] - first["burst_end_s"], 2),
        })
        problem = (first["problem"] or second["problem"]
                   or _still_idle_problem(first, second, wanted))
        if problem:
            raise RunFailed(problem)
        metrics["bytes_per_idle_connection"] = (
            (second["rss_kb"] - first["rss_kb"]) * 1024 / idle)
        # Everything burst 1 left in the process (freed client memory included), per
        # connection it left idle: what one burst costs in RSS, an upper bound.
        metrics["bytes_per_idle_connection_upper"] = (
            (first["rss_kb"] - metrics["rss_kb_start"]) * 1024 / first["idle"]["a"])
    finally:
        for child in reversed(started):
            child.stop()


def _mkdir(path):
    path.mkdir(parents=True, exist_ok=True)
    return path


class _PoolRun:
    """The bursts of one pool-memory run and the readings after each."""

    def __init__(self, ctx, run_dir, running, wanted, pools):
        self.ctx = ctx
        self.pools = pools  # upstream name -> origin address
        self.run_dir = run_dir
        self.running = running
        self.wanted = wanted
        self.client_ports = [ctx.ports["proxy"], ctx.ports["proxy_b"]]
        self.started = time.monotonic()
        self.count = 0

    def burst(self, upstream, port, origin):
        """N requests at once through `port` to `upstream`; then its idle count and RSS."""
        url = f"http://127.0.0.1:{port}/gate?n={self.wanted}&ms={POOL_GATE_WAIT_MS}"
        result = load.burst(self.ctx.for_run(self.run_dir), f"burst-{upstream}", url,
                            connections=self.wanted)
        ended = time.monotonic()
        self.count += 1
        label = f"burst {self.count} (upstream {upstream})"
        out = {"upstream": upstream, "burst": result, "problem": None,
               "burst_end_s": round(ended - self.started, 2)}
        if not self.running.is_alive():
            out["problem"] = (f"holdfast exited during {label}: "
                              f"{self.running.child.stderr_tail(1000)}")
            return out
        # Every response is in and the burst closed its connections: wait (briefly) until
        # holdfast has put the upstream connections back and closed the client side.
        deadline = ended + POOL_SETTLE_S
        while True:
            status = self.running.status()
            idle = _idle_by_upstream(self.running, status, self.pools)
            clients = sum(sockets.established(p) for p in self.client_ports)
            active = _status_sum(status, "active")
            if (clients == 0 and not active and idle.get(upstream) == self.wanted) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        out["rss_kb"], out["hwm_kb"], out["rss_settle_s"] = procs.settled_memory_kb(
            self.running.pids())
        out["rss_read_s"] = round(time.monotonic() - self.started, 2)
        status = self.running.status()
        out["idle"] = _idle_by_upstream(self.running, status, self.pools)
        out["idle_before_rss"] = idle
        out["clients_open"] = clients
        out["origin_open"] = origin.open_connections()
        out["read_s_after"] = round(time.monotonic() - ended, 2)
        out["status"] = status
        summary = (f"origin has {out['origin_open']} connections open, holdfast "
                   f"{clients} client connections; {_status_summary(status)}")
        got = result.get("ok", 0)
        kept = out["idle"].get(upstream)
        if got < self.wanted:
            out["problem"] = (f"{label} got {got} of {self.wanted} responses (errors by kind: "
                              f"{result.get('errors_by_kind')}, took "
                              f"{result.get('duration_s', 0):.1f} s; {summary})")
        elif not out["idle"]:
            out["problem"] = ("holdfast reports no idle connection count (no per-server "
                              "`idle` in /status, no idle gauge in /metrics)")
        elif kept is None or kept < 0.99 * self.wanted:
            out["problem"] = (f"after {label} holdfast kept {kept} idle connections of "
                              f"{self.wanted} ({idle.get(upstream)} just before RSS was read, "
                              f"{out['read_s_after']} s after the burst; {summary})")
        elif kept < (idle.get(upstream) or 0):
            out["problem"] = (f"holdfast closed idle connections while RSS was read after "
                              f"{label} ({idle.get(upstream)} -> {kept}; {summary})")
        elif out["origin_open"] < 0.99 * kept:
            out["problem"] = f"after {label} holdfast reports {kept} idle connections, but {summary}"
        return out


def _still_idle_problem(first, second, wanted):
    """Pool a must still hold burst 1's connections when RSS is read after burst 2."""
    before, after = first["idle"].get("a"), second["idle"].get("a")
    if after is None or after < before:
        return (f"pool a went from {before} to {after} idle connections during burst 2 "
                f"(read {second['rss_read_s'] - first['burst_end_s']:.1f} s after burst 1; "
                f"holdfast forgets a burst's peak after 10 to 20 s), so RSS after burst 2 "
                f"does not hold {wanted} idle connections; {_status_summary(second['status'])}")
    return None


def _status_upstreams(status):
    """[(name, [server object])] from /status, whether it lists upstream groups and their
    servers as arrays of objects (as holdfast does now) or as objects keyed by name and
    address."""
    groups = status.get("upstreams") if isinstance(status, dict) else None
    if isinstance(groups, dict):
        items = groups.items()
    else:
        items = ((None, group) for group in (groups or []))
    out = []
    for key, group in items:
        if not isinstance(group, dict):
            continue
        servers = group.get("servers") or []
        if isinstance(servers, dict):
            servers = [dict(server, server=server.get("server", address))
                       for address, server in servers.items() if isinstance(server, dict)]
        out.append((group.get("name", key), [s for s in servers if isinstance(s, dict)]))
    return out


def _status_servers(status, upstream=None):
    return [s for name, servers in _status_upstreams(status)
            if upstream is None or name == upstream for s in servers]


def _status_sum(status, key, upstream=None):
    """Sum of `key` over /status's servers (of `upstream`), None if no server has it."""
    values = [s[key] for s in _status_servers(status, upstream)
              if isinstance(s.get(key), (int, float)) and not isinstance(s.get(key), bool)]
    return sum(values) if values else None


def _status_summary(status):
    """What /status says about each pool, in a few words, for failure messages."""
    groups = _status_upstreams(status)
    if not groups:
        return "no /status"
    parts = []
    for i, (name, servers) in enumerate(groups):
        words = []
        for key in ("idle", "active", "opened", "waiting", "errors"):
            values = [s[key] for s in servers if isinstance(s.get(key), int)]
            if values:
                words.append(f"{key} {sum(values)}")
        closed = {}
        for server in servers:
            for reason, n in (server.get("closed") or {}).items():
                if isinstance(n, int) and n:
                    closed[reason] = closed.get(reason, 0) + n
        if closed:
            words.append("closed " + ", ".join(f"{k} {v}" for k, v in sorted(closed.items())))
        parts.append(f"{name if name is not None else f'upstream {i + 1}'}: "
                     + ", ".join(words))
    return "holdfast /status " + "; ".join(parts)


def _idle_by_upstream(running, status, pools):
    """{pool: idle connections} for `pools` ({upstream name: origin address}).

    From the servers' `idle` in /status, found by upstream name or else by server
    address; else from /metrics' idle gauge. Pools holdfast reports nothing for are left
    out.
    """
    idle = {}
    groups = _status_upstreams(status)
    for name, address in pools.items():
        values = [s["idle"] for group, servers in groups if group == name for s in servers
                  if isinstance(s.get("idle"), int)]
        if not values:
            values = [s["idle"] for _, servers in groups for s in servers
                      if s.get("server") == address and isinstance(s.get("idle"), int)]
        if values:
            idle[name] = sum(values)
    if idle:
        return idle
    try:
        return _idle_from_metrics(running.admin_url, pools)
    except (OSError, ValueError):
        return {}


_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _idle_from_metrics(admin_url, pools):
    """Like `_idle_by_upstream`, from `holdfast_backend_connections{state="idle"}`."""
    with urllib.request.urlopen(admin_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    by_address = {address: name for name, address in pools.items()}
    idle = {}
    for line in text.splitlines():
        if line.startswith("holdfast_backend_connections{") and 'state="idle"' in line:
            labels = dict(_LABEL.findall(line.split("}", 1)[0]))
            name = labels.get("upstream")
            if name not in pools:
                name = by_address.get(labels.get("backend"))
            if name is not None:
                idle[name] = idle.get(name, 0) + int(float(line.rsplit(" ", 1)[1]))
    return idle
