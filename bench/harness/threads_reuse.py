"""The threads-reuse scenario: upstream reuse of each proxy with 1 and with 4 worker
threads (or processes) against 50 backends routed by Host, from a cold start.

nginx and Envoy keep one upstream pool per worker, so with W workers they keep up to W
times the idle connections and reuse less; holdfast keeps one pool per backend for all
its threads. Per contender and thread count (a row, "nginx-tuned ×4"): one bench-origin
process listening on 50 ports (backends app0.bench ... app49.bench), the proxy started
fresh with a generated config that routes each host to its own backend, then
`bench-load hosts` at a fixed rate over 64 keep-alive client connections: 40 hosts get
steady traffic, 10 only a burst of 1 s after every 3 s of nothing. Measured over the
window: upstream connections opened (the origin's accepted count), upstream connections
held (ESTABLISHED sockets on the 50 origin ports, `ss` every 0.5 s: the most, and at the
end once the load stopped), reuse = 1 - opened / upstream requests, errors and p99.

This module renders the configs, starts the proxies, runs and measures the rows, and
formats the rows, their targets and a log line for report.py and cli.py; scenarios.py
only dispatches to `run`.
"""

import dataclasses
import http.client
import threading
import time
from pathlib import Path

from . import contenders, load, numbers, origins, sockets

NAME = "threads-reuse"
ABOUT = ("upstream reuse with 1 and 4 worker threads (nginx worker_processes, HAProxy "
         "nbthread, holdfast --threads) against 50 backends routed by Host, from a cold "
         "start: bench-load hosts at a fixed 2,000 req/s over 64 keep-alive connections, "
         "40 hosts steady, 10 idle 3 s then a 1 s burst, over and over; upstream "
         "connections opened and held (ss on the origin ports every 0.5 s)")
CONTENDERS = ("nginx-tuned", "haproxy", "holdfast")
THREADS = (1, 4)

BACKENDS = 50
STEADY_HOSTS = 40
BURSTY_HOSTS = BACKENDS - STEADY_HOSTS
HOST_PATTERN = "app{}.bench"
# 3 s of nothing, not 4: every contender keeps an idle connection at least 4 s (holdfast's
# default idle_timeout is 4 s, HAProxy purges idle connections every 5 s, nginx-tuned keeps
# them 60 s), so the bursty hosts' connections survive the gap for everyone and the rows
# differ by their pools, not by their idle timeouts.
IDLE_S = 3
BURST_S = 1
RATE = 2000
CONNECTIONS = 64
SAMPLE_S = 0.5
# The window is this many times the harness's --duration (20 s with the default 10 s).
WINDOW_FACTOR = 2

# holdfast's upstream connections with 4 threads must stay within this of 1 thread's.
GROWTH_FACTOR = 1.1
GROWTH_SLACK = 2

# The row metrics, each stored as `{key}_x{threads}` in a run's metrics.
ROW_KEYS = ("requests", "rps", "upstream_requests", "opened", "held_max", "held_end",
            "held_end_most_per_backend", "reuse", "errors", "p99_us", "bursty_requests")
METRICS = tuple(f"{key}_x{threads}" for threads in THREADS for key in ROW_KEYS)


class RunFailed(RuntimeError):
    """A row could not be measured (a proxy that does not start or route, a crash)."""


def window_s(ctx):
    return WINDOW_FACTOR * ctx.duration_s


def run(ctx, contender, run_dir, record):
    """Measures both thread counts of `contender` (their order alternates per round) and
    stores each row's figures in `record["metrics"]` as `{key}_x{threads}`."""
    # Ports of its own, picked now: the proxy's and admin listener's as well, since a
    # port the session picked at its start may have been taken since (other benchmarks
    # on the host pick from the same range).
    proxy_port, admin_port, *ports = sockets.free_ports(
        BACKENDS + 2, start=max(ctx.ports.values()) + 1)
    ctx = dataclasses.replace(ctx, ports=dict(ctx.ports, proxy=proxy_port, admin=admin_port))
    origin = origins.start("rust", port=ports[0], extra_ports=ports[1:], bins=ctx.bins,
                           log_dir=run_dir)
    record["origin_ports"] = ports
    record["proxy_port"] = proxy_port
    record["rows"] = {}
    order = THREADS if record["round"] % 2 else tuple(reversed(THREADS))
    try:
        for threads in order:
            row_dir = Path(run_dir) / f"x{threads}"
            row_dir.mkdir(parents=True, exist_ok=True)
            row = _row(ctx, contender, threads, origin, row_dir)
            record["rows"][str(threads)] = row
            for key in ROW_KEYS:
                record["metrics"][f"{key}_x{threads}"] = row["metrics"].get(key)
    finally:
        origin.stop()
    metrics = record["metrics"]
    metrics["requests"] = sum(metrics.get(f"requests_x{t}") or 0 for t in THREADS)
    metrics["errors"] = sum(metrics.get(f"errors_x{t}") or 0 for t in THREADS)
    record["load"] = {"argv": record["rows"][str(THREADS[-1])]["load"].get("argv")}
    record["command"] = record["rows"][str(THREADS[-1])]["command"]


