"""The scenarios: how each one starts a contender, warms it up, drives load through it, and
what it measures around the load window.

A measured window samples, just before and just after the load: the contender's CPU time
(schedstat of all its processes and threads), the origin's counters (connections accepted,
requests), per-core busy time from /proc/stat and the clock. During the window a thread
samples the contender's RSS; right after it the harness reads VmRSS and VmHWM and counts the
TIME_WAIT sockets the window left. Each scenario returns one run record (a dict).
"""

import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from . import contenders, load, netns, origins, procs, sockets


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    origin: str  # "rust" or "node"
    needs: tuple  # programs the scenario needs besides the contender's own


SCENARIOS = [
    Scenario("keepalive-tiny", "64 keep-alive clients (wrk), 100-byte responses", "rust", ("wrk",)),
    Scenario("keepalive-50k", "64 keep-alive clients (wrk), 50 kB responses", "rust", ("wrk",)),
    Scenario("closing-tiny", "64 clients, `Connection: close` on every request (wrk), 100 B",
             "rust", ("wrk",)),
    Scenario("rate-latency", "a fixed rate over 64 keep-alive connections (bench-load rate)",
             "rust", ()),
    Scenario("idle-clients", "10,000 idle client connections held open while 64 keep-alive "
             "clients run (wrk), 100 B", "rust", ("wrk",)),
    Scenario("node-50k", "64 keep-alive clients (wrk) against a Node 20 origin, 50 kB",
             "node", ("wrk", "node")),
    Scenario("port-exhaustion", "network namespace with 1000 local ports and tcp_tw_reuse=0: "
             "64 keep-alive + 64 closing clients (bench-load mixed)", "rust", ("ip",)),
    Scenario("pool-memory", "holdfast only: memory per idle pooled upstream connection, "
             "10,000 idle", "rust", ()),
]

BY_NAME = {s.name: s for s in SCENARIOS}

SMOKE = ("keepalive-tiny", "closing-tiny", "rate-latency")

# Idle client connections in idle-clients, and idle pooled connections in pool-memory.
# Fewer when the open-file limit cannot hold them (see `idle_counts`).
IDLE_CONNECTIONS = 10_000


