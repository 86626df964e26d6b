"""Turns run records into results: medians with min-max, the target checks, the JSON file,
the markdown tables and charts, and the generated part of BENCHMARKS.md."""

import json
import re
import statistics
from pathlib import Path

from . import contenders, numbers, scenarios, svg, threads_reuse

MARK_START = "<!-- results:start -->"
MARK_END = "<!-- results:end -->"
# The HTTPS scenarios' generated section (from results/https.json), inside BENCHMARKS.md's
# hand-written HTTPS section.
HTTPS_MARKS = ("<!-- https-results:start -->", "<!-- https-results:end -->")
# The HTTP/2 scenarios' generated section (from results/h2.json), inside BENCHMARKS.md's
# hand-written HTTP/2 section.
H2_MARKS = ("<!-- h2-results:start -->", "<!-- h2-results:end -->")
# The gRPC and HTTP/2-over-TLS scenarios' generated section (from
# results/grpc-h2-tls.json); appended to BENCHMARKS.md by the first run that writes it.
GRPC_H2_TLS_MARKS = ("<!-- grpc-h2-tls-results:start -->", "<!-- grpc-h2-tls-results:end -->")
# The performance scenarios' generated section (from results/perf.json), inside
# BENCHMARKS.md's hand-written Performance section.
PERF_MARKS = ("<!-- perf-results:start -->", "<!-- perf-results:end -->")

# Metric keys aggregated per (scenario, contender); latency percentiles are flattened.
METRICS = (
    "rps", "requests", "errors", "p50_us", "p90_us", "p99_us", "p999_us", "max_us",
    "cpu_us_per_request", "cpu_user_us_per_request", "cpu_sys_us_per_request",
    "cpu_us_per_request_schedstat", "proxy_cpu_share", "origin_cpu_share", "loadgen_cpu_share",
    "rss_kb", "rss_kb_max", "hwm_kb", "upstream_requests", "upstream_connections", "reuse",
    "requests_per_upstream_connection", "time_wait_client", "time_wait_upstream",
    "idle_rss_kb", "idle_clients_open_after", "first_error_s",
    "idle_connections", "rss_kb_start", "rss_kb_one_pool", "rss_kb_two_pools",
    "bytes_per_idle_connection", "bytes_per_idle_connection_upper", "read_s_after_first_burst",
    "proxy_core_other", "non_2xx", "timeouts", "upstream_connections_warmup",
    "upstream_connections_total", "upstream_connections_per_client", "upstream_open_max",
    "connect_eaddrnotavail", "silent_connections", "rss_kb_held", "rss_kb_after", "rss_kb_left",
    "bytes_per_silent_connection", "bytes_left_per_connection", "silent_closed_by_proxy",
    "held_s", "establish_s", "listen_backlog", "failures",
    # HTTPS: the HTTPS origin's handshake counts, holdfast's own, and https-handshakes'
    # two windows
    "upstream_tls_full", "upstream_tls_resumed", "upstream_tls_failed",
    "upstream_tls_handshakes", "upstream_tls_per_request", "upstream_tls_resumed_share",
    "upstream_tls_full_warmup", "upstream_tls_resumed_warmup", "holdfast_tls_full",
    "holdfast_tls_resumed",
    # HTTP/2: h2load's mean latency, the h2c origin's HTTP/2 counts, connections open at
    # the origin at the window's end, holdfast's gauge, the bound on upstream connections
    "mean_us", "upstream_h2_connections", "upstream_h2_requests", "upstream_h2_share",
    "upstream_h2_open_end", "upstream_open_end", "origin_max_streams",
    "holdfast_h2_connections", "upstream_connections_bound",
    # gRPC: messages echoed right and their rate, the proxy's CPU per message, good calls
    # (and the per-request figures under the names of calls)
    "messages", "messages_per_s", "cpu_us_per_message", "cpu_user_us_per_message",
    "cpu_sys_us_per_message", "grpc_ok", "calls_per_s", "cpu_us_per_call",
    "cpu_user_us_per_call", "cpu_sys_us_per_call",
    # latency at one rate per round: the capacity (the lower of the wrk probe and the
    # open-loop calibration's estimate), the rate asked, its share of the
    # contender's own capacity and the share reached, bench-load's own lateness and
    # requests it never sent
    "capacity_rps", "probe_rps", "open_loop_rps", "capacity_errors", "rate_asked",
    "capacity_share", "rate_achieved_share",
    "max_send_lag_us", "unsent",
) + tuple(f"{key}_{window}" for window in scenarios.HANDSHAKE_WINDOWS
          for key in scenarios.HANDSHAKE_WINDOW_KEYS) + threads_reuse.METRICS

# holdfast's CPU per request over floor's (the smallest HTTP/1.1 relay) on keepalive-tiny.
FLOOR_CPU_LIMIT = 1.1

# silent-clients targets for holdfast: RSS per silent client connection, and what is left
# once they all closed (a tenth of that budget per connection, 2 MB for 10,000).
SILENT_BYTES_LIMIT = 2000
SILENT_LEFT_BYTES_LIMIT = 200


def _flat(metrics):
    flat = dict(metrics)
    for key, value in (metrics.get("latency_us") or {}).items():
        flat[f"{key}_us"] = value
    return flat


def aggregate(records):
    """{scenario: {contender: {metric: {median, min, max, n}, "runs": n_ok, "failed": n}}}."""
    out = {}
    for rec in records:
        cell = out.setdefault(rec["scenario"], {}).setdefault(
            rec["contender"], {"runs": 0, "failed": 0, "_values": {}})
        if not rec["ok"]:
            cell["failed"] += 1
            continue
        cell["runs"] += 1
        for key, value in _flat(rec["metrics"]).items():
            if key in METRICS and isinstance(value, (int, float)) and not isinstance(value, bool):
                cell["_values"].setdefault(key, []).append(value)
    for per_contender in out.values():
        for cell in per_contender.values():
            for key, values in cell.pop("_values").items():
                cell[key] = {"median": statistics.median(values), "min": min(values),
                             "max": max(values), "n": len(values)}
    return out


def _median(medians, scenario, contender, metric):
    return medians.get(scenario, {}).get(contender, {}).get(metric, {}).get("median")


def _peers(scenario):
    """The contenders that make "best peer" in `scenario` (its own, else PEERS)."""
    known = scenarios.BY_NAME.get(scenario)
    return (known.peers if known is not None and known.peers else None) or contenders.PEERS


def _best_peer(medians, scenario, metric, lower_is_better):
    found = [(v, name) for name in _peers(scenario)
             if (v := _median(medians, scenario, name, metric)) is not None]
    if not found:
        return None, None
    return min(found) if lower_is_better else max(found)


def _ratio_check(medians, name, scenario, metric, lower_is_better, limit, unit, against=None):
    """A target on holdfast's median of `metric` over the best peer's, or over contender
    `against`'s when given (floor's)."""
    mine = _median(medians, scenario, "holdfast", metric)
    if against is None:
        ref, ref_name = _best_peer(medians, scenario, metric, lower_is_better)
    else:
        ref, ref_name = _median(medians, scenario, against, metric), against
    ratio = mine / ref if mine is not None and ref else None
    if ratio is None:
        passed = None
    else:
        passed = ratio <= limit if lower_is_better else ratio >= limit
    return {"target": name, "scenario": scenario, "holdfast": mine,
            "reference": ref, "reference_from": ref_name, "ratio": ratio,
            "limit": (f"<= {limit:g}x" if lower_is_better else f">= {limit:g}x"),
            "unit": unit, "pass": passed}