def _row(ctx, contender, threads, origin, row_dir):
    """One proxy, cold, at `threads`, through one window; returns the row's record."""
    running = _start(ctx, contender, threads, origin, row_dir)
    try:
        before = origin.stats()
        _probe(running)
        samples = []
        stop = threading.Event()
        sampler = threading.Thread(target=_sample, args=(origin.ports, samples, stop),
                                   daemon=True)
        sampler.start()
        try:
            result = load.hosts(
                ctx.for_run(row_dir), "load", running.base_url + "/tiny", rate=RATE,
                duration_s=window_s(ctx), connections=CONNECTIONS, hosts=HOST_PATTERN,
                steady=STEADY_HOSTS, bursty=BURSTY_HOSTS, idle_s=IDLE_S, burst_s=BURST_S)
        finally:
            stop.set()
            sampler.join()
        # The load has stopped and closed its connections: what is left is idle.
        held_end = sockets.established_on_any(origin.ports)
        if not running.is_alive():
            raise RunFailed(f"{running.contender.name} ×{threads} exited during the window: "
                            f"{running.child.stderr_tail(1000)}")
        after = origin.stats()
        # holdfast's own view: per server opened, idle and closed by reason
        status = running.status()
    finally:
        running.stop()
    metrics = _row_metrics(origin, before, after, result, samples, held_end)
    # only the sum: /status of 50 servers would make the results file 25 kB larger a row
    metrics["closed_by_reason"] = _closed_by_reason(status)
    return {"threads": threads, "command": running.child.argv, "load": result,
            "samples": samples, "metrics": metrics}


def _closed_by_reason(status):
    """holdfast's upstream connections closed during the row, by reason, summed over
    every server in /status; None for the other proxies (or without /status)."""
    if not isinstance(status, dict):
        return None
    closed = {}
    for group in status.get("upstreams") or []:
        for server in (group.get("servers") or []) if isinstance(group, dict) else []:
            for reason, count in (server.get("closed") or {}).items():
                if isinstance(count, int) and count:
                    closed[reason] = closed.get(reason, 0) + count
    return closed


def _row_metrics(origin, before, after, result, samples, held_end):
    upstream = origin.delta(before, after)
    requests = upstream["requests"]
    return {
        "requests": result.get("requests"),
        "rps": result.get("rps"),
        "upstream_requests": requests,
        "opened": upstream["connections"],
        "held_max": max([held_end] + [s["held"] for s in samples]),
        "held_end": held_end,
        "held_end_most_per_backend": _most_per_backend(after, origin.port),
        "reuse": max(0.0, 1 - upstream["connections"] / requests) if requests else None,
        "errors": result.get("errors"),
        "p99_us": (result.get("latency_us") or {}).get("p99"),
        "bursty_requests": result.get("bursty_requests"),
    }


def _most_per_backend(stats, stats_port):
    """The most connections one backend had open in `stats` (the origin's per-port
    counts), not counting the stats request's own connection on `stats_port`."""
    counts = [entry["open"] - (1 if entry["address"].endswith(f":{stats_port}") else 0)
              for entry in stats.get("listeners") or []]
    return max(counts) if counts else None


def _sample(ports, samples, stop):
    """Every SAMPLE_S until `stop`: ESTABLISHED upstream connections on `ports`."""
    started = time.monotonic()
    while not stop.wait(SAMPLE_S):
        samples.append({"t_s": round(time.monotonic() - started, 2),
                        "held": sockets.established_on_any(ports)})


