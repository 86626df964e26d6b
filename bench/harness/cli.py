"""The `bench/run` command: reads the flags, prepares binaries and packages, runs every
scenario for every contender in interleaved rounds, and writes the results.

Order of a session: build (cargo, release) -> find or install nginx, haproxy, wrk, node,
openssl -> pick loopback ports -> make the HTTPS scenarios' certificates (certs.py) -> start
the origins -> rounds (each round runs every scenario, and within a scenario every
contender, in an order rotated per round) -> medians, targets, JSON, charts, BENCHMARKS.md.
Children, namespaces and the session directory (certificates included) are cleaned up in
`finally` whatever happens.

Where results go: a full run writes results/latest.json and, for the HTTPS scenarios,
results/https.json, for the HTTP/2 scenarios results/h2.json, for the gRPC scenarios and
HTTP/2 over TLS (scenarios.GRPC_H2_TLS) results/grpc-h2-tls.json, for the performance
scenarios (scenarios.PERF: latency-tiny, latency-50k) results/perf.json (latest.json is
near the size a result file may have); a run of exactly the HTTPS scenarios, exactly the
HTTP/2 scenarios, exactly the gRPC and HTTP/2-over-TLS scenarios or exactly the
performance scenarios, with every contender, writes https.json, h2.json, grpc-h2-tls.json
or perf.json alone; any other subset results/partial.json; --smoke results/smoke.json.
Each of latest.json, https.json, h2.json, grpc-h2-tls.json and perf.json rewrites its own
charts and its own generated section of BENCHMARKS.md.
"""

import argparse
import dataclasses
import os
import re
import resource
import shlex
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from . import (build, certs, contenders, install, machine, netns, origins, procs, report,
               scenarios, sockets, threads_reuse)
from .certs import Certs

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
WRK_SCRIPT = REPO / "bench" / "configs" / "wrk-summary.lua"
NODE_ORIGIN = REPO / "bench" / "origins" / "node_origin.js"

NOFILE = 200_000


@dataclasses.dataclass
class Context:
    """What a scenario needs: binaries, ports, origins, timings, and where to put logs."""

    bins: dict
    log_dir: Path
    wrk_script: str
    ports: dict
    origins: dict
    duration_s: float
    warmup_s: float
    settle_s: float  # pause between warm-up and window
    rate: int
    exhaustion_s: float
    nofile: int
    idle_clients: int
    pool_connections: int
    certs: Certs | None = None  # the HTTPS scenarios' certificates, made per session

    def for_run(self, run_dir):
        return dataclasses.replace(self, log_dir=Path(run_dir))