def targets(medians, records):
    """The issue's targets, each with holdfast's value, the reference and pass/fail/None."""
    checks = []

    def ratio_check(*args):
        checks.append(_ratio_check(medians, *args))

    ratio_check("CPU per request <= 0.75x best peer", "keepalive-tiny", "cpu_us_per_request",
                True, 0.75, "µs/req")
    ratio_check("CPU per request <= 1.0x best peer", "keepalive-50k", "cpu_us_per_request",
                True, 1.0, "µs/req")
    ratio_check("requests/s >= 1.15x best peer", "keepalive-tiny", "rps", False, 1.15, "req/s")
    ratio_check("p99 no worse than best peer", "rate-latency", "p99_us", True, 1.0, "µs")
    # floor is no peer but the smallest relay (bench/tools/src/bin/floor.rs): holdfast may
    # cost at most a tenth more than relaying the bytes does.
    ratio_check(f"CPU per request <= {FLOOR_CPU_LIMIT:g}x floor", "keepalive-tiny",
                "cpu_us_per_request", True, FLOOR_CPU_LIMIT, "µs/req", "floor")

    for scenario in ("keepalive-tiny", "closing-tiny"):
        reuse = _median(medians, scenario, "holdfast", "reuse")
        checks.append({"target": "reuse >= 99.9% of requests on a reused upstream connection",
                       "scenario": scenario, "holdfast": reuse, "reference": None,
                       "reference_from": None, "ratio": None, "limit": ">= 0.999",
                       "unit": "share", "pass": None if reuse is None else reuse >= 0.999})

    def worst_errors(contender):
        values = [r["metrics"].get("errors") for r in records
                  if r["scenario"] == "port-exhaustion" and r["contender"] == contender and r["ok"]]
        values = [v for v in values if v is not None]
        return values

    mine = worst_errors("holdfast")
    others = {name: worst_errors(name) for name in ("nginx-default", "nginx-recipe")}
    if mine and all(others.values()):
        passed = max(mine) == 0 and all(statistics.median(v) > 0 for v in others.values())
    else:
        passed = None
    checks.append({
        "target": "port exhaustion: 0 errors for holdfast (every run), errors for nginx-default "
                  "and nginx-recipe (median)",
        "scenario": "port-exhaustion", "holdfast": max(mine) if mine else None,
        "reference": {k: statistics.median(v) if v else None for k, v in others.items()},
        "reference_from": "nginx-default, nginx-recipe", "ratio": None, "limit": "0 vs > 0",
        "unit": "errors", "pass": passed})

    def failures_of(contender):
        return [r["metrics"]["failures"] for r in records
                if r["scenario"] == "c500-netns" and r["contender"] == contender and r["ok"]
                and r["metrics"].get("failures") is not None]

    mine = failures_of("holdfast")
    others = {name: statistics.median(v) for name in ("nginx-default", "nginx-keepalive32",
                                                        "haproxy")
              if (v := failures_of(name))}
    checks.append({
        "target": "500 clients in 1000 local ports: 0 failed requests for holdfast (every "
                  "run), counting error responses and socket errors but not timeouts",
        "scenario": "c500-netns", "holdfast": max(mine) if mine else None,
        "reference": others or None, "reference_from": "median of the others",
        "ratio": None, "limit": "0", "unit": "errors",
        "pass": (max(mine) == 0) if mine else None})

    per_silent = _median(medians, "silent-clients", "holdfast", "bytes_per_silent_connection")
    ref, ref_name = _best_peer(medians, "silent-clients", "bytes_per_silent_connection", True)
    checks.append({"target": "memory per silent client connection < 2 kB",
                   "scenario": "silent-clients", "holdfast": per_silent, "reference": ref,
                   "reference_from": ref_name, "ratio": None,
                   "limit": f"< {SILENT_BYTES_LIMIT} bytes", "unit": "bytes",
                   "pass": None if per_silent is None else per_silent < SILENT_BYTES_LIMIT})
    left = _median(medians, "silent-clients", "holdfast", "bytes_left_per_connection")
    ref, ref_name = _best_peer(medians, "silent-clients", "bytes_left_per_connection", True)
    checks.append({"target": "RSS back near the start once the silent clients closed",
                   "scenario": "silent-clients", "holdfast": left, "reference": ref,
                   "reference_from": ref_name, "ratio": None,
                   "limit": f"<= {SILENT_LEFT_BYTES_LIMIT} bytes per connection held",
                   "unit": "bytes",
                   "pass": None if left is None else left <= SILENT_LEFT_BYTES_LIMIT})

    per_conn = _median(medians, "pool-memory", "holdfast", "bytes_per_idle_connection")
    checks.append({"target": "memory per idle pooled upstream connection < 20 kB",
                   "scenario": "pool-memory", "holdfast": per_conn, "reference": None,
                   "reference_from": None, "ratio": None, "limit": "< 20000 bytes",
                   "unit": "bytes", "pass": None if per_conn is None else per_conn < 20000})
    return checks


# holdfast's upstream TLS handshakes per request with keep-alive clients (https-origin).
HTTPS_HANDSHAKES_PER_REQUEST_LIMIT = 0.01


def https_targets(medians):
    """The HTTPS targets: in https-origin, fewer than 1% upstream TLS handshakes per
    request for holdfast, and CPU per request at most the best peer's."""
    per_request = _median(medians, "https-origin", "holdfast", "upstream_tls_per_request")
    ref, ref_name = _best_peer(medians, "https-origin", "upstream_tls_per_request", True)
    return [
        {"target": "upstream TLS handshakes per request < 1% (keep-alive clients)",
         "scenario": "https-origin", "holdfast": per_request, "reference": ref,
         "reference_from": ref_name, "ratio": None,
         "limit": f"< {HTTPS_HANDSHAKES_PER_REQUEST_LIMIT:.0%}", "unit": "share of requests",
         "pass": (None if per_request is None
                  else per_request < HTTPS_HANDSHAKES_PER_REQUEST_LIMIT)},
        _ratio_check(medians, "CPU per request <= 1.0x best peer", "https-origin",
                     "cpu_us_per_request", True, 1.0, "µs/req"),
    ]


def h2_targets(medians, records):
    """The HTTP/2 targets: in h2-to-h1 and h2-to-h2c, holdfast's CPU per request at most
    the best peer's and no errors in any run; to the h2c origin, at most
    ceil(streams in flight / the origin's max streams) + 1 upstream connections open at
    once (the most in any run)."""
    checks = []
    for scenario in scenarios.H2:
        if scenario not in medians:
            continue
        checks.append(_ratio_check(medians, "CPU per request <= 1.0x best peer", scenario,
                                   "cpu_us_per_request", True, 1.0, "µs/req"))
        runs = [r for r in records if r["scenario"] == scenario
                and r["contender"] == "holdfast" and r["ok"]]
        errors = [r["metrics"].get("errors") or 0 for r in runs]
        checks.append({"target": "no errors (every run)", "scenario": scenario,
                       "holdfast": max(errors) if errors else None, "reference": None,
                       "reference_from": None, "ratio": None, "limit": "0",
                       "unit": "errors", "pass": (max(errors) == 0) if errors else None})
    if "h2-to-h2c" in medians:
        runs = [r for r in records if r["scenario"] == "h2-to-h2c"
                and r["contender"] == "holdfast" and r["ok"]]
        peaks = [r["metrics"]["upstream_open_max"] for r in runs
                 if r["metrics"].get("upstream_open_max") is not None]
        bounds = [r["metrics"]["upstream_connections_bound"] for r in runs
                  if r["metrics"].get("upstream_connections_bound") is not None]
        bound = min(bounds) if bounds else None
        ref, ref_name = _best_peer(medians, "h2-to-h2c", "upstream_open_max", True)
        checks.append({
            "target": "upstream connections open at once <= ceil(streams / origin's max "
                      "streams) + 1 (most in any run)",
            "scenario": "h2-to-h2c", "holdfast": max(peaks) if peaks else None,
            "reference": ref, "reference_from": ref_name, "ratio": None,
            "limit": f"<= {bound}" if bound is not None else "–", "unit": "connections",
            "pass": (max(peaks) <= bound) if peaks and bound is not None else None})
    return checks


# holdfast's CPU per request over the best of nginx-tuned and HAProxy in https-h2-to-h1.
HTTPS_H2_CPU_LIMIT = 0.9
# The CPU target of each gRPC and HTTP/2-over-TLS scenario: (metric, what, unit, limit).
GRPC_H2_TLS_CPU_TARGETS = {
    "grpc-unary": ("cpu_us_per_call", "CPU per call", "µs/call", 1.0),
    "grpc-streaming": ("cpu_us_per_message", "CPU per message", "µs/msg", 1.0),
    "https-h2-to-h1": ("cpu_us_per_request", "CPU per request", "µs/req", HTTPS_H2_CPU_LIMIT),
}


def grpc_h2_tls_targets(medians, records):
    """The gRPC and HTTP/2-over-TLS targets, for the scenarios that ran: holdfast's CPU per
    call (grpc-unary) and per message (grpc-streaming) at most the best peer's (1.0x), its
    CPU per request in https-h2-to-h1 at most 0.9x the better of nginx-tuned and HAProxy,
    and no errors in any run of each."""
    checks = []
    for scenario in scenarios.GRPC_H2_TLS:
        if scenario not in medians:
            continue
        metric, what, unit, limit = GRPC_H2_TLS_CPU_TARGETS[scenario]
        checks.append(_ratio_check(medians, f"{what} <= {limit:.1f}x best peer", scenario,
                                   metric, True, limit, unit))
        checks.append(_no_errors_check(records, scenario))
    return checks


def _no_errors_check(records, scenario):
    """holdfast had no errors in any run of `scenario`: the most in one run, against 0."""
    runs = [r for r in records if r["scenario"] == scenario
            and r["contender"] == "holdfast" and r["ok"]]
    errors = [r["metrics"].get("errors") or 0 for r in runs]
    return {"target": "no errors (every run)", "scenario": scenario,
            "holdfast": max(errors) if errors else None, "reference": None,
            "reference_from": None, "ratio": None, "limit": "0", "unit": "errors",
            "pass": (max(errors) == 0) if errors else None}


def perf_targets(medians):
    """The performance targets, for the scenarios of scenarios.PERF that ran: in each
    latency scenario, holdfast's p99 and p99.9 at most the best peer's (medians)."""
    checks = []
    for name in scenarios.PERF:
        if name not in medians:
            continue
        if scenarios.BY_NAME[name].capacity_share is not None:
            checks += [
                _ratio_check(medians, "p99 latency <= 1.0x best peer", name, "p99_us", True,
                             1.0, "µs"),
                _ratio_check(medians, "p99.9 latency <= 1.0x best peer", name, "p999_us", True,
                             1.0, "µs"),
            ]
    if threads_reuse.NAME in medians:
        checks += threads_reuse.targets(medians)
    return checks