def _probe(running):
    """One request for a backend's host; raises RunFailed unless it answers 200, so a
    proxy that does not route by Host fails its row with the reason."""
    host, port = running.base_url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/tiny", headers={"Host": HOST_PATTERN.format(0)})
        response = conn.getresponse()
        response.read()
        status = response.status
    except (OSError, http.client.HTTPException) as err:
        raise RunFailed(f"{running.contender.name}: GET /tiny for "
                        f"{HOST_PATTERN.format(0)} failed: {err}") from err
    finally:
        conn.close()
    if status != 200:
        raise RunFailed(f"{running.contender.name}: GET /tiny for {HOST_PATTERN.format(0)} "
                        f"answered {status}")


# ---- configs and starting the proxies ------------------------------------------------------

def nginx_blocks(ports, listen):
    """nginx-tuned-hosts.conf's {upstreams} and {servers}: one of each per backend, the
    server blocks listening on `listen`."""
    upstreams, servers = [], []
    for number, port in enumerate(ports):
        upstreams.append(
            f"    upstream app{number} {{\n        server 127.0.0.1:{port};\n"
            "        keepalive 1024;\n        keepalive_requests 100000;\n"
            "        keepalive_timeout 60s;\n    }\n")
        servers.append(
            f"    server {{\n        listen {listen};\n        server_name "
            f"{HOST_PATTERN.format(number)};\n        location / {{\n"
            f"            proxy_pass http://app{number};\n            proxy_buffers 16 8k;\n"
            "            proxy_http_version 1.1;\n"
            "            proxy_set_header Connection \"\";\n"
            "            proxy_set_header Host $http_host;\n"
            "            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n"
            "            proxy_set_header X-Forwarded-Proto $scheme;\n        }\n    }\n")
    return "\n".join(upstreams), "\n".join(servers)


def haproxy_blocks(ports):
    """haproxy-hosts.cfg's {use_backends} and {backends}: one of each per backend."""
    use = [f"    use_backend app{n} if {{ req.hdr(host),lower -m str {HOST_PATTERN.format(n)} }}"
           for n in range(len(ports))]
    backends = [f"backend app{n}\n    server origin 127.0.0.1:{port}\n"
                for n, port in enumerate(ports)]
    return "\n".join(use), "\n".join(backends)


def holdfast_blocks(ports):
    """holdfast-hosts.toml's {upstreams}: per backend a group and a route to it."""
    blocks = [f'[upstream.app{n}]\nservers = ["127.0.0.1:{port}"]\n\n'
              f'[[route]]\nhost = "{HOST_PATTERN.format(n)}"\nupstream = "app{n}"\n'
              for n, port in enumerate(ports)]
    return "\n".join(blocks)


def _config(contender, threads, ports, listen):
    """contenders.start's `config` for `contender` at `threads` in front of `ports`."""
    if contender.program == "nginx":
        upstreams, servers = nginx_blocks(ports, listen)
        return {"template": "nginx-tuned-hosts.conf",
                "values": {"workers": threads, "upstreams": upstreams, "servers": servers}}
    if contender.program == "haproxy":
        use, backends = haproxy_blocks(ports)
        return {"template": "haproxy-hosts.cfg",
                "values": {"threads": threads, "use_backends": use, "backends": backends}}
    if contender.program == "holdfast":
        return {"template": "holdfast-hosts.toml",
                "values": {"upstreams": holdfast_blocks(ports)}}
    raise RunFailed(f"{contender.name} has no threads-reuse config")


def _start(ctx, contender, threads, origin, run_dir):
    """Starts `contender` with `threads` workers in front of the backends of `origin`,
    pinned to the proxy core like every contender (all its threads share it: CPU is not
    what this scenario measures); returns a contenders.Running."""
    config = _config(contender, threads, origin.ports, f"127.0.0.1:{ctx.ports['proxy']}")
    try:
        return contenders.start(contender, origin=origin, ports=ctx.ports, bins=ctx.bins,
                                run_dir=run_dir, nofile=ctx.nofile, config=config,
                                threads=threads)
    except contenders.StartError as error:
        raise RunFailed(f"{_label(contender.name, threads)}: {error}") from error


# ---- results: table, targets, log line -----------------------------------------------------

def _label(contender, threads):
    return f"{contender} ×{threads}"