def idle_counts(nofile):
    """(idle clients, idle pooled connections) that fit in `nofile` descriptors per process.

    A proxy holding N idle clients needs N descriptors plus a few hundred; during the
    pool-memory burst holdfast holds N client and N upstream connections at once.
    """
    return min(IDLE_CONNECTIONS, nofile - 500), min(IDLE_CONNECTIONS, (nofile - 200) // 2)


class RunFailed(RuntimeError):
    """The run could not be measured (start failure, crash, load generator failure)."""


def run(ctx, scenario, contender, round_no):
    """Runs one scenario for one contender; returns its record, also when it failed."""
    record = {"scenario": scenario.name, "contender": contender.name, "round": round_no,
              "ok": False, "error": None, "metrics": {}, "load": None}
    run_dir = Path(ctx.log_dir) / f"r{round_no}-{scenario.name}-{contender.name}"
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        if scenario.name == "port-exhaustion":
            _port_exhaustion(ctx, contender, run_dir, record)
        elif scenario.name == "pool-memory":
            _pool_memory(ctx, run_dir, record)
        else:
            origin = ctx.origins[scenario.origin]
            running = _start(ctx, contender, origin, run_dir)
            record["command"] = running.child.argv if running.child else None
            try:
                _on_host(ctx, scenario, running, origin, run_dir, record)
            finally:
                running.stop()
        record["ok"] = True
    except Exception as err:  # any failure is this run's, recorded; the session goes on
        record["error"] = f"{type(err).__name__}: {err}"[:2000]
    record["seconds"] = round(time.monotonic() - started, 2)
    return record


def _start(ctx, contender, origin, run_dir, *, netns_name=None, holdfast_config=None):
    port = ctx.ports["proxy"]
    deadline = time.monotonic() + 10
    while contender.name != "direct" and sockets.is_listening(port, netns_name):
        if time.monotonic() > deadline:
            raise RunFailed(f"port {port} is still in use before starting {contender.name}")
        time.sleep(0.1)
    return contenders.start(contender, origin=origin, ports=ctx.ports, bins=ctx.bins,
                            run_dir=run_dir, nofile=ctx.nofile, netns=netns_name,
                            holdfast_config=holdfast_config)


def _on_host(ctx, scenario, running, origin, run_dir, record):
    url = running.base_url
    ctx_run = ctx.for_run(run_dir)
    duration = ctx.duration_s
    if scenario.name == "rate-latency":
        record["metrics"], record["load"] = measure(
            running, origin, ctx.ports,
            lambda: load.rate(ctx_run, "load", url + "/tiny", rate=ctx.rate,
                              duration_s=duration, warmup_s=ctx.warmup_s))
        saturated = record["load"]["rps"] < 0.97 * ctx.rate
        record["metrics"]["saturated"] = saturated
        return
    path = {"keepalive-50k": "/50k", "node-50k": "/"}.get(scenario.name, "/tiny")
    closing = scenario.name == "closing-tiny"
    warmup = load.wrk(ctx_run, "warmup", url + path, duration_s=ctx.warmup_s, closing=closing)
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
        rss, _ = procs.memory_kb(running.pids())
        record["metrics"]["idle_rss_kb"] = rss
    try:
        metrics, result = measure(
            running, origin, ctx.ports,
            lambda: load.wrk(ctx_run, "load", url + path, duration_s=duration, closing=closing))
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


def measure(running, origin, ports, drive, *, netns_name=None):
    """Runs `drive()` (the load) between two samples; returns (metrics, load result)."""
    rss_max = [0]
    stop = threading.Event()

    def sample_rss():
        while not stop.wait(0.25):
            rss_max[0] = max(rss_max[0], procs.memory_kb(running.pids())[0])

    origin_before = origin.stats()
    cores_before = procs.core_times()
    proxy_before = procs.cpu_ns(running.pids())
    origin_cpu_before = procs.cpu_ns(origin.child.pids())
    started = time.monotonic()
    sampler = threading.Thread(target=sample_rss, daemon=True)
    sampler.start()
    try:
        result = drive()
    finally:
        stop.set()
        sampler.join()
    wall_s = time.monotonic() - started
    proxy_after = procs.cpu_ns(running.pids())
    origin_cpu_after = procs.cpu_ns(origin.child.pids())
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
    proxy_cpu_s = (proxy_after - proxy_before) / 1e9 if proxied else None
    origin_cpu_s = (origin_cpu_after - origin_cpu_before) / 1e9
    served = max(requests, upstream_requests)
    metrics = {
        "requests": requests,
        "rps": result.get("rps"),
        "errors": result.get("errors"),
        "latency_us": result.get("latency_us"),
        "upstream_requests": upstream_requests,
        "upstream_connections": upstream_connections,
        "reuse": (max(0.0, 1 - upstream_connections / upstream_requests)
                  if upstream_requests else None),
        "requests_per_upstream_connection": (upstream_requests / upstream_connections
                                             if upstream_connections else None),
        "proxy_cpu_s": proxy_cpu_s,
        "cpu_us_per_request": (proxy_cpu_s * 1e6 / served) if proxied and served else None,
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
        "wall_s": round(wall_s, 3),
    }
    return metrics, result


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


HOLDFAST_POOL_TEMPLATE = "holdfast-pool-memory.toml"


def _pool_memory(ctx, run_dir, record):
    """RSS with 10,000 idle pooled connections minus RSS with none kept, per connection."""
    variants = {}
    for label, max_idle in (("kept", ctx.pool_connections), ("not_kept", 0)):
        variants[label] = _pool_memory_variant(ctx, run_dir / label, max_idle)
    kept, not_kept = variants["kept"], variants["not_kept"]
    idle = kept["idle"]
    per_conn = upper = None
    if idle:
        per_conn = (kept["rss_kb"] - not_kept["rss_kb"]) * 1024 / idle
        # Everything the burst left in the kept process, freed client memory included.
        upper = (kept["rss_kb"] - kept["rss_kb_before"]) * 1024 / idle
    record["variants"] = variants
    record["command"] = kept["command"]
    record["load"] = {"argv": kept["burst"].get("argv")}
    record["metrics"] = {
        "idle_connections": idle,
        "rss_kb_kept": kept["rss_kb"],
        "rss_kb_not_kept": not_kept["rss_kb"],
        "bytes_per_idle_connection": per_conn,
        "bytes_per_idle_connection_upper": upper,
        "hwm_kb_kept": kept["hwm_kb"],
        "burst_errors": kept["burst"].get("errors", 0) + not_kept["burst"].get("errors", 0),
    }
    if idle < ctx.pool_connections * 0.99:
        raise RunFailed(f"holdfast kept only {idle} idle connections of {ctx.pool_connections}")


def _pool_memory_variant(ctx, run_dir, max_idle):
    run_dir.mkdir(parents=True, exist_ok=True)
    ports = dict(ctx.ports, origin=ctx.ports["pool_origin"])
    origin = origins.start("rust", port=ports["origin"], bins=ctx.bins, log_dir=run_dir)
    running = None
    try:
        running = contenders.start(
            contenders.BY_NAME["holdfast"], origin=origin, ports=ports, bins=ctx.bins,
            run_dir=run_dir, nofile=ctx.nofile,
            holdfast_config={"template": HOLDFAST_POOL_TEMPLATE, "values": {"max_idle": max_idle}})
        variant_command = running.child.argv
        rss_before, _ = procs.memory_kb(running.pids())
        url = f"{running.base_url}/slow?ms=3000"
        burst = load.burst(ctx.for_run(run_dir), "burst", url, connections=ctx.pool_connections)
        want_open = ctx.pool_connections if max_idle else 0
        deadline = time.monotonic() + 30
        while True:
            open_now = origin.open_connections()
            clients = sockets.established(ports["proxy"])
            if open_now == want_open and clients == 0:
                break
            if time.monotonic() > deadline:
                if max_idle and open_now < want_open * 0.99:
                    raise RunFailed(f"origin has {open_now} open connections, not {want_open}")
                break
            time.sleep(0.2)
        time.sleep(1.0)  # let the allocator settle after the burst's last frees
        rss, hwm = procs.memory_kb(running.pids())
        status = running.status() or {}
        idle = sum(s.get("idle", 0) for u in status.get("upstreams", [])
                   for s in u.get("servers", []))
        if not status:
            idle = _idle_from_metrics(running.admin_url)
        return {"command": variant_command, "max_idle_per_server": max_idle,
                "rss_kb_before": rss_before, "rss_kb": rss, "hwm_kb": hwm, "idle": idle,
                "origin_open": open_now, "burst": burst}
    finally:
        if running:
            running.stop()
        origin.stop()


def _idle_from_metrics(admin_url):
    with urllib.request.urlopen(admin_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    idle = 0
    for line in text.splitlines():
        if line.startswith("holdfast_upstream_connections{") and 'state="idle"' in line:
            idle += int(float(line.rsplit(" ", 1)[1]))
    return idle
