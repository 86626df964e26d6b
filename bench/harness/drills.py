"""The slow-reader drills of `bench/drill`: clients that hold a proxy's responses without
reading them, beside one well-behaved client, against holdfast and nginx in one run.

zero-window: 8 HTTP/2 connections (h2c, from 127.0.0.3) each open 128 streams asking for
a 10 MB response and never send a WINDOW_UPDATE (`bench-load zero-window`), while the
well-behaved client (h2c, from 127.0.0.2) sends a small request 20 times a second, each
with a 5 s deadline (`bench-load steady`).

slow-readers: 1,000 HTTP/1.1 clients (from 127.0.0.3) each GET a 10 MB response with a
4 kB receive buffer set before the connect and read 1,024 bytes a second
(`bench-load slow-read`), beside the same well-behaved client over HTTP/1.1.

Per proxy, one after the other, on the same origin (bench-origin, `/bytes?n=10485760`;
with `--workers N` it serves at most N responses at once, like an app server with N sync
workers) and the same cores: start the proxy with its config from bench/configs/, check
that it answers the well-behaved client, start both clients together (t = 0) and sample
every second until both are done: upstream connections (ESTABLISHED from the proxy to the
origin port, `ss`, idle kept-alive ones included), the responses the origin has in
progress (started, last byte not yet handed to the socket: what holds an app's workers;
with `--workers`, also the requests waiting for one), the proxy's RSS (/proc), the bytes
in its temporary-file directory
(files there, and files deleted there that the proxy still holds open, as nginx's are),
and the disk's free space (the run stops the proxy if it falls under
`MIN_FREE_BYTES`). CPU time of the proxy over the same stretch. Then stop the proxy,
delete its temporary files, and wait for the origin to let go of its connections.

The misbehaving clients hold on for the window plus the deadline, so they press until the
well-behaved client's last request is answered or given up; they close their
connections then, so a close before that is the proxy's.
"""

import collections
import math
import os
import shutil
import statistics
import time
from dataclasses import dataclass

from . import contenders, load, procs, sockets

MB = 1_000_000
BODY_BYTES = 10 * 1024 * 1024
WELL_BEHAVED_SOURCE = "127.0.0.2"
ATTACKER_SOURCE = "127.0.0.3"
WELL_BEHAVED_PATH = "/tiny"
ATTACK_PATH = f"/bytes?n={BODY_BYTES}"
RATE = 20.0
DEADLINE_S = 5.0
DURATION_S = 60.0
SLICE_S = 5.0
SAMPLE_S = 1.0
# Keep at least this much disk free while a proxy spools; under it the run stops the proxy.
MIN_FREE_BYTES = 2 * 1024**3
# nginx's proxy_max_temp_file_size: the most one response puts in a temporary file.
NGINX_MAX_TEMP_FILE_BYTES = 1024**3
# How long the clients may take past their own end before the harness gives up on them.
CLIENT_GRACE_S = 30.0
# How long the origin may take to close the last proxy's connections.
ORIGIN_SETTLE_S = 30.0


@dataclass(frozen=True)
class Drill:
    name: str
    about: str
    # The well-behaved client speaks HTTP/2 with prior knowledge (the proxies' listeners
    # for this drill speak h2c; nginx's only that).
    h2c: bool
    configs: dict  # proxy -> template in bench/configs/
    # At full scale (--scale 1).
    connections: int
    streams: int  # per connection (zero-window); 1 for slow readers

    def attackers(self, scale):
        """(connections, streams per connection) at `scale`."""
        return max(1, math.ceil(self.connections * scale)), self.streams

    def requests(self, scale):
        connections, streams = self.attackers(scale)
        return connections * streams


DRILLS = {
    "zero-window": Drill(
        "zero-window",
        "8 HTTP/2 connections x 128 streams of 10 MB, no WINDOW_UPDATE ever",
        h2c=True,
        configs={"holdfast": "holdfast-drill-h2c.toml", "nginx": "nginx-drill-h2c.conf"},
        connections=8, streams=128),
    "slow-readers": Drill(
        "slow-readers",
        "1,000 HTTP/1.1 clients each reading a 10 MB response at 1,024 B/s",
        h2c=False,
        configs={"holdfast": "holdfast-drill-h1.toml", "nginx": "nginx-drill-h1.conf"},
        connections=1000, streams=1),
}