def parse(argv):
    p = argparse.ArgumentParser(
        prog="bench/run",
        description="Benchmark holdfast against nginx and HAProxy, side by side, on loopback.",
    )
    p.add_argument("--smoke", action="store_true",
                   help="CI check: 1 run of 2 s per scenario (keepalive-tiny, closing-tiny, "
                        "rate-latency, latency-tiny, https-keepalive-tiny, https-handshakes, https-origin, "
                        "h2-to-h1, h2-to-h2c, grpc-unary, grpc-streaming, https-h2-to-h1), "
                        "installed contenders only; writes bench/results/smoke.json")
    p.add_argument("--runs", type=int, default=None, help="runs per scenario (default 3)")
    p.add_argument("--duration", type=float, default=None,
                   help="seconds per measured window (default 10; port-exhaustion runs 3x this)")
    p.add_argument("--rate", type=int, default=5000,
                   help="requests/s of the rate-latency scenario (default 5000)")
    p.add_argument("--scenarios", help="comma-separated subset, e.g. keepalive-tiny,closing-tiny")
    p.add_argument("--contenders", help="comma-separated subset, e.g. nginx-tuned,holdfast")
    p.add_argument("--install", action="store_true",
                   help="install missing packages also in --smoke mode")
    p.add_argument("--no-install", action="store_true",
                   help="never install packages; skip contenders and scenarios that lack them")
    p.add_argument("--no-build", action="store_true",
                   help="use the release binaries already in the target directory")
    p.add_argument("--holdfast", metavar="PATH",
                   help="measure this holdfast binary (another build, an older commit) "
                        "instead of the work tree's; results go to results/partial.json")
    p.add_argument("--keep", action="store_true",
                   help="keep the session directory (configs, logs, raw output) for debugging")
    opts = p.parse_args(argv)
    if opts.install and opts.no_install:
        p.error("--install and --no-install exclude each other")
    opts.runs = opts.runs or (1 if opts.smoke else 3)
    opts.duration = opts.duration or (2.0 if opts.smoke else 10.0)
    opts.duration = max(1.0, float(int(opts.duration)))  # wrk takes whole seconds
    opts.warmup = 1.0 if opts.smoke else 2.0
    if opts.runs < 1:
        p.error("--runs must be at least 1")

    def subset(text, known, default):
        if not text:
            return list(default)
        names = [n.strip() for n in text.split(",") if n.strip()]
        unknown = [n for n in names if n not in known]
        if unknown:
            p.error(f"unknown name(s): {', '.join(unknown)}; known: {', '.join(known)}")
        return [n for n in known if n in names]

    scenario_names = [s.name for s in scenarios.SCENARIOS]
    contender_names = [c.name for c in contenders.CONTENDERS]
    opts.scenarios = subset(opts.scenarios, scenario_names,
                            scenarios.SMOKE if opts.smoke else scenario_names)
    opts.contenders = subset(opts.contenders, contender_names, contender_names)
    opts.is_subset = (set(opts.scenarios) != set(scenario_names)
                      or set(opts.contenders) != set(contender_names)
                      or bool(opts.holdfast))
    # Exactly the HTTPS scenarios, every contender: their own results file is rewritten.
    opts.https_only = (set(opts.scenarios) == set(scenarios.HTTPS)
                       and set(opts.contenders) == set(contender_names)
                       and not opts.holdfast)
    # Exactly the HTTP/2 scenarios, every contender: likewise for h2.json.
    opts.h2_only = (set(opts.scenarios) == set(scenarios.H2)
                    and set(opts.contenders) == set(contender_names)
                    and not opts.holdfast)
    # Exactly the gRPC and HTTP/2-over-TLS scenarios, every contender: likewise for
    # grpc-h2-tls.json.
    opts.grpc_h2_tls_only = (set(opts.scenarios) == set(scenarios.GRPC_H2_TLS)
                             and set(opts.contenders) == set(contender_names)
                             and not opts.holdfast)
    # Exactly the performance scenarios, every contender: likewise for perf.json.
    opts.perf_only = (set(opts.scenarios) == set(scenarios.PERF)
                      and set(opts.contenders) == set(contender_names)
                      and not opts.holdfast)
    return opts


def log(message):
    print(message, flush=True)


def _raise_exit(signum, _frame):
    raise SystemExit(128 + signum)


def main(argv):
    opts = parse(argv)
    if os.geteuid() != 0:
        log("note: bench/run expects root (network namespaces, sysctl, apt, raising "
            "the open-file limit); some scenarios may fail")
    signal.signal(signal.SIGTERM, _raise_exit)
    signal.signal(signal.SIGHUP, _raise_exit)
    session = Path(tempfile.mkdtemp(prefix="holdfast-bench-"))
    session.chmod(0o755)  # nginx workers (user nobody) write temp files below it
    started = time.monotonic()
    try:
        return _session(opts, session, argv)
    finally:
        procs.stop_all()
        netns.delete_all()
        if opts.keep:
            log(f"kept session directory {session}")
        else:
            shutil.rmtree(session, ignore_errors=True)
        log(f"bench/run took {time.monotonic() - started:.0f} s")


