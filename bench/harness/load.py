"""Runs the load generators (wrk, bench-load, h2load) and turns their output into one
result shape.

`bench-load grpc` adds to it `messages` (echoed right) and `messages_per_s`; its
`requests` and `rps` count gRPC calls, its `latency_us` each message's round trip.

Every load result is a dict with `requests`, `ok`, `non_2xx`, `socket_errors`, `errors`
(non-2xx plus socket errors), `duration_s`, `rps`, `latency_us` (p50, p90, p99, p999, max,
mean; h2load reports only mean and max) and `loadgen_cpu_s` (user + system time of the
load generator). Load generators run pinned to the load core, with a timeout of their
duration plus a margin.
"""

import json
import re
import time

from . import procs

class LoadError(RuntimeError):
    """The load generator failed to run or printed nothing the harness understands."""


def _last_json(text, prefix=""):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith(prefix + "{"):
            try:
                return json.loads(line[len(prefix) :])
            except json.JSONDecodeError:
                continue
    return None


def wrk(ctx, name, url, *, duration_s, connections=64, closing=False, timeout_s=None,
        netns=None):
    """wrk -t1 -cN -dDs --latency, keep-alive or with `Connection: close` on every request.

    With `timeout_s`, `--timeout`: a response that takes longer counts as a timeout (wrk's
    own default is 2 s as well, so this only spells it out where the scenario depends on it).
    """
    argv = [
        ctx.bins["wrk"], "-t1", f"-c{connections}", f"-d{int(duration_s)}s", "--latency",
        "-s", ctx.wrk_script,
    ]
    if timeout_s is not None:
        argv += ["--timeout", f"{int(timeout_s)}s"]
    if closing:
        argv += ["-H", "Connection: close"]
    argv.append(url)
    done = procs.run(
        name, argv, log_dir=ctx.log_dir, timeout_s=duration_s + 30, cpu=procs.LOAD_CPU, netns=netns
    )
    summary = _last_json(done.stdout, "WRKJSON ")
    if summary is None:
        raise LoadError(f"wrk printed no summary (exit {done.returncode}): {done.stderr[-500:]}")
    errors = summary["errors"]
    socket_errors = errors["connect"] + errors["read"] + errors["write"] + errors["timeout"]
    duration = summary["duration_us"] / 1e6
    requests = summary["requests"]
    return {
        "tool": "wrk",
        "argv": done.argv,
        "requests": requests,
        "ok": requests - errors["status"],
        "non_2xx": errors["status"],
        "socket_errors": socket_errors,
        "socket_errors_by_kind": {k: errors[k] for k in ("connect", "read", "write", "timeout")},
        "errors": errors["status"] + socket_errors,
        "duration_s": duration,
        "rps": requests / duration if duration else 0.0,
        "latency_us": summary["latency_us"],
        "loadgen_cpu_s": done.cpu_s,
    }


# h2load's summary lines (nghttp2 1.52), e.g.
#   finished in 10.00s, 120345.60 req/s, 14.46MB/s
#   requests: 1203456 total, 1203520 started, 1203456 done, 1203456 succeeded, 0 failed, 0 errored, 0 timeout
#   status codes: 1203456 2xx, 0 3xx, 0 4xx, 0 5xx
#   time for request:      154us     11.79ms       385us       195us    98.60%
_H2_FINISHED = re.compile(r"^finished in ([\d.]+)(us|ms|s), ([\d.]+) req/s", re.M)
_H2_REQUESTS = re.compile(
    r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
    r"(\d+) errored, (\d+) timeout", re.M)