PROXIES = {
    "holdfast": contenders.Contender("holdfast", "holdfast", None,
                                     "holdfast, its defaults, one thread"),
    "nginx": contenders.Contender("nginx", "nginx", None,
                                  "nginx 1.22, proxy_buffering on (its default), "
                                  "nginx-tuned's upstream keepalive, one worker"),
}


class DrillError(RuntimeError):
    """A drill could not run (a proxy did not start, the check failed, no disk)."""


# ---- disk -----------------------------------------------------------------------------------

def spool_estimate(drill, scale):
    """Bytes a buffering proxy may put on disk in one run: every attacking response,
    at most nginx's proxy_max_temp_file_size each."""
    return drill.requests(scale) * min(BODY_BYTES, NGINX_MAX_TEMP_FILE_BYTES)


def check_disk(path, needed):
    """Raises DrillError unless `path`'s file system has `needed` bytes plus the reserve free."""
    free = shutil.disk_usage(path).free
    if free < needed + MIN_FREE_BYTES:
        raise DrillError(
            f"{path} has {free / 1e9:.1f} GB free; a buffering proxy may spool "
            f"{needed / 1e9:.1f} GB in this drill and {MIN_FREE_BYTES / 1e9:.1f} GB must stay "
            "free: use --scale (fewer clients) or --work-dir on a larger file system")
    return free