def _raise_nofile():
    """Raises the open-file limit (inherited by every child) to NOFILE, or as far as allowed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(NOFILE, soft), max(NOFILE, hard)))
    except (ValueError, OSError) as err:
        log(f"note: cannot raise the open-file limit to {NOFILE} ({err}); using {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _programs(opts):
    """Finds (and maybe installs) the programs; returns {program: path} for those present."""
    wanted = {"taskset", "ss"}
    for name in opts.contenders:
        if contenders.BY_NAME[name].program in ("nginx", "haproxy"):
            wanted.add(contenders.BY_NAME[name].program)
    for name in opts.scenarios:
        wanted.update(scenarios.BY_NAME[name].needs)
    may_install = (opts.install or not opts.smoke) and not opts.no_install
    absent = install.missing(sorted(wanted))
    if absent and may_install:
        if os.geteuid() == 0:
            absent = install.install(absent, log)
        else:
            log(f"note: not root, so not installing {', '.join(absent)}")
    for program in absent:
        log(f"note: {program} is not installed; skipping what needs it"
            + ("" if may_install else " (pass --install to install it)"))
    # Asked for explicitly (CI): a program that could not be installed is a failure.
    opts.not_installed = absent if opts.install else []
    return {p: install.which(p) for p in wanted if install.which(p)}


def _session(opts, session, argv):
    bins = build.build(REPO, session / "bin", compile=not opts.no_build, log=log)
    if opts.holdfast:
        shutil.copy2(opts.holdfast, bins["holdfast"])
    tools = _programs(opts)
    bins.update(tools)
    bins["node-origin"] = str(NODE_ORIGIN)
    for required in ("taskset", "ss"):
        if required not in bins:
            log(f"error: {required} is required")
            return 2

    plan_contenders = []
    for name in opts.contenders:
        program = contenders.BY_NAME[name].program
        if program in (None, "holdfast") or program in bins:
            plan_contenders.append(contenders.BY_NAME[name])
    plan_scenarios = []
    for name in opts.scenarios:
        scenario = scenarios.BY_NAME[name]
        missing = [n for n in scenario.needs if n not in bins]
        if missing:
            log(f"note: skipping scenario {name}: needs {', '.join(missing)}")
            continue
        plan_scenarios.append(scenario)

    _raise_nofile()
    proxy_cpu, load_cpu = procs.pin_cpus()
    if proxy_cpu == load_cpu:
        log("note: only one CPU is available; proxy and load share it")
    names = ("origin", "node", "proxy", "admin", "pool_origin", "pool_origin_b", "proxy_b",
             "origin_tls", "origin_h2c")
    ports = dict(zip(names, sockets.free_ports(len(names))))
    log(f"ports: {ports}; proxy on CPU {proxy_cpu}, load and origins on CPU {load_cpu}")

    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    idle_clients, pool_connections = scenarios.idle_counts(nofile)
    if idle_clients < scenarios.IDLE_CONNECTIONS or pool_connections < scenarios.IDLE_CONNECTIONS:
        log(f"note: the open-file limit is {nofile}; idle-clients and silent-clients hold "
            f"{idle_clients} connections and pool-memory pools {pool_connections}")
    ctx = Context(
        bins=bins, log_dir=session, wrk_script=str(WRK_SCRIPT), ports=ports, origins={},
        duration_s=opts.duration, warmup_s=opts.warmup, rate=opts.rate,
        settle_s=0.0 if opts.smoke else 1.2,
        exhaustion_s=3 * opts.duration, nofile=nofile, idle_clients=idle_clients,
        pool_connections=pool_connections,
    )
    holdfast_tls = True
    if any(s.tls for s in plan_scenarios):
        ctx.certs = certs.make(session / "tls")
        log(f"certificates for the HTTPS scenarios in {session / 'tls'}")
        holdfast_tls = contenders.holdfast_speaks_tls(bins["holdfast"])
        if not holdfast_tls and any(c.name == "holdfast" for c in plan_contenders):
            log("note: this holdfast has no TLS flags ("
                + ", ".join(contenders.HOLDFAST_TLS_FLAGS) + " in --help): the HTTPS "
                "scenarios run without it")
    holdfast_h2 = True
    if any(s.h2 for s in plan_scenarios):
        holdfast_h2 = contenders.holdfast_speaks_h2(bins["holdfast"])
        if not holdfast_h2 and any(c.name == "holdfast" for c in plan_contenders):
            log("note: this holdfast has no HTTP/2 flags ("
                + ", ".join(contenders.HOLDFAST_H2_FLAGS) + " in --help): the HTTP/2 "
                "scenarios run without it")
    sitting_out = {}
    for s in plan_scenarios:
        out = scenarios.sitting_out(s, plan_contenders, holdfast_h2=holdfast_h2)
        if out:
            sitting_out[s.name] = dict(out)
            for name, why in out:
                log(f"note: {name} does not run {s.name}: {why}")
    ctx.origins["rust"] = origins.start("rust", port=ports["origin"], bins=bins, log_dir=session)
    if any(s.origin == "node" and s.name not in scenarios.IN_NAMESPACE for s in plan_scenarios):
        ctx.origins["node"] = origins.start("node", port=ports["node"], bins=bins,
                                            log_dir=session)
    if any(s.origin == "rust-tls" or (s.tls == "client" and any(
            c.name == "direct" for c in scenarios.contenders_for(s, plan_contenders)))
           for s in plan_scenarios):
        ctx.origins["rust-tls"] = _start_origin("rust-tls", ports, bins, session, ctx.certs)
    if any(s.origin == "rust-h2c" or (s.h2 and any(
            c.name == "direct" for c in scenarios.contenders_for(s, plan_contenders)))
           for s in plan_scenarios):
        ctx.origins["rust-h2c"] = _start_origin("rust-h2c", ports, bins, session, ctx.certs)

    info = machine.describe(bins)
    commit = machine.git_commit(REPO) if not opts.holdfast else f"binary {opts.holdfast}"
    records = []

    def runs_of(scenario):
        return scenarios.contenders_for(scenario, plan_contenders, holdfast_tls=holdfast_tls,
                                        holdfast_h2=holdfast_h2)

    total = opts.runs * sum(len(runs_of(s)) * s.slices for s in plan_scenarios)
    done = 0
    for round_no in range(1, opts.runs + 1):
        for scenario in plan_scenarios:
            order = runs_of(scenario)
            shift = (round_no - 1) % max(1, len(order))
            order = order[shift:] + order[:shift]
            plan = None
            if scenario.capacity_share is not None:
                _revive_origins(ctx, ports, bins, session)
                plan = scenarios.latency_plan(ctx, scenario, order, round_no)
                log(f"round {round_no} {scenario.name}: capacity (probe, open loop) "
                    + ", ".join(f"{name} {p.get('capacity_rps') or 0:,.0f} "
                                f"({p.get('rps') or 0:,.0f}, "
                                f"{(p.get('calibration') or {}).get('open_loop_rps') or 0:,.0f})"
                                for name, p in plan["probes"].items())
                    + f" req/s; every contender asked {plan['rate'] or 0:,}/s")
            for slice_no in range(1, scenario.slices + 1):
                for contender in order:
                    done += 1
                    _revive_origins(ctx, ports, bins, session)
                    record = scenarios.run(ctx, scenario, contender, round_no, plan,
                                           slice_no if scenario.slices > 1 else None)
                    records.append(record)
                    log(f"[{done}/{total}] round {round_no} {scenario.name:20} "
                        f"{contender.name:14} {_one_line(record)}")

    origin_argvs = [origin.child.argv for origin in ctx.origins.values()]
    for origin in ctx.origins.values():
        origin.stop()

    def document(mode, recs):
        """The results file's content for the records `recs`."""
        names = {r["scenario"] for r in recs}
        medians = report.aggregate(recs)
        if mode == "https":
            checks = report.https_targets(medians)
        elif mode == "h2":
            checks = report.h2_targets(medians, recs)
        elif mode == "grpc-h2-tls":
            checks = report.grpc_h2_tls_targets(medians, recs)
        elif mode == "perf":
            checks = report.perf_targets(medians)
        elif mode == "full":
            checks = report.targets(medians, recs)
        else:  # a subset: the targets of the scenarios it ran
            checks = [c for c in report.targets(medians, recs) + report.https_targets(medians)
                      + report.h2_targets(medians, recs)
                      + report.grpc_h2_tls_targets(medians, recs)
                      + report.perf_targets(medians)
                      if c["scenario"] in names]
        return {
            "generated_by": "bench/run",
            "command": "bench/run" + ("" if not argv else " " + shlex.join(argv)),
            "mode": mode,
            "options": {"runs": opts.runs, "duration_s": opts.duration,
                        "warmup_s": opts.warmup, "rate": opts.rate,
                        "exhaustion_s": ctx.exhaustion_s,
                        "scenarios": [s.name for s in plan_scenarios if s.name in names],
                        "contenders": [c.name for c in plan_contenders],
                        "proxy_cpu": proxy_cpu, "load_cpu": load_cpu, "nofile": nofile,
                        "idle_clients": idle_clients, "pool_connections": pool_connections,
                        "holdfast_tls": holdfast_tls, "holdfast_h2": holdfast_h2,
                        "sitting_out": {k: v for k, v in sitting_out.items() if k in names}},
            "machine": info,
            "holdfast_commit": commit,
            "ports": ports,
            "tls": (ctx.certs.describe() if ctx.certs
                    and any(scenarios.BY_NAME[n].tls for n in names) else None),
            "commands": _commands(recs, origin_argvs, session, argv),
            "medians": medians,
            "targets": checks,
            "runs": recs,
        }

    https_records = [r for r in records if r["scenario"] in scenarios.HTTPS]
    h2_records = [r for r in records if r["scenario"] in scenarios.H2]
    grpc_h2_tls_records = [r for r in records if r["scenario"] in scenarios.GRPC_H2_TLS]
    perf_records = [r for r in records if r["scenario"] in scenarios.PERF]
    grouped = scenarios.HTTPS + scenarios.H2 + scenarios.GRPC_H2_TLS + scenarios.PERF
    other_records = [r for r in records if r["scenario"] not in grouped]
    if opts.smoke:
        outputs = [("smoke", "smoke.json", records)]
    elif not opts.is_subset:
        outputs = [("full", "latest.json", other_records), ("https", "https.json", https_records),
                   ("h2", "h2.json", h2_records),
                   ("grpc-h2-tls", "grpc-h2-tls.json", grpc_h2_tls_records),
                   ("perf", "perf.json", perf_records)]
    elif opts.https_only:
        outputs = [("https", "https.json", records)]
    elif opts.h2_only:
        outputs = [("h2", "h2.json", records)]
    elif opts.grpc_h2_tls_only:
        outputs = [("grpc-h2-tls", "grpc-h2-tls.json", records)]
    elif opts.perf_only:
        outputs = [("perf", "perf.json", records)]
    else:
        outputs = [("partial", "partial.json", records)]
    RESULTS.mkdir(parents=True, exist_ok=True)
    subtitle = (f"{info['cpu_model']}, {info['cores']} cores; holdfast {commit or '?'}; "
                f"median of {opts.runs} runs of {opts.duration:g} s")
    contender_names = [c.name for c in plan_contenders]
    checks = []
    for mode, file_name, recs in outputs:
        doc = document(mode, recs)
        checks += doc["targets"]
        out = RESULTS / file_name
        report.write_json(out, doc)
        log(f"wrote {out.relative_to(REPO)} ({out.stat().st_size / 1000:,.0f} kB)")
        if mode == "full":
            files = report.charts(RESULTS, doc["medians"], recs, contender_names, subtitle)
            generated = report.markdown(doc, files, image_prefix="bench/results/")
            report.splice(REPO / "BENCHMARKS.md", generated)
            log("wrote BENCHMARKS.md's results section and bench/results/*.svg")
        elif mode == "https":
            files = report.charts(RESULTS, doc["medians"], recs, contender_names, subtitle)
            generated = report.https_markdown(doc, files, image_prefix="bench/results/")
            report.splice(REPO / "BENCHMARKS.md", generated, marks=report.HTTPS_MARKS)
            log("wrote BENCHMARKS.md's HTTPS results section and bench/results/https-*.svg")
        elif mode == "h2":
            files = report.charts(RESULTS, doc["medians"], recs, contender_names, subtitle)
            generated = report.h2_markdown(doc, files, image_prefix="bench/results/")
            report.splice(REPO / "BENCHMARKS.md", generated, marks=report.H2_MARKS)
            log("wrote BENCHMARKS.md's HTTP/2 results section and bench/results/h2-*.svg")
        elif mode == "grpc-h2-tls":
            files = report.charts(RESULTS, doc["medians"], recs, contender_names, subtitle)
            generated = report.grpc_h2_tls_markdown(doc, files, image_prefix="bench/results/")
            report.splice(REPO / "BENCHMARKS.md", generated, marks=report.GRPC_H2_TLS_MARKS)
            log("wrote BENCHMARKS.md's gRPC and HTTP/2-over-TLS results section and "
                "bench/results/" + ", ".join(sorted(files.values())))
        elif mode == "perf":
            files = report.charts(RESULTS, doc["medians"], recs, contender_names, subtitle)
            generated = report.perf_markdown(doc, files, image_prefix="bench/results/")
            report.splice(REPO / "BENCHMARKS.md", generated, marks=report.PERF_MARKS)
            log("wrote BENCHMARKS.md's Performance results section and its charts in "
                "bench/results/ (" + ", ".join(f"{n}.svg" for n in sorted(files)) + ")")
    log("")
    log(report.targets_table(checks))
    medians = report.aggregate(records)
    for floor in (report.floor_line(medians), report.h2_floor_line(medians)):
        if floor:  # information; the HTTP/1.1 floor's target is in the table above
            log(floor)
    reuse_table = threads_reuse.log_table(medians)
    if reuse_table:
        log(reuse_table)
    return _exit_status(opts, records, plan_contenders)


