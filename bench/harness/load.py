"""Runs the load generators (wrk, bench-load) and turns their output into one result shape.

Every load result is a dict with `requests`, `ok`, `non_2xx`, `socket_errors`, `errors`
(non-2xx plus socket errors), `duration_s`, `rps`, `latency_us` (p50, p90, p99, p999, max,
mean) and `loadgen_cpu_s` (user + system time of the load generator). Load generators run
pinned to the load core, with a timeout of their duration plus a margin.
"""

import json
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