# Largest results file written indented; a larger one is written without indentation
# (about 40% smaller), so results stay small enough to keep in git.
JSON_INDENTED_LIMIT = 600_000


def write_json(path, document):
    text = json.dumps(document, indent=1, sort_keys=False) + "\n"
    if len(text.encode()) > JSON_INDENTED_LIMIT:
        text = json.dumps(document, separators=(",", ":"), sort_keys=False) + "\n"
    Path(path).write_text(text)


# ---- markdown -------------------------------------------------------------------------------

def _num(value, digits=0):
    if value is None:
        return "–"
    if digits == 0:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def _cell(stat, fmt):
    """'median (min–max)' when runs differ, else just the median."""
    if not stat:
        return "–"
    med, lo, hi = fmt(stat["median"]), fmt(stat["min"]), fmt(stat["max"])
    if stat["n"] > 1 and lo != hi:
        return f"{med} ({lo}–{hi})"
    return med


_us = numbers.us


def _mb(v):
    return f"{v / 1024:.1f}"


_pct = numbers.pct


def _pct3(v):
    return f"{v * 100:.3f}%"


def _share(v):
    return f"{v * 100:.0f}%"


COLUMNS = {
    "rps": ("req/s", lambda v: _num(v)),
    "p50_us": ("p50", _us),
    "p90_us": ("p90", _us),
    "p99_us": ("p99", _us),
    "p999_us": ("p99.9", _us),
    "max_us": ("max", _us),
    "cpu_us_per_request": ("CPU µs/req", lambda v: _num(v, 2)),
    "cpu_user_us_per_request": ("user µs/req", lambda v: _num(v, 2)),
    "cpu_sys_us_per_request": ("sys µs/req", lambda v: _num(v, 2)),
    "cpu_us_per_request_schedstat": ("CPU µs/req (schedstat)", lambda v: _num(v, 2)),
    "proxy_cpu_share": ("proxy core busy", _share),
    "loadgen_cpu_share": ("load gen CPU", _share),
    "origin_cpu_share": ("origin CPU", _share),
    "rss_kb": ("RSS MB (end)", _mb),
    "hwm_kb": ("peak RSS MB", _mb),
    "idle_rss_kb": ("RSS MB, 10k idle", _mb),
    "idle_clients_open_after": ("idle clients still open after", lambda v: _num(v)),
    "upstream_connections": ("upstream conns opened", lambda v: _num(v)),
    "requests_per_upstream_connection": ("req per upstream conn", lambda v: _num(v)),
    "reuse": ("reuse", _pct),
    "errors": ("errors", lambda v: _num(v)),
    "time_wait_client": ("TIME_WAIT client side", lambda v: _num(v)),
    "time_wait_upstream": ("TIME_WAIT upstream side", lambda v: _num(v)),
    "requests": ("requests", lambda v: _num(v)),
    "first_error_s": ("first error at s", lambda v: _num(v)),
    "idle_connections": ("idle pooled conns", lambda v: _num(v)),
    "rss_kb_start": ("RSS MB at start", _mb),
    "rss_kb_one_pool": ("RSS MB after burst 1", _mb),
    "rss_kb_two_pools": ("RSS MB after burst 2", _mb),
    "bytes_per_idle_connection": ("bytes per idle conn", lambda v: _num(v)),
    "bytes_per_idle_connection_upper": ("upper bound, bytes", lambda v: _num(v)),
    "read_s_after_first_burst": ("s idle at 2nd reading", lambda v: _num(v, 1)),
    "proxy_core_other": ("other load on proxy core", _share),
    "non_2xx": ("non-2xx", lambda v: _num(v)),
    "timeouts": ("timeouts", lambda v: _num(v)),
    "upstream_connections_total": ("upstream conns opened, warm-up + window",
                                   lambda v: _num(v)),
    "upstream_connections_per_client": ("opened per client conn", lambda v: _num(v, 2)),
    "upstream_open_max": ("peak upstream conns open", lambda v: _num(v)),
    "connect_eaddrnotavail": ("connect() errno 99 in nginx's log", lambda v: _num(v)),
    "failures": ("errors but timeouts", lambda v: _num(v)),
    "silent_connections": ("silent conns held", lambda v: _num(v)),
    "rss_kb_held": ("RSS MB held", _mb),
    "rss_kb_after": ("RSS MB after close", _mb),
    "rss_kb_left": ("RSS MB not given back", _mb),
    "bytes_per_silent_connection": ("bytes per silent conn", lambda v: _num(v)),
    "bytes_left_per_connection": ("bytes left per conn", lambda v: _num(v)),
    "silent_closed_by_proxy": ("closed by the proxy while held", lambda v: _num(v)),
    "held_s": ("s held at reading", lambda v: _num(v, 1)),
    "establish_s": ("s to connect all", lambda v: _num(v, 1)),
    "listen_backlog": ("listen backlog", lambda v: _num(v)),
    "upstream_tls_handshakes": ("upstream TLS handshakes", lambda v: _num(v)),
    "upstream_tls_full": ("upstream TLS full", lambda v: _num(v)),
    "upstream_tls_resumed": ("upstream TLS resumed", lambda v: _num(v)),
    "upstream_tls_per_request": ("upstream TLS handshakes per request", _pct3),
    "upstream_tls_full_warmup": ("full in warm-up", lambda v: _num(v)),
    "upstream_tls_resumed_warmup": ("resumed in warm-up", lambda v: _num(v)),
    "holdfast_tls_full": ("holdfast's count: full", lambda v: _num(v)),
    "holdfast_tls_resumed": ("holdfast's count: resumed", lambda v: _num(v)),
    "mean_us": ("mean latency", _us),
    "upstream_h2_share": ("upstream requests over HTTP/2", _pct),
    "upstream_h2_connections": ("upstream HTTP/2 conns opened", lambda v: _num(v)),
    "upstream_open_end": ("upstream conns open at end", lambda v: _num(v)),
    "holdfast_h2_connections": ("holdfast's HTTP/2 conns gauge", lambda v: _num(v)),
    "upstream_connections_warmup": ("upstream conns opened in warm-up", lambda v: _num(v)),
    "capacity_rps": ("capacity req/s", lambda v: _num(v)),
    "probe_rps": ("probe req/s (wrk)", lambda v: _num(v)),
    "open_loop_rps": ("open-loop capacity req/s", lambda v: _num(v)),
    "capacity_errors": ("probe errors", lambda v: _num(v)),
    "rate_asked": ("asked req/s", lambda v: _num(v)),
    "capacity_share": ("asked / own capacity", _pct),
    "rate_achieved_share": ("achieved / asked", lambda v: f"{v * 100:.1f}%"),
    "max_send_lag_us": ("load gen lag, max", _us),
    "calls_per_s": ("calls/s", lambda v: _num(v)),
    "cpu_us_per_call": ("CPU µs/call", lambda v: _num(v, 2)),
    "cpu_user_us_per_call": ("user µs/call", lambda v: _num(v, 2)),
    "cpu_sys_us_per_call": ("sys µs/call", lambda v: _num(v, 2)),
    "messages_per_s": ("messages/s", lambda v: _num(v)),
    "cpu_us_per_message": ("CPU µs/msg", lambda v: _num(v, 2)),
    "cpu_user_us_per_message": ("user µs/msg", lambda v: _num(v, 2)),
    "cpu_sys_us_per_message": ("sys µs/msg", lambda v: _num(v, 2)),
}
# https-handshakes' two windows: the same columns, suffixed with the window's name.
for _window in scenarios.HANDSHAKE_WINDOWS:
    COLUMNS.update({
        f"rps_{_window}": (f"{_window} handshakes/s", lambda v: _num(v)),
        f"cpu_us_per_request_{_window}": ("CPU µs/handshake", lambda v: _num(v, 1)),
        f"cpu_user_us_per_request_{_window}": ("user µs/handshake", lambda v: _num(v, 1)),
        f"cpu_sys_us_per_request_{_window}": ("sys µs/handshake", lambda v: _num(v, 1)),
        f"p50_us_{_window}": ("p50", _us),
        f"p99_us_{_window}": ("p99", _us),
        f"proxy_cpu_share_{_window}": ("proxy core busy", _share),
        f"loadgen_cpu_share_{_window}": ("load gen CPU", _share),
        f"origin_cpu_share_{_window}": ("origin CPU", _share),
        f"resumed_share_{_window}": ("resumed (client's count)", _pct),
        f"upstream_connections_{_window}": ("upstream conns opened", lambda v: _num(v)),
        f"errors_{_window}": ("errors", lambda v: _num(v)),
        f"proxy_core_other_{_window}": ("other load on proxy core", _share),
    })

MANY_CLIENT_COLUMNS = ("rps", "p50_us", "p99_us", "errors", "timeouts", "upstream_connections",
                       "upstream_connections_total", "upstream_connections_per_client",
                       "upstream_open_max", "reuse", "cpu_us_per_request",
                       "cpu_user_us_per_request", "cpu_sys_us_per_request", "proxy_cpu_share",
                       "rss_kb", "proxy_core_other")