# Which port each shared origin listens on.
ORIGIN_PORTS = {"rust": "origin", "rust-tls": "origin_tls", "rust-h2c": "origin_h2c",
                "node": "node"}


def _start_origin(kind, ports, bins, session, session_certs):
    """Starts shared origin `kind`: "rust", "node", "rust-tls" (bench-origin over HTTPS)
    or "rust-h2c" (bench-origin speaking h2c as well as HTTP/1.1)."""
    program = "node" if kind == "node" else "rust"
    return origins.start(program, port=ports[ORIGIN_PORTS[kind]], bins=bins, log_dir=session,
                         certs=session_certs if kind == "rust-tls" else None,
                         h2c=kind == "rust-h2c")


def _revive_origins(ctx, ports, bins, session):
    """Restarts a shared origin that died, so one crash fails one run, not the rest."""
    for kind, origin in list(ctx.origins.items()):
        if not origin.child.is_alive():
            log(f"{kind} origin died (exit status {origin.child.popen.returncode}); "
                "restarting it")
            ctx.origins[kind] = _start_origin(kind, ports, bins, session, ctx.certs)


def _one_line(record):
    if not record["ok"]:
        return f"FAILED: {(record['error'] or '').splitlines()[0][:200]}"
    m = record["metrics"]
    if record["scenario"] == threads_reuse.NAME:
        return threads_reuse.one_line(record)
    if record["scenario"] == "pool-memory":
        per = m.get("bytes_per_idle_connection")
        if per is None:
            return "no idle count"
        return (f"{m.get('idle_connections'):,} idle in pool a, RSS {m.get('rss_kb_one_pool')} kB "
                f"after burst 1, {m.get('rss_kb_two_pools')} kB after burst 2: "
                f"{per:,.0f} B per idle connection (upper bound "
                f"{m.get('bytes_per_idle_connection_upper') or 0:,.0f} B)")
    if record["scenario"] == "https-handshakes":
        parts = []
        for window in scenarios.HANDSHAKE_WINDOWS:
            cpu = m.get(f"cpu_us_per_request_{window}")
            share = m.get(f"resumed_share_{window}")
            parts.append(f"{window}: {m.get(f'rps_{window}') or 0:>7,.0f}/s"
                         + (f" {cpu:7.1f} µs/handshake" if cpu is not None else "")
                         + (f" ({share * 100:.1f}% resumed)" if share is not None else ""))
        return "  ".join(parts) + f"  errors {m.get('errors')}"
    if m.get("rate_asked") is not None:  # latency at a share of capacity
        lat = m.get("latency_us") or {}
        cpu = m.get("cpu_us_per_request")
        share = m.get("capacity_share")
        return (f"capacity {m.get('capacity_rps') or 0:>9,.0f} req/s (probe "
                f"{m.get('probe_rps') or 0:,.0f}, errors {m.get('capacity_errors')}; open "
                f"loop {m.get('open_loop_rps') or 0:,.0f}); asked {m['rate_asked']:,}/s"
                + (f" ({share:.0%} of it)" if share else "") + ", achieved "
                f"{m.get('rps') or 0:,.0f}/s"
                + (" (SATURATED)" if m.get("saturated") else "")
                + f"  p50 {lat.get('p50', 0):,} p99 {lat.get('p99', 0):,} p99.9 "
                f"{lat.get('p999', 0):,} max {lat.get('max', 0):,} µs"
                + (f"  {cpu:6.2f} µs/req" if cpu is not None else "")
                + f"  errors {m.get('errors')}  load gen lag max "
                f"{m.get('max_send_lag_us') or 0:,} µs")
    if record["scenario"] in ("grpc-unary", "grpc-streaming"):
        return _grpc_line(m)
    if record["scenario"] == "silent-clients":
        ok = m.get("bytes_per_silent_connection") is not None
        return (f"{m.get('silent_connections') or 0:,} silent connections held; RSS "
                f"{m.get('rss_kb_start')} kB at start, {m.get('rss_kb_held')} kB held, "
                f"{m.get('rss_kb_after')} kB after they closed: "
                + (f"{m['bytes_per_silent_connection']:,.0f} B per connection, "
                   f"{m['rss_kb_left']:,} kB not given back" if ok else "not measured"))
    parts = [f"{m.get('rps') or 0:>9,.0f} req/s"]
    if m.get("cpu_us_per_request") is not None:
        split = ""
        if m.get("cpu_user_us_per_request") is not None:
            split = (f" (user {m['cpu_user_us_per_request']:.2f} + sys "
                     f"{m['cpu_sys_us_per_request']:.2f})")
        parts.append(f"{m['cpu_us_per_request']:6.2f} µs/req{split}")
    if m.get("reuse") is not None:
        parts.append(f"reuse {m['reuse'] * 100:6.2f}%")
    if m.get("upstream_tls_per_request") is not None:
        parts.append(f"upstream TLS handshakes {m['upstream_tls_handshakes']:,} "
                     f"({m['upstream_tls_full']:,} full, {m['upstream_tls_resumed']:,} resumed; "
                     f"{m['upstream_tls_per_request'] * 100:.3f}% of requests)")
    lat = m.get("latency_us") or {}
    if lat.get("p99") is not None:
        parts.append(f"p99 {lat['p99']:,} µs")
    parts.append(f"errors {m.get('errors')}")
    if m.get("timeouts"):
        parts.append(f"timeouts {m['timeouts']}")
    if record["scenario"] in scenarios.H2 + scenarios.GRPC_H2_TLS:
        parts.append(f"upstream: {m.get('upstream_open_max')} open at peak, "
                     f"{m.get('upstream_connections_total')} opened in warm-up + window")
        if m.get("upstream_h2_share") is not None:
            parts.append(f"{m['upstream_h2_share'] * 100:.0f}% over HTTP/2")
        if m.get("holdfast_h2_connections") is not None:
            parts.append(f"holdfast's gauge {m['holdfast_h2_connections']:.0f}")
    if m.get("clients"):
        parts.append(f"upstream opened {m.get('upstream_connections_total'):,} for "
                     f"{m['clients']:,} clients, {m.get('upstream_open_max'):,} open at peak")
    if m.get("rss_kb"):
        parts.append(f"RSS {m['rss_kb'] / 1024:.1f} MB")
    if (m.get("proxy_core_other") or 0) > 0.15:
        parts.append(f"(other processes used {m['proxy_core_other'] * 100:.0f}% of the proxy core)")
    return "  ".join(parts)


