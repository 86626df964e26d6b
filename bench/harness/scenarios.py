"""The scenarios: how each one starts a contender, warms it up, drives load through it, and
what it measures around the load window.

A measured window samples, just before and just after the load: the contender's CPU time
(utime and stime of all its processes, and their threads' schedstat as a cross-check), the
origin's CPU time, the origin's counters (connections accepted,
requests), per-core busy time from /proc/stat and the clock. During the window a thread
samples the contender's RSS; right after it the harness reads VmRSS and VmHWM and counts the
TIME_WAIT sockets the window left. Each scenario returns one run record (a dict).
"""

import re
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
             "10,000 idle (fewer if the open-file limit is low)", "rust", ()),
]

BY_NAME = {s.name: s for s in SCENARIOS}

SMOKE = ("keepalive-tiny", "closing-tiny", "rate-latency")

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

# Each burst goes to the origin's `/gate?n=N&ms=M`: every request waits there until all N
# have arrived, so all N are in flight at once (N upstream connections, however slowly
# they open on a busy machine), and all are answered together right after the last one
# arrives. M bounds the wait if some never arrive.
POOL_GATE_WAIT_MS = 40_000
# holdfast's pool keeps no more idle connections than were recently in flight at once,
# and forgets a peak after 10 to 20 s; both readings are taken well within that.
POOL_SETTLE_S = 3.0
# After the last client closed: a pause for the allocator, before RSS is read.
POOL_ALLOCATOR_PAUSE_S = 0.5


def _pool_memory(ctx, run_dir, record):
    """RSS growth from N idle pooled connections, per connection (see the README).

    One holdfast with two upstream groups, `a` and `b`, each with its own origin and
    listener. Burst 1 leaves N idle connections in pool a; RSS is read (1). Burst 2, the
    same shape through b, runs while a's N connections sit idle; RSS is read again (2).
    Burst 2's client and in-flight memory reuses what burst 1 freed (the allocator keeps
    freed memory, so RSS after a burst is its peak either way); what it cannot reuse is
    the memory a's idle connections hold. So (2) - (1) is the memory of N idle pooled
    connections, whatever the allocator returns to the system or keeps.
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
            holdfast_config={"template": HOLDFAST_POOL_TEMPLATE, "values": {
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
        time.sleep(POOL_ALLOCATOR_PAUSE_S)
        out["rss_kb"], out["hwm_kb"] = procs.memory_kb(self.running.pids())
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
    """Like `_idle_by_upstream`, from `holdfast_upstream_connections{state="idle"}`."""
    with urllib.request.urlopen(admin_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    by_address = {address: name for name, address in pools.items()}
    idle = {}
    for line in text.splitlines():
        if line.startswith("holdfast_upstream_connections{") and 'state="idle"' in line:
            labels = dict(_LABEL.findall(line.split("}", 1)[0]))
            name = labels.get("upstream")
            if name not in pools:
                name = by_address.get(labels.get("server"))
            if name is not None:
                idle[name] = idle.get(name, 0) + int(float(line.rsplit(" ", 1)[1]))
    return idle