def temp_usage(directory, pids):
    """(bytes, files) of the regular files under `directory`, and of the files deleted from
    it that one of `pids` still holds open (nginx unlinks its temporary files as soon as it
    has opened them: they use the disk but no longer show in the directory)."""
    directory = str(directory)
    seen = set()
    total = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
                if not target.startswith(directory + "/"):
                    continue
                st = os.stat(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total, len(seen)


# ---- the well-behaved client's numbers --------------------------------------------------------

def _nearest_rank(sorted_values, q):
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def summarize_requests(requests):
    """What the well-behaved client got for `requests` (bench-load steady's entries):
    sent, 2xx, failed by status, timed out, other failures by kind, and latency
    percentiles (from the due time; over the requests answered, whatever their status)."""
    statuses = collections.Counter(r["status"] for r in requests
                                   if r["status"] is not None and not 200 <= r["status"] < 300)
    errors = collections.Counter(r["error"] for r in requests
                                 if r["error"] is not None and r["error"] != "timeout")
    answered = sorted(r["latency_us"] for r in requests if r["status"] is not None)
    return {
        "sent": len(requests),
        "ok": sum(1 for r in requests if r["status"] is not None and 200 <= r["status"] < 300),
        "failed_by_status": {str(k): v for k, v in sorted(statuses.items())},
        "timed_out": sum(1 for r in requests if r["error"] == "timeout"),
        "errors": dict(sorted(errors.items())),
        "latency_ms": {
            "p50": _ms(_nearest_rank(answered, 0.50)),
            "p99": _ms(_nearest_rank(answered, 0.99)),
            "max": _ms(answered[-1] if answered else None),
        },
    }


def _ms(us):
    return None if us is None else round(us / 1000, 1)


def slices(requests, duration_s, shift_s):
    """`summarize_requests` per SLICE_S of due time, from the start of the drill."""
    out = []
    count = max(1, math.ceil(duration_s / SLICE_S))
    for k in range(count):
        lo, hi = k * SLICE_S, (k + 1) * SLICE_S
        chosen = [r for r in requests if lo <= r["due_s"] + shift_s < hi]
        out.append({"from_s": lo, "to_s": min(hi, duration_s)} | summarize_requests(chosen))
    return out


# ---- the misbehaving clients' numbers --------------------------------------------------------

def closes(per_connection, shift_s):
    """When the proxy closed the misbehaving clients' connections (seconds from the start of
    the drill): how many of how many, first, median and last, how many per slice, and how
    many of them before any response head came (a connection the proxy never accepted,
    whose handshake the kernel finished while its accept queue was full, is reset by the
    kernel: it shows here)."""
    closed = [c for c in per_connection if c.get("closed_s") is not None]
    times = sorted(c["closed_s"] + shift_s for c in closed)
    by_slice = collections.Counter(int(t // SLICE_S) for t in times)
    return {
        "closed": len(times),
        "of": len(per_connection),
        "first_s": round(times[0], 2) if times else None,
        "median_s": round(statistics.median(times), 2) if times else None,
        "last_s": round(times[-1], 2) if times else None,
        "per_slice": {f"{k * SLICE_S:g}-{(k + 1) * SLICE_S:g}": n for k, n in sorted(by_slice.items())},
        "how": dict(collections.Counter(c["close"] for c in closed)),
        "before_response": sum(1 for c in closed if not c.get("status") and not c.get("responses")),
    }


def attackers_summary(drill, report, shift_s):
    """The misbehaving clients' report, without the per-connection list of the slow readers
    (a thousand entries) but with their closes."""
    summary = {k: v for k, v in report.items() if k != "per_connection"}
    summary["closes"] = closes(report["per_connection"], shift_s)
    if drill.name == "zero-window":
        summary["per_connection"] = report["per_connection"]
    return summary


# ---- one proxy ------------------------------------------------------------------------------

class Sampler:
    """The once-a-second readings of one proxy during its drill."""

    def __init__(self, running, origin, temp_dir, work_dir):
        self.running = running
        self.origin = origin
        self.temp_dir = temp_dir
        self.work_dir = work_dir
        self.samples = []

    def take(self, t_s):
        pids = self.running.pids()
        rss_kb, _ = procs.memory_kb(pids)
        temp_bytes, temp_files = temp_usage(self.temp_dir, pids)
        upstream = sockets.established_to(self.origin.port)
        # Read after `ss`, so the question's own connection is not counted there; an origin
        # too busy to answer within the stats timeout leaves a gap, not a failed run.
        try:
            stats = self.origin.stats()
        except OSError:
            stats = {}
        workers = stats.get("workers") or {}
        sample = {
            "t_s": round(t_s, 2),
            "upstream": upstream,
            "origin_in_progress": stats.get("in_progress"),
            "origin_waiting": workers.get("waiting"),
            "rss_kb": rss_kb,
            "temp_bytes": temp_bytes,
            "temp_files": temp_files,
            "disk_free_bytes": shutil.disk_usage(self.work_dir).free,
        }
        return sample


def _client_args(drill, ctx, url_base):
    """argv of the misbehaving clients and of the well-behaved one."""
    connections, streams = drill.attackers(ctx.scale)
    hold_s = ctx.duration_s + DEADLINE_S
    if drill.name == "zero-window":
        attack = [ctx.bins["bench-load"], "zero-window", "--url", url_base + ATTACK_PATH,
                  "--connections", connections, "--streams", streams,
                  "--duration", f"{hold_s:g}s", "--bind", ATTACKER_SOURCE]
    else:
        attack = [ctx.bins["bench-load"], "slow-read", "--url", url_base + ATTACK_PATH,
                  "--connections", connections, "--rcvbuf", 4096, "--read-bytes", 1024,
                  "--interval", "1s", "--duration", f"{hold_s:g}s", "--bind", ATTACKER_SOURCE]
    steady = [ctx.bins["bench-load"], "steady", "--url", url_base + WELL_BEHAVED_PATH,
              "--rate", f"{ctx.rate:g}", "--duration", f"{ctx.duration_s:g}s",
              "--deadline", f"{DEADLINE_S:g}s", "--bind", WELL_BEHAVED_SOURCE]
    if drill.h2c:
        steady.append("--h2c")
    return [str(a) for a in attack], [str(a) for a in steady]


def check(drill, ctx, url_base, run_dir):
    """Five requests of the well-behaved client over 1 s: all must be answered 2xx."""
    argv = [ctx.bins["bench-load"], "steady", "--url", url_base + WELL_BEHAVED_PATH,
            "--rate", "5", "--duration", "1s", "--deadline", "2s", "--bind", WELL_BEHAVED_SOURCE]
    if drill.h2c:
        argv.append("--h2c")
    done = procs.run("check", argv, log_dir=run_dir, timeout_s=30, cpu=procs.LOAD_CPU)
    report = load._last_json(done.stdout)
    if not report or report["ok"] != report["sent"]:
        raise DrillError(f"the check through the proxy failed: "
                         f"{(report or {}).get('statuses')} {(report or {}).get('errors')} "
                         f"{done.stderr[-500:]}")
    return {k: report[k] for k in ("sent", "ok", "statuses", "timeouts", "errors", "latency_us")}


def _pool(ctx):
    """holdfast's pool table for `--pool N`, else nothing: the defaults."""
    if not ctx.pool:
        return ""
    return f"\n[upstream.app.pool]\nmax_connections_per_server = {ctx.pool}\n"


def run_proxy(drill, name, ctx, origin, log):
    """The drill against proxy `name`: its record (see the module doc)."""
    run_dir = ctx.session / name
    run_dir.mkdir()
    spool_dir = run_dir / "spool"
    spool_dir.mkdir()
    temp_dir = run_dir / "temp" / "proxy" if name == "nginx" else spool_dir
    template = drill.configs[name]
    running = contenders.start(
        PROXIES[name], origin=origin, ports=ctx.ports, bins=ctx.bins, run_dir=run_dir,
        nofile=ctx.nofile,
        config={"template": template, "values": {"spool_dir": spool_dir, "pool": _pool(ctx)}})
    record = {"proxy": name, "about": PROXIES[name].about, "config": f"bench/configs/{template}",
              "command": running.child.argv}
    try:
        url_base = running.base_url
        record["check"] = check(drill, ctx, url_base, run_dir)
        attack_argv, steady_argv = _client_args(drill, ctx, url_base)
        sampler = Sampler(running, origin, temp_dir, ctx.session)
        pids = running.pids()
        before = sampler.take(0.0)
        cpu_before = procs.cpu_times(pids)
        cores_before = procs.core_times()
        t0 = time.monotonic()
        attackers = procs.spawn("attackers", attack_argv, log_dir=run_dir, cpu=procs.LOAD_CPU)
        attackers_at = time.monotonic() - t0
        steady = procs.spawn("well-behaved", steady_argv, log_dir=run_dir, cpu=procs.LOAD_CPU)
        steady_at = time.monotonic() - t0
        log(f"{drill.name} / {name}: clients started; sampling every {SAMPLE_S:g} s for about "
            f"{ctx.duration_s + DEADLINE_S:g} s")
        deadline = t0 + ctx.duration_s + DEADLINE_S + CLIENT_GRACE_S
        aborted = None
        k = 1
        while attackers.is_alive() or steady.is_alive():
            now = time.monotonic()
            if now > deadline:
                aborted = "the clients did not finish in time"
                break
            time.sleep(max(0.0, t0 + k * SAMPLE_S - now))
            k += 1
            sample = sampler.take(time.monotonic() - t0)
            sampler.samples.append(sample)
            if sample["disk_free_bytes"] < MIN_FREE_BYTES:
                aborted = (f"under {MIN_FREE_BYTES / 1e9:.0f} GB of disk left; the proxy was "
                           "stopped")
                break
            if not running.is_alive():
                aborted = "the proxy exited"
                break
            if k % 10 == 1:
                log(f"  t={sample['t_s']:5.1f} s  upstream {sample['upstream']:5,}  in progress "
                    f"at the origin {sample['origin_in_progress'] or 0:5,}  RSS "
                    f"{sample['rss_kb'] / 1024:7.1f} MB  temp files "
                    f"{sample['temp_bytes'] / MB:9,.1f} MB")
        elapsed = time.monotonic() - t0
        cpu = procs.cpu_times(pids) - cpu_before
        busy = procs.core_busy(cores_before, procs.core_times())
        if aborted:
            running.stop()
            attackers.stop()
            steady.stop()
            raise DrillError(f"{drill.name} / {name}: {aborted}")
        attack_report = load._last_json(attackers.stdout_text())
        steady_report = load._last_json(steady.stdout_text())
        if attack_report is None or steady_report is None:
            raise DrillError(f"{drill.name} / {name}: a client printed no report: "
                             f"{attackers.stderr_tail(500)} {steady.stderr_tail(500)}")
        attackers.stop()
        steady.stop()
    finally:
        running.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)
        shutil.rmtree(spool_dir, ignore_errors=True)
    record |= measure(drill, ctx, sampler, before, steady_report, steady_at, attack_report,
                      attackers_at, cpu, busy, elapsed)
    record["clients"] = {"attackers": attack_argv, "well_behaved": steady_argv}
    _settle_origin(origin, log)
    return record


def measure(drill, ctx, sampler, before, steady_report, steady_at, attack_report, attackers_at,
            cpu, busy, elapsed):
    """The figures of one proxy's drill from its samples and the clients' reports."""
    samples = sampler.samples
    in_window = [s for s in samples if s["t_s"] <= ctx.duration_s + 0.5] or samples
    end = in_window[-1] if in_window else before
    requests = steady_report["requests"]
    return {
        "well_behaved": {
            "protocol": steady_report["protocol"],
            "source": steady_report["source"],
            "rate": steady_report["rate"],
            "deadline_s": steady_report["deadline_s"],
            "connects": steady_report["connects"],
            "first_errors": steady_report.get("first_errors"),
            "whole": summarize_requests(requests),
            "slices": slices(requests, ctx.duration_s, steady_at),
        },
        "attackers": attackers_summary(drill, attack_report, attackers_at),
        "upstream": {"before": before["upstream"],
                     "peak": max((s["upstream"] for s in samples), default=None),
                     "end_of_window": end["upstream"],
                     "last": samples[-1]["upstream"] if samples else None},
        "origin_in_progress": {
            "before": before["origin_in_progress"],
            "peak": max((s["origin_in_progress"] or 0 for s in samples), default=None),
            "end_of_window": end["origin_in_progress"]},
        "origin_waiting": {
            "peak": max((s["origin_waiting"] or 0 for s in samples), default=None)
            if ctx.workers else None},
        "rss_kb": {"before": before["rss_kb"],
                   "peak": max((s["rss_kb"] for s in samples), default=None),
                   "end_of_window": end["rss_kb"],
                   "last": samples[-1]["rss_kb"] if samples else None},
        "temp_bytes": {"peak": max((s["temp_bytes"] for s in samples), default=None),
                       "end_of_window": end["temp_bytes"],
                       "peak_files": max((s["temp_files"] for s in samples), default=None)},
        "cpu_s": {"user": round(cpu.user_s, 2), "sys": round(cpu.sys_s, 2),
                  "total": round(cpu.total_s, 2)},
        "cores_busy": {str(c): round(b, 3) for c, b in sorted(busy.items())},
        "sampled_s": round(elapsed, 1),
        "samples": samples,
    }


def _settle_origin(origin, log):
    """Waits until the origin has no connection left from the proxy just stopped (and,
    with limited workers, none busy), so the next proxy starts from the same place."""
    deadline = time.monotonic() + ORIGIN_SETTLE_S
    while time.monotonic() < deadline:
        stats = origin.stats()
        workers = stats.get("workers") or {}
        if stats["open"] <= 1 and not workers.get("busy") and not workers.get("waiting"):
            return
        time.sleep(0.5)
    log(f"note: the origin still has {origin.stats()['open'] - 1} connections open")


# ---- markdown -------------------------------------------------------------------------------

def _mb(kb=None, b=None):
    if kb is not None:
        return f"{kb / 1024:,.1f} MB"
    if b is None:
        return "–"
    return f"{b / MB:,.1f} MB" if b < 1000 * MB else f"{b / 1e9:,.2f} GB"


def _n(value):
    return "–" if value is None else f"{value:,}"


def _statuses(failed):
    return ", ".join(f"{n:,} x {status}" for status, n in failed.items()) or "none"


def _latency(lat):
    def one(v):
        return "–" if v is None else (f"{v:,.1f} ms" if v < 1000 else f"{v / 1000:,.2f} s")
    return f"{one(lat['p50'])} / {one(lat['p99'])} / {one(lat['max'])}"


def _closes(c, hold_s):
    if not c["closed"]:
        return f"none of {c['of']:,} (the clients closed them at {hold_s:g} s)"
    early = (f"; {c['before_response']:,} before a response head" if c["before_response"]
             else "")
    return (f"{c['closed']:,} of {c['of']:,}: first {c['first_s']:g} s, median "
            f"{c['median_s']:g} s, last {c['last_s']:g} s{early}")


def markdown(document):
    """The drill's table (one column per proxy) and, per proxy, its 5 s slices."""
    results = document["results"]
    names = list(results)
    opts = document["options"]
    hold_s = opts["duration_s"] + DEADLINE_S

    def row(label, fn):
        return f"| {label} | " + " | ".join(fn(results[n]) for n in names) + " |"

    def wb(r):
        return r["well_behaved"]["whole"]

    lines = [f"| {document['drill']} | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]
    lines += [
        row("well-behaved: sent / 2xx", lambda r: f"{wb(r)['sent']:,} / {wb(r)['ok']:,}"),
        row("failed by status", lambda r: _statuses(wb(r)["failed_by_status"])),
        row(f"timed out ({DEADLINE_S:g} s deadline)", lambda r: f"{wb(r)['timed_out']:,}"),
        row("other failures", lambda r: ", ".join(f"{n} {k}" for k, n in wb(r)["errors"].items())
            or "none"),
        row("latency p50 / p99 / max (answered)", lambda r: _latency(wb(r)["latency_ms"])),
        row("upstream connections: peak / end of window",
            lambda r: f"{_n(r['upstream']['peak'])} / {_n(r['upstream']['end_of_window'])}"),
        row("origin responses in progress: peak / end of window",
            lambda r: f"{_n(r['origin_in_progress']['peak'])} / "
                      f"{_n(r['origin_in_progress']['end_of_window'])}"),
    ]
    if opts["workers"]:
        lines.append(row(f"requests waiting for one of the origin's {opts['workers']} workers: "
                         "peak", lambda r: _n(r["origin_waiting"]["peak"])))
    lines += [
        row("proxy RSS: before / peak / end of window",
            lambda r: f"{_mb(kb=r['rss_kb']['before'])} / {_mb(kb=r['rss_kb']['peak'])} / "
                      f"{_mb(kb=r['rss_kb']['end_of_window'])}"),
        row("temporary files: peak / end of window",
            lambda r: f"{_mb(b=r['temp_bytes']['peak'])} / "
                      f"{_mb(b=r['temp_bytes']['end_of_window'])}"),
        row("misbehaving connections closed by the proxy",
            lambda r: _closes(r["attackers"]["closes"], hold_s)),
        row("proxy CPU (user + sys)",
            lambda r: f"{r['cpu_s']['total']:.1f} s ({r['cpu_s']['user']:.1f} + "
                      f"{r['cpu_s']['sys']:.1f})"),
        row("cores busy: proxy's (the proxy's own share) / clients' and origin's",
            lambda r: f"{r['cores_busy'].get(str(opts['proxy_cpu']), 0):.0%} "
                      f"({r['cpu_s']['total'] / max(r['sampled_s'], 1e-9):.0%}) / "
                      f"{r['cores_busy'].get(str(opts['load_cpu']), 0):.0%}"),
    ]
    if document["drill"] == "zero-window":
        lines.append(row("attackers: streams opened / response heads / DATA bytes",
                         lambda r: f"{r['attackers']['streams_opened']:,} / "
                                   f"{r['attackers']['responses']:,} / "
                                   f"{r['attackers']['data_bytes']:,}"))
    else:
        lines.append(row("slow readers: connected / statuses / bytes read",
                         lambda r: f"{r['attackers']['connected']:,} / "
                                   + (", ".join(f"{n:,} x {s}" for s, n in
                                                r["attackers"]["statuses"].items()) or "none")
                                   + f" / {r['attackers']['bytes_read'] / MB:,.1f} MB"))
    for name in names:
        lines += ["", f"{name}, the well-behaved client per {SLICE_S:g} s of due time:", "",
                  "| s | sent | 2xx | failed by status | timed out | p50 / p99 / max |",
                  "|---|---|---|---|---|---|"]
        for s in results[name]["well_behaved"]["slices"]:
            lines.append(f"| {s['from_s']:g}-{s['to_s']:g} | {s['sent']} | {s['ok']} | "
                         f"{_statuses(s['failed_by_status'])} | {s['timed_out']} | "
                         f"{_latency(s['latency_ms'])} |")
    return "\n".join(lines) + "\n"


def one_line(record):
    wb = record["well_behaved"]["whole"]
    c = record["attackers"]["closes"]
    return (f"well-behaved {wb['ok']:,}/{wb['sent']:,} ok, {wb['timed_out']} timed out, "
            f"statuses {_statuses(wb['failed_by_status'])}; upstream peak "
            f"{record['upstream']['peak']:,}; RSS peak {_mb(kb=record['rss_kb']['peak'])}; "
            f"temp peak {_mb(b=record['temp_bytes']['peak'])}; closed by proxy "
            f"{c['closed']}/{c['of']}; CPU {record['cpu_s']['total']:.1f} s")