def _grpc_line(m):
    """A gRPC run in one line: calls/s, messages/s, CPU per call and per message, errors,
    the upstream connections and the share of calls that reached the origin over HTTP/2."""
    parts = [f"{m.get('calls_per_s') or 0:>9,.0f} calls/s",
             f"{m.get('messages_per_s') or 0:,.0f} msg/s"]
    if m.get("cpu_us_per_call") is not None:
        parts.append(f"{m['cpu_us_per_call']:6.2f} µs/call")
    if m.get("cpu_us_per_message") is not None:
        parts.append(f"{m['cpu_us_per_message']:6.2f} µs/msg (user "
                     f"{m.get('cpu_user_us_per_message') or 0:.2f} + sys "
                     f"{m.get('cpu_sys_us_per_message') or 0:.2f})")
    lat = m.get("latency_us") or {}
    if lat.get("p99") is not None:
        parts.append(f"round trip p99 {lat['p99']:,} µs")
    parts.append(f"errors {m.get('errors')}")
    parts.append(f"upstream: {m.get('upstream_open_max')} open at peak, "
                 f"{m.get('upstream_connections_total')} opened in warm-up + window")
    if m.get("upstream_h2_share") is not None:
        parts.append(f"{m['upstream_h2_share'] * 100:.0f}% over HTTP/2")
    if (m.get("proxy_core_other") or 0) > 0.15:
        parts.append(f"(other processes used {m['proxy_core_other'] * 100:.0f}% of the proxy core)")
    return "  ".join(parts)