SCENARIO_COLUMNS = {
    "rate-latency": ("rps", "p50_us", "p90_us", "p99_us", "p999_us", "max_us",
                     "cpu_us_per_request", "cpu_user_us_per_request", "cpu_sys_us_per_request",
                     "proxy_cpu_share", "upstream_connections", "reuse", "errors",
                     "proxy_core_other"),
    "idle-clients": ("rps", "p50_us", "p99_us", "cpu_us_per_request", "cpu_user_us_per_request",
                     "cpu_sys_us_per_request", "proxy_cpu_share", "idle_rss_kb", "rss_kb",
                     "hwm_kb", "idle_clients_open_after", "errors", "proxy_core_other"),
    "port-exhaustion": ("requests", "rps", "errors", "first_error_s", "p99_us",
                        "cpu_us_per_request", "cpu_user_us_per_request",
                        "cpu_sys_us_per_request", "upstream_connections", "reuse",
                        "time_wait_upstream", "time_wait_client"),
    "pool-memory": ("idle_connections", "rss_kb_start", "rss_kb_one_pool", "rss_kb_two_pools",
                    "bytes_per_idle_connection", "bytes_per_idle_connection_upper",
                    "read_s_after_first_burst"),
    "c500": MANY_CLIENT_COLUMNS,
    "c1000": MANY_CLIENT_COLUMNS,
    "c500-netns": ("requests", "rps", "errors", "failures", "non_2xx", "timeouts", "p99_us",
                   "upstream_connections", "upstream_connections_per_client",
                   "upstream_open_max", "time_wait_upstream", "connect_eaddrnotavail",
                   "cpu_us_per_request"),
    "silent-clients": ("silent_connections", "rss_kb_start", "rss_kb_held",
                       "bytes_per_silent_connection", "rss_kb_after", "rss_kb_left",
                       "bytes_left_per_connection", "silent_closed_by_proxy", "establish_s",
                       "held_s", "listen_backlog"),
}
HANDSHAKE_COLUMNS = ("rps", "cpu_us_per_request", "cpu_user_us_per_request",
                     "cpu_sys_us_per_request", "p50_us", "p99_us", "proxy_cpu_share",
                     "loadgen_cpu_share", "origin_cpu_share", "resumed_share",
                     "upstream_connections", "errors", "proxy_core_other")
SCENARIO_COLUMNS.update({
    "https-keepalive-tiny": ("rps", "p50_us", "p99_us", "cpu_us_per_request",
                             "cpu_user_us_per_request", "cpu_sys_us_per_request",
                             "proxy_cpu_share", "loadgen_cpu_share", "origin_cpu_share",
                             "rss_kb", "upstream_connections", "reuse", "errors",
                             "proxy_core_other"),
    "https-origin": ("rps", "p50_us", "p99_us", "cpu_us_per_request", "cpu_user_us_per_request",
                     "cpu_sys_us_per_request", "proxy_cpu_share", "origin_cpu_share",
                     "upstream_connections", "upstream_tls_full", "upstream_tls_resumed",
                     "upstream_tls_per_request", "upstream_tls_full_warmup",
                     "upstream_tls_resumed_warmup", "holdfast_tls_full",
                     "holdfast_tls_resumed", "errors", "proxy_core_other"),
})
H2_COLUMNS = ("rps", "mean_us", "max_us", "cpu_us_per_request", "cpu_user_us_per_request",
              "cpu_sys_us_per_request", "proxy_cpu_share", "loadgen_cpu_share",
              "origin_cpu_share", "rss_kb", "upstream_connections_warmup",
              "upstream_connections", "upstream_open_max", "upstream_open_end", "errors",
              "proxy_core_other")
# gRPC: calls/s and CPU per call (a call is a message in grpc-unary), or per message in
# grpc-streaming; p50 and p99 are one message's round trip.
GRPC_UNARY_COLUMNS = ("calls_per_s", "p50_us", "p99_us", "cpu_us_per_call",
                      "cpu_user_us_per_call", "cpu_sys_us_per_call", "proxy_cpu_share",
                      "loadgen_cpu_share", "origin_cpu_share", "rss_kb",
                      "upstream_connections_warmup", "upstream_connections",
                      "upstream_open_max", "upstream_h2_share", "errors", "proxy_core_other")
GRPC_STREAMING_COLUMNS = ("calls_per_s", "messages_per_s", "p50_us", "p99_us",
                          "cpu_us_per_message", "cpu_user_us_per_message",
                          "cpu_sys_us_per_message", "proxy_cpu_share", "loadgen_cpu_share",
                          "origin_cpu_share", "rss_kb", "upstream_connections",
                          "upstream_open_max", "upstream_h2_share", "errors",
                          "proxy_core_other")
SCENARIO_COLUMNS.update({
    "grpc-unary": GRPC_UNARY_COLUMNS,
    "grpc-streaming": GRPC_STREAMING_COLUMNS,
    "https-h2-to-h1": H2_COLUMNS,
    "h2-to-h1": H2_COLUMNS,
    "h2-to-h2c": H2_COLUMNS[:-2] + ("upstream_h2_share", "holdfast_h2_connections",
                                    "errors", "proxy_core_other"),
})
# Latency at one rate per round: the wrk probe, the open-loop estimate and the capacity
# (the lower of the two), the rate asked and reached, latency, CPU.
LATENCY_COLUMNS = ("probe_rps", "open_loop_rps", "capacity_rps", "rate_asked", "capacity_share",
                   "rps", "rate_achieved_share", "p50_us", "p90_us", "p99_us", "p999_us",
                   "max_us", "errors", "cpu_us_per_request", "cpu_user_us_per_request",
                   "cpu_sys_us_per_request", "proxy_cpu_share", "loadgen_cpu_share",
                   "origin_cpu_share", "max_send_lag_us",
                   "proxy_core_other")
SCENARIO_COLUMNS.update({s.name: LATENCY_COLUMNS for s in scenarios.SCENARIOS
                         if s.capacity_share is not None})
# https-handshakes has one table per window (`https_markdown`).
for _window in scenarios.HANDSHAKE_WINDOWS:
    SCENARIO_COLUMNS[f"https-handshakes/{_window}"] = tuple(
        f"{key}_{_window}" for key in HANDSHAKE_COLUMNS
        if not (key == "resumed_share" and _window == "full"))
DEFAULT_COLUMNS = ("rps", "p50_us", "p99_us", "p999_us", "cpu_us_per_request",
                   "cpu_user_us_per_request", "cpu_sys_us_per_request", "proxy_cpu_share", "loadgen_cpu_share", "origin_cpu_share", "rss_kb",
                   "hwm_kb", "upstream_connections", "requests_per_upstream_connection",
                   "reuse", "errors", "time_wait_client", "time_wait_upstream",
                   "proxy_core_other")


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def scenario_table(name, per_contender, order):
    if name == threads_reuse.NAME:  # a row per contender and thread count
        return threads_reuse.table(per_contender, order)
    keys = SCENARIO_COLUMNS.get(name, DEFAULT_COLUMNS)
    header = ["contender"] + [COLUMNS[k][0] for k in keys]
    rows = []
    for contender in order:
        cell = per_contender.get(contender)
        if cell is None:
            continue
        label = f"**{contender}**" if contender == "holdfast" else contender
        if cell["runs"] == 0:
            rows.append([label] + ["failed"] + ["–"] * (len(keys) - 1))
            continue
        if cell["failed"]:
            label += f" ({cell['failed']} failed)"
        rows.append([label] + [_cell(cell.get(k), COLUMNS[k][1]) for k in keys])
    return _table(header, rows)


def matrix(medians, metric, fmt, scenario_order, contender_order):
    """Contenders down, scenarios across, one metric's medians."""
    cols = [s for s in scenario_order if s in medians and s not in scenarios.NO_REQUESTS]
    rows = []
    for contender in contender_order:
        if not any(contender in medians[s] for s in cols):
            continue
        label = f"**{contender}**" if contender == "holdfast" else contender
        row = [label]
        for s in cols:
            stat = medians[s].get(contender, {}).get(metric)
            row.append(fmt(stat["median"]) if stat else "–")
        rows.append(row)
    return _table(["contender"] + cols, rows)


def cpu_matrix(medians, scenario_order, contender_order):
    """Like `matrix` for CPU per request: 'total (user / sys)' in every cell."""
    cols = [s for s in scenario_order if s in medians and s not in scenarios.NO_REQUESTS]
    rows = []
    for contender in contender_order:
        if not any(contender in medians[s] for s in cols):
            continue
        row = [f"**{contender}**" if contender == "holdfast" else contender]
        for s in cols:
            cell = medians[s].get(contender, {})
            total, user, system = (cell.get(k, {}).get("median") for k in (
                "cpu_us_per_request", "cpu_user_us_per_request", "cpu_sys_us_per_request"))
            if total is None:
                row.append("–")
            elif user is None or system is None:
                row.append(_num(total, 2))
            else:
                row.append(f"{_num(total, 2)} ({_num(user, 2)} / {_num(system, 2)})")
        rows.append(row)
    return _table(["contender"] + cols, rows)