_H2_STATUS = re.compile(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", re.M)
_H2_REQUEST_TIME = re.compile(r"^time for request:\s+(\S+)\s+(\S+)\s+(\S+)", re.M)
_H2_PROTOCOL = re.compile(r"^Application protocol: (\S+)", re.M)
# Over TLS (an https:// URL) h2load also says what the handshake chose, e.g.
#   TLS Protocol: TLSv1.3
#   Cipher: TLS_AES_256_GCM_SHA384
_H2_TLS_PROTOCOL = re.compile(r"^TLS Protocol: (\S+)", re.M)
_H2_TLS_CIPHER = re.compile(r"^Cipher: (\S+)", re.M)
_H2_UNITS_US = {"us": 1.0, "ms": 1000.0, "s": 1e6}


def _h2_time_us(text):
    """h2load's `385us`, `11.79ms`, `1.02s` in microseconds."""
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    return round(float(match.group(1)) * _H2_UNITS_US[match.group(2)]) if match else None


def h2load(ctx, name, url, *, connections, streams, duration_s=None, requests=None):
    """h2load -t1 -cN -mM over HTTP/2 with prior knowledge (h2c, an http:// URL) or over
    TLS with h2 chosen by ALPN (an https:// URL; h2load does not verify the certificate),
    for `duration_s` whole seconds (-D) or for a number of `requests` (-n).

    `requests` counts those done in the window; `errors` h2load's failed requests, of them
    `socket_errors` the ones that failed below HTTP (stream or connection errors, timeouts)
    and `non_2xx` the rest. h2load reports no latency percentiles, only the mean and max
    time per request.
    """
    argv = [ctx.bins["h2load"], "-t1", f"-c{connections}", f"-m{streams}"]
    if duration_s is not None:
        argv += ["-D", str(int(duration_s))]
        timeout_s = duration_s + 30
    else:
        argv += ["-n", str(requests)]
        timeout_s = 30
    argv.append(url)
    done = procs.run(name, argv, log_dir=ctx.log_dir, timeout_s=timeout_s, cpu=procs.LOAD_CPU)
    finished = _H2_FINISHED.search(done.stdout)
    counts = _H2_REQUESTS.search(done.stdout)
    status = _H2_STATUS.search(done.stdout)
    if not (finished and counts and status):
        raise LoadError(f"h2load printed no summary (exit {done.returncode}): "
                        f"{(done.stdout + done.stderr)[-500:]}")
    # h2load says how long the run took in the unit that fits: a probe of a few requests
    # to a fast origin finishes in microseconds.
    seconds = float(finished.group(1)) * _H2_UNITS_US[finished.group(2)] / 1e6
    _total, _started, done_n, succeeded, failed, errored, timeouts = (
        int(g) for g in counts.groups())
    timing = _H2_REQUEST_TIME.search(done.stdout)
    latency = {}
    if timing:
        latency = {"max": _h2_time_us(timing.group(2)), "mean": _h2_time_us(timing.group(3))}
    protocol = _H2_PROTOCOL.search(done.stdout)
    tls_protocol = _H2_TLS_PROTOCOL.search(done.stdout)
    tls_cipher = _H2_TLS_CIPHER.search(done.stdout)
    return {
        "tool": "h2load",
        "argv": done.argv,
        "protocol": protocol.group(1) if protocol else None,
        "tls_protocol": tls_protocol.group(1) if tls_protocol else None,
        "tls_cipher": tls_cipher.group(1) if tls_cipher else None,
        "requests": done_n,
        "ok": succeeded,
        "status_2xx": int(status.group(1)),
        "non_2xx": failed - errored,
        "socket_errors": errored,
        "socket_errors_by_kind": {"timeout": timeouts, "other": errored - timeouts},
        "errors": failed,
        "duration_s": seconds,
        "rps": done_n / seconds if seconds else 0.0,
        "latency_us": latency,
        "loadgen_cpu_s": done.cpu_s,
    }


def _bench_load(ctx, name, mode, args, *, timeout_s, netns=None):
    argv = [ctx.bins["bench-load"], mode, *[str(a) for a in args]]
    done = procs.run(
        name, argv, log_dir=ctx.log_dir, timeout_s=timeout_s, cpu=procs.LOAD_CPU, netns=netns
    )
    result = _last_json(done.stdout)
    if result is None:
        raise LoadError(
            f"bench-load {mode} printed no JSON (exit {done.returncode}): {done.stderr[-500:]}"
        )
    result["argv"] = done.argv
    result["loadgen_cpu_s"] = done.cpu_s
    return result


def rate(ctx, name, url, *, rate, duration_s, connections=64, warmup_s=1.0, netns=None):
    """bench-load rate: a fixed request rate, for latency percentiles without saturation."""
    result = _bench_load(
        ctx, name, "rate",
        ["--url", url, "--rate", rate, "--duration", f"{duration_s}s",
         "--connections", connections, "--warmup", f"{warmup_s}s"],
        timeout_s=duration_s + warmup_s + 30, netns=netns,
    )
    result["tool"] = "bench-load rate"
    result["errors"] = result.get("non_2xx", 0) + result.get("socket_errors", 0)
    return result


def hosts(ctx, name, url, *, rate, duration_s, connections, hosts, steady, bursty, idle_s,
          burst_s):
    """bench-load hosts: `rate` with each request's Host from a schedule (`hosts` with
    `{}` for the number): `steady` hosts all the time, `bursty` hosts only in a burst of
    `burst_s` after every `idle_s`."""
    result = _bench_load(
        ctx, name, "hosts",
        ["--url", url, "--rate", rate, "--duration", f"{duration_s}s",
         "--connections", connections, "--hosts", hosts, "--steady", steady,
         "--bursty", bursty, "--idle", f"{idle_s}s", "--burst", f"{burst_s}s"],
        timeout_s=duration_s + 30,
    )
    result["tool"] = "bench-load hosts"
    result["errors"] = result.get("non_2xx", 0) + result.get("socket_errors", 0)
    return result


def mixed(ctx, name, url, *, keepalive, closing, duration_s, netns=None):
    """bench-load mixed: keep-alive and closing clients together, with a per-second timeline."""
    result = _bench_load(
        ctx, name, "mixed",
        ["--url", url, "--keepalive", keepalive, "--closing", closing,
         "--duration", f"{duration_s}s", "--interval", "1s"],
        timeout_s=duration_s + 60, netns=netns,
    )
    result["tool"] = "bench-load mixed"
    return result


def handshakes(ctx, name, url, *, ca, connections, duration_s, resume):
    """bench-load handshakes: a new TLS connection (and handshake) per request, closed loop;
    with `resume` each client offers the session it got last time."""
    args = ["--url", url, "--ca", ca, "--connections", connections,
            "--duration", f"{duration_s}s"]
    if resume:
        args.append("--resume")
    result = _bench_load(ctx, name, "handshakes", args, timeout_s=duration_s + 30)
    result["tool"] = "bench-load handshakes"
    return result


# How long bench-load grpc may still take after its duration: calls under way finish, each
# within its 10 s bound.
GRPC_GRACE_S = 40


def grpc(ctx, name, url, *, connections, streams, messages, payload_bytes, duration_s):
    """bench-load grpc: closed-loop gRPC calls over h2c, `streams` at once on each of
    `connections` connections, each sending `messages` messages of `payload_bytes` (1: a
    unary call; more: a bidirectional stream, each message sent once the echo of the one
    before came back), for `duration_s` seconds (a float: the check runs a fraction of
    one)."""
    result = _bench_load(
        ctx, name, "grpc",
        ["--url", url, "--connections", connections, "--streams", streams,
         "--messages", messages, "--payload", payload_bytes,
         "--duration", f"{round(duration_s * 1000)}ms"],
        timeout_s=duration_s + GRPC_GRACE_S,
    )
    result["tool"] = "bench-load grpc"
    return result


def burst(ctx, name, url, *, connections, timeout_s=180):
    """bench-load burst: `connections` clients, one request each, all at once."""
    result = _bench_load(
        ctx, name, "burst", ["--url", url, "--connections", connections], timeout_s=timeout_s
    )
    result["tool"] = "bench-load burst"
    return result


class Holder:
    """bench-load hold: keeps idle client connections open until stopped; `silent`
    connections send nothing at all (no request)."""

    def __init__(self, ctx, name, url, *, connections, hold_s, silent=False):
        argv = [ctx.bins["bench-load"], "hold", "--url", url,
                "--connections", str(connections), "--hold", f"{int(hold_s)}s"]
        if silent:
            argv.append("--silent")
        self.child = procs.spawn(name, argv, log_dir=ctx.log_dir, cpu=procs.LOAD_CPU)

    def wait_holding(self, timeout_s=90):
        """The `holding` event ({"connections", "failed"}), once every connection is open."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.child.stdout_text().splitlines():
                if '"holding"' in line:
                    return json.loads(line)
            if not self.child.is_alive():
                raise LoadError(f"bench-load hold exited early: {self.child.stderr_tail(500)}")
            time.sleep(0.1)
        raise LoadError(f"bench-load hold did not report `holding` within {timeout_s} s")

    def stop(self):
        """Stops holding; returns the final JSON it printed, if any."""
        self.child.stop(grace_s=10)
        lines = [l for l in self.child.stdout_text().splitlines() if l.startswith("{")]
        for line in reversed(lines):
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("event") != "holding":
                return event
        return None