def _commands(records, origin_argvs, session, argv):
    """The exact commands of a session: origins, each contender once, each scenario's load.

    A run's directory in the session is written as $RUN (so `$RUN/nginx-tuned.conf` still
    names the config), the session directory itself as $SESSION, network namespaces as
    $NS; ports are the session's (see `ports` in the JSON).
    """
    replacements = [
        (str(session / "bin") + "/", "target/release/"),
        (str(WRK_SCRIPT), "bench/configs/wrk-summary.lua"),
        (str(NODE_ORIGIN), "bench/origins/node_origin.js"),
    ]

    def shorten(cmd):
        text = shlex.join(cmd)
        for old, new in replacements:
            text = text.replace(old, new)
        text = re.sub(r"hfbench-\d+-\d+", "$NS", text)
        text = re.sub(re.escape(str(session)) + r"/r\d+-[\w.-]+", "$RUN", text)
        return text.replace(str(session), "$SESSION")

    lines = ["bench/run" + ("" if not argv else " " + shlex.join(argv)), "", "# origins"]
    lines += [shorten(a) for a in origin_argvs]
    lines += ["", "# contenders (config files: bench/configs/, rendered into $RUN; "
              "certificates made into $SESSION/tls)"]
    seen = set()
    for rec in records:
        cmd = rec.get("command")
        if not cmd or rec["scenario"] in scenarios.IN_NAMESPACE + ("pool-memory",):
            continue
        text = shorten(cmd)
        # one line per contender and config: the HTTPS scenarios start them differently
        if (rec["contender"], re.sub(r"\$RUN/", "", text)) not in seen:
            seen.add((rec["contender"], re.sub(r"\$RUN/", "", text)))
            lines.append(text)
    pool = next((r for r in records if r["scenario"] == "pool-memory" and r.get("command")), None)
    if pool:
        lines.append(shorten(pool["command"]) + "   # pool-memory")
    lines += ["", "# load, per scenario (URL: the proxy, or the origin for direct)"]
    for scenario in scenarios.SCENARIOS:
        recs = [r for r in records if r["scenario"] == scenario.name]
        rec = next((r for r in recs if r["contender"] == "holdfast" and r.get("load")), None)
        rec = rec or next((r for r in recs if r.get("load")), None)
        if not rec:
            continue
        lines.append(f"# {scenario.name}")
        if scenario.name in scenarios.IN_NAMESPACE:
            lines.append("ip netns add $NS; ip -n $NS link set lo up; ip netns exec $NS sysctl "
                         f"-w net.ipv4.ip_local_port_range='{netns.PORT_RANGE}' "
                         "net.ipv4.tcp_tw_reuse=0   # origin and contender also run in $NS")
        for key in ("probe_argv", "warmup_argv", "hold_argv", "full_argv"):
            if rec.get(key):
                lines.append(shorten(rec[key]))
        if rec["load"].get("argv"):
            rate_note = ""
            if scenario.capacity_share is not None:
                rate_note = (f"   # --rate: round({scenario.capacity_share:g} x the lowest "
                             "capacity among the proxies of the round: the lower of its wrk "
                             "probe and its open-loop calibration), the same for every "
                             "contender of the round")
            lines.append(shorten(rec["load"]["argv"]) + rate_note)
    return lines