# Units of CPU per unit of work, shown with two decimals.
CPU_UNITS = ("µs/req", "µs/call", "µs/msg")


def _target_value(value, unit):
    if value is None:
        return "–"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_num(v)}" for k, v in value.items())
    if unit == "share":
        return _pct(value)
    if unit == "share of requests":
        return _pct3(value)
    if unit in CPU_UNITS:
        return _num(value, 2)
    return _num(value)


def targets_table(checks):
    rows = []
    for c in checks:
        verdict = {True: "**pass**", False: "**FAIL**", None: "not measured"}[c["pass"]]
        ref = _target_value(c["reference"], c["unit"])
        if c["reference_from"] and not isinstance(c["reference"], dict) and c["reference"]:
            ref += f" ({c['reference_from']})"
        ratio = f"{c['ratio']:.2f}x" if c["ratio"] is not None else "–"
        rows.append([c["target"], c["scenario"], _target_value(c["holdfast"], c["unit"]), ref,
                     ratio, c["limit"], verdict])
    return _table(["target", "scenario", "holdfast", "reference", "ratio", "limit", "result"],
                  rows)


# ---- charts ---------------------------------------------------------------------------------

MANY_CLIENT_PANELS = (
    ("rps", "requests/s (higher is better)"),
    ("p99_us", "p99 latency, µs (lower is better)"),
    ("upstream_connections_total", "upstream connections opened, warm-up + window"),
)

CHART_PANELS = {
    "rate-latency": (("p99_us", "p99 latency, µs (lower is better)"),
                     ("cpu_us_per_request", "proxy CPU µs per request (lower is better)")),
    "idle-clients": (("rps", "requests/s (higher is better)"),
                     ("rss_kb_max", "RSS MB during the window (lower is better)")),
    "c500": MANY_CLIENT_PANELS,
    "c1000": MANY_CLIENT_PANELS,
    "c500-netns": (("rps", "requests/s (higher is better)"),
                   ("errors", "errors (lower is better)"),
                   ("upstream_connections", "upstream connections opened (lower is better)")),
    "silent-clients": (("bytes_per_silent_connection",
                        "RSS bytes per silent connection (lower is better)"),
                       ("rss_kb_left", "RSS MB not given back after close (lower is better)")),
}
CHART_PANELS.update({
    "https-handshakes": (
        ("rps_full", "full handshakes/s (higher is better)"),
        ("cpu_us_per_request_full", "proxy CPU µs per full handshake (lower is better)"),
        ("rps_resumed", "resumed handshakes/s (higher is better)"),
        ("cpu_us_per_request_resumed", "proxy CPU µs per resumed handshake (lower is better)"),
    ),
    "https-origin": (
        ("rps", "requests/s (higher is better)"),
        ("cpu_us_per_request", "proxy CPU µs per request (lower is better)"),
        ("upstream_tls_per_request", "upstream TLS handshakes per request (lower is better)"),
    ),
})
CHART_PANELS.update({
    name: (("rps", "requests/s (higher is better)"),
           ("cpu_us_per_request", "proxy CPU µs per request (lower is better)"),
           ("upstream_open_max", "upstream connections open at once (lower is better)"))
    for name in scenarios.H2 + ("https-h2-to-h1",)
})
CHART_PANELS.update({
    "grpc-unary": (("calls_per_s", "calls/s (higher is better)"),
                   ("cpu_us_per_call", "proxy CPU µs per call (lower is better)"),
                   ("upstream_open_max", "upstream connections open at once (lower is better)")),
    "grpc-streaming": (("messages_per_s", "messages/s (higher is better)"),
                       ("cpu_us_per_message", "proxy CPU µs per message (lower is better)"),
                       ("upstream_open_max",
                        "upstream connections open at once (lower is better)")),
})
CHART_PANELS.update({
    s.name: (("p50_us", "p50 latency, µs (lower is better)"),
             ("p99_us", "p99 latency, µs (lower is better)"),
             ("p999_us", "p99.9 latency, µs (lower is better)"),
             ("cpu_us_per_request", "proxy CPU µs per request (lower is better)"))
    for s in scenarios.SCENARIOS if s.capacity_share is not None
})
CHART_PANELS[threads_reuse.NAME] = threads_reuse.CHART_PANELS
DEFAULT_PANELS = (("rps", "requests/s (higher is better)"),
                  ("cpu_us_per_request", "proxy CPU µs per request (lower is better)"))


def charts(results_dir, medians, records, contender_order, subtitle):
    """Writes one SVG per scenario (plus the port-exhaustion timeline); returns {scenario: file}."""
    written = {}
    for name, per_contender in medians.items():
        if name == "pool-memory":
            continue
        if name == "port-exhaustion":
            file = "port-exhaustion.svg"
            (Path(results_dir) / file).write_text(_exhaustion_chart(records, contender_order,
                                                                   subtitle))
            written[name] = file
            continue
        panels = []
        for metric, heading in CHART_PANELS.get(name, DEFAULT_PANELS):
            rows = []
            for contender in contender_order:
                cell = per_contender.get(contender)
                if cell is None:
                    continue
                stat = cell.get(metric)
                scale = 1 / 1024 if metric.startswith("rss") else 1
                if stat:
                    rows.append((contender, stat["median"] * scale, stat["min"] * scale,
                                 stat["max"] * scale, contender == "holdfast"))
                else:
                    rows.append((contender, None, None, None, contender == "holdfast"))
            panels.append((heading, rows))
        file = f"{name}.svg"
        (Path(results_dir) / file).write_text(svg.bars(name, panels, subtitle=subtitle))
        written[name] = file
    return written