COLUMNS = (
    ("requests", "requests", numbers.count),
    ("rps", "req/s", numbers.count),
    ("opened", "upstream conns opened", numbers.count),
    ("held_max", "upstream conns held, most", numbers.count),
    ("held_end", "held at end", numbers.count),
    ("held_end_most_per_backend", "most on one backend at end", numbers.count),
    ("reuse", "reuse", numbers.pct),
    ("errors", "errors", numbers.count),
    ("p99_us", "p99", numbers.us),
)


# The scenario's chart (report.charts): per contender, the medians of 1 and 4 threads.
CHART_PANELS = tuple(
    (f"{key}_x{threads}", f"{what}, ×{threads} (lower is better)")
    for key, what in (("opened", "upstream connections opened"),
                      ("held_end", "upstream connections held at the end"))
    for threads in THREADS)


def _cell(stat, fmt):
    """'median (min–max)' when runs differ, else the median; '–' when not measured."""
    if not stat:
        return "–"
    med, lo, hi = fmt(stat["median"]), fmt(stat["min"]), fmt(stat["max"])
    return f"{med} ({lo}–{hi})" if stat["n"] > 1 and lo != hi else med


def table(per_contender, order):
    """The scenario's markdown table from its medians ({contender: {metric: stat}}): one
    row per contender and thread count."""
    lines = ["| contender | " + " | ".join(c[1] for c in COLUMNS) + " |",
             "|" + "---|" * (len(COLUMNS) + 1)]
    for contender in order:
        cell = per_contender.get(contender)
        if cell is None:
            continue
        for threads in THREADS:
            label = _label(contender, threads)
            label = f"**{label}**" if contender == "holdfast" else label
            if cell["runs"] == 0:
                lines.append(f"| {label} | failed |" + " – |" * (len(COLUMNS) - 1))
                continue
            cells = [_cell(cell.get(f"{key}_x{threads}"), fmt) for key, _, fmt in COLUMNS]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def log_table(medians):
    """The table for the session log when the scenario ran, else None."""
    if NAME not in medians:
        return None
    order = [c for c in CONTENDERS if c in medians[NAME]]
    return f"{NAME} (medians):\n" + table(medians[NAME], order)


def targets(medians):
    """holdfast's upstream connections with 4 threads against 1 thread: opened, held at
    the most and held at the end, each within GROWTH_FACTOR x + GROWTH_SLACK."""
    cell = medians.get(NAME, {}).get("holdfast", {})
    checks = []
    for key, what in (("opened", "upstream connections opened"),
                      ("held_max", "upstream connections held (most)"),
                      ("held_end", "upstream connections held at the end")):
        one, many = (cell.get(f"{key}_x{t}", {}).get("median") for t in THREADS)
        limit = one * GROWTH_FACTOR + GROWTH_SLACK if one is not None else None
        checks.append({
            "target": f"{what} with {THREADS[-1]} threads no more than with 1 "
                      f"(<= {GROWTH_FACTOR:g}x + {GROWTH_SLACK})",
            "scenario": NAME, "holdfast": many, "reference": one,
            "reference_from": _label("holdfast", THREADS[0]),
            "ratio": many / one if many is not None and one else None,
            "limit": f"<= {GROWTH_FACTOR:g}x + {GROWTH_SLACK}", "unit": "connections",
            "pass": None if many is None or limit is None else many <= limit})
    return checks


def _closed_words(record, threads):
    closed = ((record.get("rows") or {}).get(str(threads)) or {}).get("metrics", {}).get(
        "closed_by_reason")
    if not closed:
        return ""
    return " (closed: " + ", ".join(f"{k} {v}" for k, v in sorted(closed.items())) + ")"


def one_line(record):
    """The session log's line for one run of the scenario."""
    m = record["metrics"]
    parts = []
    for threads in THREADS:
        if m.get(f"requests_x{threads}") is None:
            continue
        reuse = m.get(f"reuse_x{threads}")
        parts.append(
            f"×{threads}: {m[f'requests_x{threads}']:,} req, opened "
            f"{m.get(f'opened_x{threads}')}, held max {m.get(f'held_max_x{threads}')} "
            f"end {m.get(f'held_end_x{threads}')}, reuse "
            + (f"{reuse * 100:.2f}%" if reuse is not None else "–")
            + f", errors {m.get(f'errors_x{threads}')}, p99 {m.get(f'p99_us_x{threads}')} µs"
            + _closed_words(record, threads))
    return "  ".join(parts)