# The scenarios whose proxies must send every request to the h2c origin over HTTP/2.
H2C_ORIGIN_SCENARIOS = tuple(s.name for s in scenarios.SCENARIOS if s.h2 in ("both", "grpc"))


def _exit_status(opts, records, plan_contenders):
    failed = [r for r in records if not r["ok"]]
    empty = [r for r in records if r["ok"] and r["scenario"] not in scenarios.NO_REQUESTS
             and not r["metrics"].get("requests")]
    holdfast_errors = [r for r in records if r["contender"] == "holdfast" and r["ok"]
                       and r["scenario"] not in scenarios.NO_REQUESTS
                       and r["metrics"].get("errors")]
    # floor's figures are holdfast's floor only while it serves every request.
    floor_errors = [r for r in records if r["contender"] == "floor" and r["ok"]
                    and r["metrics"].get("errors")]
    if "holdfast" in opts.contenders and not any(c.name == "holdfast" for c in plan_contenders):
        failed.append({"scenario": "-", "contender": "holdfast", "error": "not run"})
    problems = [f"--install: {p} is still not installed"
                for p in getattr(opts, "not_installed", [])]
    problems += [f"{r['scenario']}/{r['contender']} failed: {r['error']}" for r in failed]
    problems += [f"{r['scenario']}/{r['contender']} produced no requests" for r in empty]
    if opts.smoke:
        problems += [f"{r['scenario']}/{r['contender']}: holdfast had "
                     f"{r['metrics']['errors']} errors" for r in holdfast_errors]
        problems += [f"{r['scenario']}/floor: {r['metrics']['errors']} errors"
                     for r in floor_errors]
        # Over HTTPS any contender that answers with errors fails the check: a certificate,
        # a TLS setting or a config a contender does not take shows up there first.
        problems += [f"{r['scenario']}/{r['contender']}: {r['metrics']['errors']} errors over "
                     "HTTPS" for r in records
                     if r["ok"] and r["scenario"] in scenarios.HTTPS
                     and r["contender"] != "holdfast" and r["metrics"].get("errors")]
        problems += [f"https-handshakes/{r['contender']}: no session resumed in the resumed "
                     "window" for r in records
                     if r["ok"] and r["scenario"] == "https-handshakes"
                     and not r["metrics"].get("resumed_share_resumed")]
        # Over HTTP/2 likewise; and to the h2c origin every request must have gone over
        # HTTP/2, so a proxy that quietly falls back to HTTP/1.1 upstream shows up.
        problems += [f"{r['scenario']}/{r['contender']}: {r['metrics']['errors']} errors over "
                     "HTTP/2" for r in records
                     if r["ok"] and r["scenario"] in scenarios.H2 + scenarios.GRPC_H2_TLS
                     and r["contender"] != "holdfast" and r["metrics"].get("errors")]
        problems += [f"{r['scenario']}/{r['contender']}: "
                     f"{(r['metrics'].get('upstream_h2_share') or 0) * 100:.1f}% of upstream "
                     "requests over HTTP/2, not all" for r in records
                     if r["ok"] and r["scenario"] in H2C_ORIGIN_SCENARIOS
                     and (r["metrics"].get("upstream_h2_share") or 0) < 1]
    for problem in problems:
        log(f"problem: {problem.splitlines()[0][:300]}")
    return 1 if problems else 0


def entry():
    sys.exit(main(sys.argv[1:]))