def _exhaustion_chart(records, contender_order, subtitle):
    """ok/s and errors/s over time, from each contender's median run by error count."""
    ok_series, err_series = [], []
    for contender in contender_order:
        runs = [r for r in records if r["scenario"] == "port-exhaustion"
                and r["contender"] == contender and r["ok"] and r.get("load")]
        if not runs:
            continue
        runs.sort(key=lambda r: r["metrics"].get("errors") or 0)
        timeline = runs[len(runs) // 2]["load"].get("timeline", [])
        ok_series.append((contender, [(p["t_s"], p.get("ok", 0)) for p in timeline]))
        err_series.append((contender, [(p["t_s"], p.get("errors", 0)) for p in timeline]))
    return svg.lines("port-exhaustion: 1000 local ports, tcp_tw_reuse=0",
                     [("successful requests per second", ok_series),
                      ("errors per second", err_series)], subtitle=subtitle)


# ---- BENCHMARKS.md --------------------------------------------------------------------------

BENCHMARKS_SKELETON = """# Benchmarks

holdfast against nginx and HAProxy, side by side in one run, on one machine: same origin,
same CPU budget (one pinned core per proxy), bounded load on loopback. What each scenario
measures, and how to run it, is in [bench/README.md](bench/README.md); run it with

```sh
bench/run
```

{start}
{end}

## Optimisation log

"""


def splice(path, generated, *, marks=(MARK_START, MARK_END)):
    """Replaces the text between the markers in BENCHMARKS.md; the rest of the file stays."""
    path = Path(path)
    mark_start, mark_end = marks
    block = f"{mark_start}\n{generated.strip()}\n{mark_end}"
    if path.exists():
        text = path.read_text()
    else:
        text = BENCHMARKS_SKELETON.format(start=MARK_START, end=MARK_END)
    pattern = re.compile(re.escape(mark_start) + r".*?" + re.escape(mark_end), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def _machine_line(m):
    """The machine a results section was measured on: CPU, cores, memory, kernel, OS."""
    return (f"- **Machine:** {m['cpu_model']}, {m['cores']} cores, {m['ram_gib']} GiB RAM, "
            f"Linux {m['kernel']} ({m['os']})")


def _commands_and_failures(document):
    """A results section's closing lines: the commands it ran, then its failed runs."""
    out = ["### Commands", "", "```sh"] + document["commands"] + ["```", ""]
    failures = [r for r in document["runs"] if not r["ok"]]
    if failures:
        out += ["### Failed runs", ""]
        for r in failures:
            out.append(f"- round {r['round']}, {r['scenario']}, {r['contender']}: "
                       f"{r['error'].splitlines()[0] if r['error'] else 'unknown'}")
        out.append("")
    return out


def _scenario_section(name, tables, chart_files, image_prefix):
    """A scenario's part of a results section: its heading, what it is, its `tables`
    (each followed by a blank line) and its chart when one was drawn."""
    out = [f"### {name}", "", scenarios.BY_NAME[name].about + ".", ""]
    for table in tables:
        out += [table, ""]
    if name in chart_files:
        out += [f"![{name}]({image_prefix}{chart_files[name]})", ""]
    return out


def _ratio_table(medians, rows_spec):
    """holdfast against the best peer per (scenario, metric, what it is, lower is better)
    row: holdfast's median, the best peer's and their ratio."""
    rows = []
    for scenario, metric, what, lower in rows_spec:
        mine = _median(medians, scenario, "holdfast", metric)
        ref, ref_name = _best_peer(medians, scenario, metric, lower)
        fmt = _pct3 if metric == "upstream_tls_per_request" else (
            (lambda v: _num(v, 2)) if "cpu" in metric else (lambda v: _num(v)))
        ratio = f"{mine / ref:.2f}x" if mine is not None and ref else "–"
        rows.append([scenario, what, fmt(mine) if mine is not None else "–",
                     f"{fmt(ref)} ({ref_name})" if ref is not None else "–", ratio])
    return _table(["scenario", "metric", "holdfast", "best peer", "holdfast / best peer"],
                  rows)


def floor_table(medians):
    """holdfast against floor, the smallest HTTP/1.1 relay, in every scenario both ran: CPU
    per request and requests/s, each with holdfast's over floor's (ratio of medians); ""
    when there is no such scenario."""
    rows = []
    for name in (s.name for s in scenarios.SCENARIOS):
        if "holdfast" not in medians.get(name, {}) or "floor" not in medians.get(name, {}):
            continue
        row = [name]
        for metric, fmt in (("cpu_us_per_request", lambda v: _num(v, 2)), ("rps", _num)):
            mine = _median(medians, name, "holdfast", metric)
            floor = _median(medians, name, "floor", metric)
            row += [fmt(mine), fmt(floor),
                    f"{mine / floor:.2f}x" if mine is not None and floor else "–"]
        rows.append(row)
    if not rows:
        return ""
    return _table(["scenario", "holdfast CPU µs/req", "floor CPU µs/req", "holdfast / floor",
                   "holdfast req/s", "floor req/s", "holdfast / floor"], rows)


def floor_line(medians):
    """holdfast's CPU per request over floor's, per scenario both ran (ratio of medians),
    for the log; None when there is no such scenario."""
    parts = []
    for name in (s.name for s in scenarios.SCENARIOS):
        mine = _median(medians, name, "holdfast", "cpu_us_per_request")
        floor = _median(medians, name, "floor", "cpu_us_per_request")
        if mine is not None and floor:
            parts.append(f"{name} {mine / floor:.2f}x ({_num(mine, 2)} µs against "
                         f"{_num(floor, 2)} µs)")
    if not parts:
        return None
    return ("holdfast / floor CPU per request (floor is the smallest HTTP/1.1 relay, not a "
            f"peer; target <= {FLOOR_CPU_LIMIT:g}x on keepalive-tiny): " + "; ".join(parts))


def markdown(document, chart_files, *, image_prefix):
    """The generated results section: machine, versions, commands, targets and tables."""
    m = document["machine"]
    opts = document["options"]
    medians = document["medians"]
    scenario_order = [s.name for s in scenarios.SCENARIOS if s.name in medians]
    contender_order = [c.name for c in contenders.CONTENDERS]
    v = m["versions"]
    out = [
        "## Results",
        "",
        f"Generated by `{document['command']}` on {m['date']}; the text between the "
        "`results` markers is rewritten on every run.",
        "",
        _machine_line(m) + "; `ip_local_port_range` "
        f"{m['sysctl']['net.ipv4.ip_local_port_range']}, `tcp_tw_reuse` "
        f"{m['sysctl']['net.ipv4.tcp_tw_reuse']}.",
        f"- **Versions:** holdfast `{document['holdfast_commit']}`; {v.get('nginx')}; "
        f"{v.get('haproxy')}; {v.get('wrk')}; node {v.get('node')}; {v.get('rustc')}.",
        f"- **Method:** {opts['runs']} run(s) per scenario and contender, contenders interleaved "
        f"within each round (order rotated per round); {opts['duration_s']:g} s windows after a "
        f"{opts['warmup_s']:g} s warm-up; port-exhaustion {opts['exhaustion_s']:g} s from a cold "
        "start. Cells show the median and, when runs differ, (min–max). Proxies run on core 0 "
        "(`taskset -c 0`, one worker or thread); wrk, bench-load and the origin share core 1.",
        f"- **rate-latency** runs at {opts['rate']:,} req/s over 64 connections. "
        + _saturation_note(document),
        "",
        "### Targets",
        "",
        "Best peer is the better of nginx-tuned and HAProxy for each metric, from the medians; "
        "the floor target's reference is floor, the smallest relay (see below), not a peer.",
        "",
        targets_table(document["targets"]),
        "",
    ]
    floor = floor_table(medians)
    if floor:
        out += [
            "### holdfast / floor",
            "",
            "floor ([bench/tools/src/bin/floor.rs](bench/tools/src/bin/floor.rs)) is the "
            "smallest HTTP/1.1 relay that still does a proxy's job: one thread, pooled "
            "upstream connections, heads forwarded byte for byte without their hop-by-hop "
            "lines, no routing, limits, timeouts, logs or metrics. It is information, not a "
            "peer comparison: it is never the best peer, and its CPU per request is about "
            "what relaying the bytes costs on this machine, which a proxy doing more can "
            f"approach but hardly go below (target: at most {FLOOR_CPU_LIMIT:g}x on "
            "keepalive-tiny). Ratios of medians:",
            "",
            floor,
            "",
        ]
    out += [
        "### Summary",
        "",
        "Requests per second (median):",
        "",
        matrix(medians, "rps", lambda x: _num(x), scenario_order, contender_order),
        "",
        "Proxy CPU microseconds per request, utime + stime of all its processes, and in "
        "brackets its user / system (kernel) parts (medians, each on its own, so the parts "
        "need not add up exactly; `direct` has no proxy). The system part is mostly the TCP "
        "stack on loopback, which costs every proxy much the same per connection and per "
        "byte:",
        "",
        cpu_matrix(medians, scenario_order, contender_order),
        "",
        "Requests on a reused upstream connection, 1 − connections opened / requests, counted "
        "by the origin (median):",
        "",
        matrix(medians, "reuse", _pct, scenario_order, contender_order),
        "",
        "Errors, non-2xx and socket errors as the load generator saw them (median):",
        "",
        matrix(medians, "errors", lambda x: _num(x), scenario_order, contender_order),
        "",
    ]
    out += ["### Reading the tables", ""] + _notes(document) + [""]
    for name in scenario_order:
        out += _scenario_section(name, [scenario_table(name, medians[name], contender_order)],
                                 chart_files, image_prefix)
    out += _commands_and_failures(document)
    return "\n".join(out)


def _notes(document):
    """What a reader needs to interpret this run: columns, limits, and the environment."""
    opts = document["options"]
    notes = [
        "- *CPU µs/req*: user + system time (utime + stime in /proc/PID/stat) of all the "
        "proxy's processes (nginx's master and worker alike) over the window, divided by the "
        "requests served in it; *user µs/req* and *sys µs/req* are its two parts. The system "
        "part, mostly the kernel's TCP stack on loopback, is a large share for every proxy; "
        "the user part is the proxy's own code. The JSON also holds the same total from the "
        "threads' schedstat (`cpu_us_per_request_schedstat`) as a cross-check. "
        "*proxy core busy*: that CPU "
        "time over the window (100% = one saturated core). *load gen CPU* and *origin CPU*: "
        "the same for wrk or bench-load and for the origin, which share the other core; when "
        "they add up to about 100% while the proxy core is not saturated, the load side "
        "limited requests/s, not the proxy.",
        "- *other load on proxy core*: busy time of the proxy's core not spent in the proxy "
        "(from /proc/stat), i.e. other processes on the host; high values mean the run was "
        "disturbed.",
        "- *upstream conns opened* and *reuse* come from the origin's own counters, read "
        "before and after the window (after a warm-up, except port-exhaustion and c500-netns, "
        "which start cold). *TIME_WAIT*: sockets that entered TIME_WAIT during the window, on the "
        "client side (the proxy's listening port) and the upstream side (the origin's port).",
        "- *errors*: non-2xx responses plus socket errors (connect, read, write, timeout) as "
        "the load generator counted them.",
    ]
    if opts.get("nofile", 0) < 200_000:
        notes.append(
            f"- The open-file limit here is {opts.get('nofile')} and cannot be raised "
            f"(no CAP_SYS_RESOURCE), so idle-clients and silent-clients hold "
            f"{opts.get('idle_clients'):,} client connections and pool-memory pools "
            f"{opts.get('pool_connections'):,} "
            "connections; HAProxy runs with `no strict-limits` below the descriptor count "
            "it would size for its maxconn.")
    notes.append(
        "- pool-memory: one holdfast with two upstream groups. Burst 1 (N requests at once) "
        "leaves N idle connections in pool a; burst 2, the same through pool b, runs while "
        "they sit idle. Burst 2's client and in-flight memory reuses what burst 1 freed, so "
        "the RSS it adds, divided by pool a's idle connections (from holdfast's /status), is "
        "what an idle pooled connection holds. The upper bound divides all RSS burst 1 added "
        "by the connections it left idle (client-side memory the allocator kept included).")
    notes.append(
        "- c500, c1000, c500-netns: *upstream conns opened* counts the origin's accepted "
        "connections over the window, and *opened per client conn* divides it by the "
        "number of client connections N, which wrk opens anew for the window: 1 is one "
        "upstream connection per client connection, kept for the whole window; below 1, "
        "connections kept from the warm-up were reused; far above 1, connections were "
        "closed and opened again under steady load. *warm-up + window* counts from a cold "
        "start. *peak upstream conns open*: the most the origin had open at once (`ss`, "
        "every 0.5 s in the window). *timeouts*: responses that took over 2 s (wrk "
        "`--timeout 2s`), part of *errors*. nginx-keepalive32 is nginx set up as 1.29.7 "
        "sets itself up by default (`keepalive 32`, HTTP/1.1, `Connection \"\"`). In "
        "c500-netns every closed upstream connection holds one of 1000 local ports for 60 s; "
        "running out shows as error responses and failed connections (*errors but "
        "timeouts*, which the target counts), and *connect() errno 99* counts nginx's "
        "failed connects. Timeouts there come with 500 connections on the shared core "
        "whatever the proxy, `direct` included.")
    notes.append(
        "- silent-clients: N client connections that never send a byte. RSS (all the "
        "proxy's processes) at the start, once all N are accepted (*held*), and after they "
        "all closed and the proxy closed its side (*after close*). *bytes per silent conn* "
        "= (held − start) / connections open at the proxy when RSS was read; *not given "
        "back* = after close − start. Kernel socket memory is not in RSS. *s to connect "
        "all*: how long bench-load took to open them; seconds mean SYNs were dropped "
        "because more connections waited to be accepted than the *listen backlog* allows, "
        "and retried. holdfast closes a connection that sent no complete request head 10 s "
        "after the accept, so a run in which fewer than 90% are open at the reading fails.")
    return notes


def _saturation_note(document, scenario="rate-latency"):
    """Whether every contender reached the rate asked of it in `scenario` (a fixed-rate
    scenario marks a run `saturated` below 97% of it)."""
    runs = [r for r in document["runs"] if r["scenario"] == scenario and r["ok"]]
    if not runs:
        return ""
    saturated = sorted({r["contender"] for r in runs if r["metrics"].get("saturated")})
    if saturated:
        return ("These contenders fell short of the rate in at least one run, so their "
                f"latency includes queueing: {', '.join(saturated)}.")
    return "Every contender sustained it in every run, so latency is measured below saturation."


# ---- BENCHMARKS.md, HTTPS section -----------------------------------------------------------

# Rows of the ratio table: (scenario, metric, what it is, lower is better).
HTTPS_RATIOS = (
    ("https-keepalive-tiny", "rps", "requests/s", False),
    ("https-keepalive-tiny", "cpu_us_per_request", "CPU µs per request", True),
    ("https-handshakes", "rps_full", "full handshakes/s", False),
    ("https-handshakes", "cpu_us_per_request_full", "CPU µs per full handshake", True),
    ("https-handshakes", "rps_resumed", "resumed handshakes/s", False),
    ("https-handshakes", "cpu_us_per_request_resumed", "CPU µs per resumed handshake", True),
    ("https-origin", "rps", "requests/s", False),
    ("https-origin", "cpu_us_per_request", "CPU µs per request", True),
    ("https-origin", "upstream_tls_per_request", "upstream TLS handshakes per request", True),
)


def https_ratio_table(medians):
    """holdfast against the best peer (nginx-tuned or HAProxy, per metric) on each metric."""
    return _ratio_table(medians, HTTPS_RATIOS)


def _tls_probes(document, contender_order):
    """What each contender negotiated with the harness's check before the load."""
    seen = {}
    for rec in document["runs"]:
        probe = rec.get("tls_probe")
        if probe and rec["contender"] not in seen:
            seen[rec["contender"]] = probe
    rows = [[name, seen[name]["version"], seen[name]["cipher"], seen[name].get("alpn") or "–"]
            for name in contender_order if name in seen]
    return _table(["contender", "version", "cipher", "ALPN"], rows) if rows else ""


def https_markdown(document, chart_files, *, image_prefix):
    """The generated part of BENCHMARKS.md's HTTPS section, from results/https.json."""
    m = document["machine"]
    opts = document["options"]
    medians = document["medians"]
    order = [c.name for c in contenders.CONTENDERS]
    v = m["versions"]
    tls = document.get("tls") or {}
    out = [
        f"Generated by `{document['command']}` on {m['date']} into "
        "[bench/results/https.json](bench/results/https.json); the text between the "
        "`https-results` markers is rewritten by every run that writes that file.",
        "",
        _machine_line(m) + ".",
        f"- **Versions:** holdfast `{document['holdfast_commit']}`; {v.get('nginx')}; "
        f"{v.get('haproxy')}; {v.get('wrk')}; {v.get('openssl')}; {v.get('rustc')}; "
        "bench-origin and bench-load with rustls 0.23 (ring).",
        f"- **Method:** {opts['runs']} run(s) per scenario and contender, contenders "
        "interleaved within each round (order rotated per round); "
        f"{opts['duration_s']:g} s windows after a {opts['warmup_s']:g} s warm-up "
        "(https-handshakes: two windows, full then resumed). Cells show the median of the "
        f"{opts['runs']} runs and, when they differ, (min–max). Proxies run on core 0 (one "
        "worker or thread); the load generator and the origins share core 1.",
        f"- **Certificates:** made at run time by the harness: a CA and one server "
        f"certificate ({tls.get('key_type', '?')}, for "
        f"{' and '.join(tls.get('server_names', []))}), used by every TLS listener.",
    ]
    if not opts.get("holdfast_tls", True):
        out.append("- **holdfast did not run:** the binary measured has no TLS flags "
                   "(`--tls-cert`, `--tls-key`, `--upstream-ca`).")
    probes = _tls_probes(document, order)
    if probes:
        out += ["", "What each contender negotiated with the harness's check before the "
                "load (Python's `ssl`, OpenSSL's defaults):", "", probes]
    out += ["", "### Targets", "", targets_table(document["targets"]), "",
            "### holdfast against the best peer", "",
            "Best peer: the better of nginx-tuned and HAProxy on each metric, from the "
            "medians.", "", https_ratio_table(medians), ""]
    for name in (n for n in scenarios.HTTPS if n in medians):
        if name == "https-handshakes":
            tables = [f"{window.capitalize()} handshakes:\n\n"
                      + scenario_table(f"{name}/{window}", medians[name], order)
                      for window in scenarios.HANDSHAKE_WINDOWS]
        else:
            tables = [scenario_table(name, medians[name], order)]
        out += _scenario_section(name, tables, chart_files, image_prefix)
    out += _commands_and_failures(document)
    return "\n".join(out)


# ---- BENCHMARKS.md, HTTP/2 section ----------------------------------------------------------

# Rows of the ratio table: (scenario, metric, what it is, lower is better).
H2_RATIOS = (
    ("h2-to-h1", "rps", "requests/s", False),
    ("h2-to-h1", "cpu_us_per_request", "CPU µs per request", True),
    ("h2-to-h1", "upstream_open_max", "upstream connections open at once", True),
    ("h2-to-h2c", "rps", "requests/s", False),
    ("h2-to-h2c", "cpu_us_per_request", "CPU µs per request", True),
    ("h2-to-h2c", "upstream_open_max", "upstream connections open at once", True),
)


def h2_ratio_table(medians):
    """holdfast against the best peer of each scenario on each metric, for the scenarios
    that ran."""
    return _ratio_table(medians, [row for row in H2_RATIOS if row[0] in medians])


def h2_floor_line(medians):
    """holdfast's CPU per request in h2-to-h2c over h2-floor's (ratio of medians): how far
    holdfast is from the h2 crate's own cost. Information, not a target; None unless both
    ran there."""
    mine = _median(medians, "h2-to-h2c", "holdfast", "cpu_us_per_request")
    floor = _median(medians, "h2-to-h2c", "h2-floor", "cpu_us_per_request")
    if mine is None or not floor:
        return None
    return (f"holdfast / h2-floor CPU per request (h2-to-h2c; information, not a target): "
            f"{mine / floor:.2f}x ({_num(mine, 2)} µs against {_num(floor, 2)} µs; h2-floor is "
            "the smallest relay on the h2 crate, a floor for holdfast, not a peer)")


def h2_markdown(document, chart_files, *, image_prefix):
    """The generated part of BENCHMARKS.md's HTTP/2 section, from results/h2.json."""
    m = document["machine"]
    opts = document["options"]
    medians = document["medians"]
    order = [c.name for c in contenders.CONTENDERS]
    v = m["versions"]
    out = [
        f"Generated by `{document['command']}` on {m['date']} into "
        "[bench/results/h2.json](bench/results/h2.json); the text between the "
        "`h2-results` markers is rewritten by every run that writes that file.",
        "",
        _machine_line(m) + ".",
        f"- **Versions:** holdfast `{document['holdfast_commit']}`; {v.get('nginx')}; "
        f"{v.get('haproxy')}; {v.get('h2load') or 'h2load'}; {v.get('rustc')}; "
        "bench-origin with hyper 1 (HTTP/2 by the h2 crate).",
        f"- **Method:** {opts['runs']} run(s) per scenario and contender, contenders "
        "interleaved within each round (order rotated per round); "
        f"{opts['duration_s']:g} s windows after a {opts['warmup_s']:g} s warm-up. Cells "
        f"show the median of the {opts['runs']} runs and, when they differ, (min–max). "
        "Proxies run on core 0 (one worker or thread); h2load and the origins share core 1.",
    ]
    if not opts.get("holdfast_h2", True):
        out.append("- **holdfast did not run:** the binary measured has no HTTP/2 flags "
                   "(`--h2c`).")
    for scenario, who in (opts.get("sitting_out") or {}).items():
        for name, why in who.items():
            out.append(f"- **{name} did not run {scenario}:** {why}.")
    out += ["", "### Targets", "", targets_table(document["targets"]), "",
            "### holdfast against the best peer", "",
            "Best peer: the better of nginx-tuned and HAProxy (h2-to-h1), of nginx-grpc and "
            "HAProxy (h2-to-h2c), on each metric, from the medians.", "",
            h2_ratio_table(medians), ""]
    floor = h2_floor_line(medians)
    if floor:
        out += [floor + ".", ""]
    for name in (n for n in scenarios.H2 if n in medians):
        out += _scenario_section(name, [scenario_table(name, medians[name], order)],
                                 chart_files, image_prefix)
    out += _commands_and_failures(document)
    return "\n".join(out)


# ---- BENCHMARKS.md, gRPC and HTTP/2-over-TLS section ----------------------------------------

# Rows of the ratio table: (scenario, metric, what it is, lower is better).
GRPC_H2_TLS_RATIOS = (
    ("grpc-unary", "calls_per_s", "calls/s", False),
    ("grpc-unary", "cpu_us_per_call", "CPU µs per call", True),
    ("grpc-unary", "upstream_open_max", "upstream connections open at once", True),
    ("grpc-streaming", "messages_per_s", "messages/s", False),
    ("grpc-streaming", "cpu_us_per_message", "CPU µs per message", True),
    ("grpc-streaming", "upstream_open_max", "upstream connections open at once", True),
    ("https-h2-to-h1", "rps", "requests/s", False),
    ("https-h2-to-h1", "cpu_us_per_request", "CPU µs per request", True),
    ("https-h2-to-h1", "upstream_open_max", "upstream connections open at once", True),
)


def grpc_h2_tls_markdown(document, chart_files, *, image_prefix):
    """The generated gRPC and HTTP/2-over-TLS section of BENCHMARKS.md, from
    results/grpc-h2-tls.json."""
    m = document["machine"]
    opts = document["options"]
    medians = document["medians"]
    order = [c.name for c in contenders.CONTENDERS]
    v = m["versions"]
    out = [
        "## gRPC and HTTP/2 over TLS", "",
        f"Generated by `{document['command']}` on {m['date']} into "
        "[bench/results/grpc-h2-tls.json](bench/results/grpc-h2-tls.json); the text between "
        "the `grpc-h2-tls-results` markers is rewritten by every run that writes that file.",
        "",
        _machine_line(m) + ".",
        f"- **Versions:** holdfast `{document['holdfast_commit']}`; {v.get('nginx')}; "
        f"{v.get('haproxy')}; {v.get('h2load') or 'h2load'}; {v.get('rustc')}; "
        "bench-load grpc on the h2 crate's client; bench-origin's gRPC echo with hyper 1.",
        f"- **Method:** {opts['runs']} run(s) per scenario and contender, contenders "
        "interleaved within each round (order rotated per round); "
        f"{opts['duration_s']:g} s windows after a {opts['warmup_s']:g} s warm-up. Cells "
        f"show the median of the {opts['runs']} runs and, when they differ, (min–max). "
        "Proxies run on core 0 (one worker or thread); the load generators and the origins "
        "share core 1. In the gRPC tables p50 and p99 are one message's round trip.",
    ]
    for scenario, who in (opts.get("sitting_out") or {}).items():
        for name, why in who.items():
            out.append(f"- **{name} did not run {scenario}:** {why}.")
    out += ["", "### Targets", "", targets_table(document["targets"]), "",
            "### holdfast against the best peer", "",
            "Best peer: the better of nginx-tuned (grpc_pass in the gRPC scenarios) and "
            "HAProxy, on each metric, from the medians.", "",
            _ratio_table(medians, [row for row in GRPC_H2_TLS_RATIOS if row[0] in medians]),
            ""]
    for name in (n for n in scenarios.GRPC_H2_TLS if n in medians):
        out += _scenario_section(name, [scenario_table(name, medians[name], order)],
                                 chart_files, image_prefix)
    out += _commands_and_failures(document)
    return "\n".join(out)


# ---- BENCHMARKS.md, Performance section -----------------------------------------------------

def perf_ratio_table(medians):
    """holdfast against the best peer on the latency percentiles of each latency scenario
    that ran."""
    rows = [(name, metric, what, True) for name in scenarios.PERF if name in medians
            and scenarios.BY_NAME[name].capacity_share is not None
            for metric, what in (("p99_us", "p99 latency, µs"),
                                 ("p999_us", "p99.9 latency, µs"))]
    return _ratio_table(medians, rows)


def perf_markdown(document, chart_files, *, image_prefix):
    """The generated part of BENCHMARKS.md's Performance section, from results/perf.json."""
    m = document["machine"]
    opts = document["options"]
    medians = document["medians"]
    order = [c.name for c in contenders.CONTENDERS]
    names = [n for n in scenarios.PERF if n in medians]
    v = m["versions"]
    out = [
        f"Generated by `{document['command']}` on {m['date']} into "
        "[bench/results/perf.json](bench/results/perf.json); the text between the "
        "`perf-results` markers is rewritten by every run that writes that file.",
        "",
        _machine_line(m) + ".",
        f"- **Versions:** holdfast `{document['holdfast_commit']}`; {v.get('nginx')}; "
        f"{v.get('haproxy')}; {v.get('wrk')}; {v.get('rustc')}; bench-origin and bench-load.",
        f"- **Method:** {opts['runs']} run(s) per scenario and contender, contenders "
        "interleaved within each round (order rotated per round). Cells show the median of "
        f"the {opts['runs']} runs and, when they differ, (min–max). Proxies run on core 0 "
        "(one worker or thread); wrk, bench-load and the origin share core 1.",
    ]
    latency = [n for n in names if scenarios.BY_NAME[n].capacity_share is not None]
    if latency:
        first = scenarios.BY_NAME[latency[0]]
        share, slices = first.capacity_share, first.slices
        window = scenarios.slice_window_s(opts["duration_s"], first)
        out.append(
            f"- **Latency ({', '.join(latency)}):** in each round, first every proxy is "
            f"probed: started afresh, a {max(1, opts['warmup_s']):g} s wrk warm-up, then a "
            f"{min(scenarios.CAPACITY_PROBE_S, opts['duration_s']):g} s probe (wrk -t1 -c64, "
            "keep-alive; *probe req/s*), then an open-loop calibration: `bench-load rate` at "
            f"{scenarios.CALIBRATION_SHARE:.0%} of the probe for "
            f"{min(scenarios.CALIBRATION_S, opts['duration_s']):g} s after a "
            f"{scenarios.CALIBRATION_WARMUP_S:g} s warm-up, whose CPU per request gives the "
            "rate that would fill the proxy's core (*open-loop capacity*; 1 s / CPU per "
            "request). A proxy's *capacity* is the lower of the two: a closed-loop probe "
            "overstates what a proxy sustains open loop, where each wake-up serves fewer "
            "requests. Then every contender "
            f"gets `bench-load rate` over 64 keep-alive connections at one rate, round({share:g} "
            "x the lowest capacity among the proxies of the round) (*asked req/s*; *asked / "
            f"own capacity* is its share of each proxy's own capacity), in {slices} slices "
            "interleaved across the contenders (A B C D A B C D ...), each started afresh "
            f"with a {opts['warmup_s']:g} s warm-up and a {window:g} s window; cells are "
            f"medians over the {opts['runs']} x {slices} slices. Slices because this machine's "
            "speed drifts by up to a third over seconds: a slow stretch saturates whichever "
            "proxy runs during it, and short interleaved slices spread it over all of them. "
            "One rate for all because the "
            "load generator and the origin share the other core: a higher rate loads them "
            "more and lengthens every tail, which would count against the proxy with the "
            "most capacity. Latency "
            "counts from each request's due time when its connection was still busy with the "
            "previous one (no coordinated omission), else from when it went out; *load gen "
            "lag, max* is the most bench-load sent late on an idle connection, its own "
            "timer and CPU lateness. CPU per request covers the warm-up and the window "
            "(same rate), over the requests the origin counted.")
        for name in latency:
            out.append(f"- **{name}:** " + _saturation_note(document, name))
    out += ["", "### Targets", "", targets_table(document["targets"]), "",
            "### holdfast against the best peer", "",
            "Best peer: the better of nginx-tuned and HAProxy on each metric, from the "
            "medians.", "", perf_ratio_table(medians), ""]
    for name in names:
        out += _scenario_section(name, [scenario_table(name, medians[name], order)],
                                 chart_files, image_prefix)
    out += _commands_and_failures(document)
    return "\n".join(out)
