"""Spawns pinned child processes, measures their CPU and memory from /proc, and kills them.

Every child starts in its own session (so its process group holds it and anything it forks,
such as nginx's worker) and is registered here until it is stopped. `stop_all()` runs from
`finally` and at exit, so no child outlives the harness. Every child has a deadline: servers
are stopped by the harness, and one-shot commands (`run`) are killed when their timeout passes.

CPU time is utime and stime of `/proc/PID/stat` (user and system time of all the process's
threads, in clock ticks), summed over a child and all its descendants, so it counts nginx's
master and worker alike. `cpu_ns` reads the same processes' threads from
`/proc/PID/task/*/schedstat` (nanoseconds on CPU) as a cross-check.
"""

import atexit
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

# The proxy under test runs on PROXY_CPU; load generators and origins share LOAD_CPU.
# `pin_cpus()` picks them from the CPUs this process may use.
PROXY_CPU = 0
LOAD_CPU = 1

# Children started and not yet stopped, in start order.
_live = []


class Child:
    """A long-running child process (server, origin, idle-connection holder)."""

    def __init__(self, name, argv, popen, stdout_path, stderr_path):
        self.name = name
        self.argv = argv
        self.popen = popen
        self.pid = popen.pid
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path

    def is_alive(self):
        return self.popen.poll() is None

    def pids(self):
        """The child and all its descendants, alive now."""
        if not self.is_alive():
            return []
        return [self.pid] + descendants(self.pid)

    def stderr_tail(self, limit=2000):
        return _tail(self.stderr_path, limit)

    def stdout_text(self):
        try:
            return Path(self.stdout_path).read_text(errors="replace")
        except OSError:
            return ""

    def signal(self, sig):
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, grace_s=5.0):
        """SIGTERM to the process group, SIGKILL after `grace_s`; returns the exit status."""
        family = self.pids()
        if self.is_alive():
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.popen.wait(timeout=grace_s)
        # A descendant that left the process group still dies with its parent's group here.
        for pid in family[1:]:
            _kill_if_alive(pid)
        if self in _live:
            _live.remove(self)
        return self.popen.returncode


def _kill_if_alive(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def pin_cpus():
    """Chooses the proxy and load CPUs and moves the harness itself onto the load CPU.

    With a single CPU both share it, and the numbers say less about the proxy.
    """
    global PROXY_CPU, LOAD_CPU
    cpus = sorted(os.sched_getaffinity(0))
    PROXY_CPU = cpus[0]
    LOAD_CPU = cpus[1] if len(cpus) > 1 else cpus[0]
    os.sched_setaffinity(0, {LOAD_CPU})
    return PROXY_CPU, LOAD_CPU


def command(argv, *, cpu=None, netns=None):
    """The full command line: `ip netns exec NS` and `taskset -c CPU` in front of `argv`.

    Both wrappers exec the next program, so the pid Popen returns is the program's own.
    """
    full = []
    if netns:
        full += ["ip", "netns", "exec", netns]
    if cpu is not None:
        full += ["taskset", "-c", str(cpu)]
    return full + [str(a) for a in argv]


def spawn(name, argv, *, log_dir, cpu=None, netns=None, env=None):
    """Starts a long-running child with stdout and stderr in files under `log_dir`."""
    full = command(argv, cpu=cpu, netns=netns)
    stdout_path = Path(log_dir) / f"{name}.stdout"
    stderr_path = Path(log_dir) / f"{name}.stderr"
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        popen = subprocess.Popen(
            full,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            env=env,
        )
    child = Child(name, full, popen, stdout_path, stderr_path)
    _live.append(child)
    return child


@dataclass
class Finished:
    """A one-shot command that ran to its end (or was killed at its deadline)."""

    argv: list
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float  # user + system time of the command and its reaped children
    timed_out: bool


def run(name, argv, *, log_dir, timeout_s, cpu=None, netns=None):
    """Runs a command to completion, killing it after `timeout_s`; output is kept in files."""
    child = spawn(name, argv, log_dir=log_dir, cpu=cpu, netns=netns)
    start = time.monotonic()
    deadline = start + timeout_s
    timed_out = False
    status = None
    usage = None
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid == child.pid:
            break
        if time.monotonic() > deadline:
            timed_out = True
            child.signal(signal.SIGTERM)
            time.sleep(1.0)
            child.signal(signal.SIGKILL)
            _, status, usage = os.wait4(child.pid, 0)
            break
        time.sleep(0.02)
    wall_s = time.monotonic() - start
    # wait4 reaped the process; tell Popen so it does not wait for it again.
    child.popen.returncode = os.waitstatus_to_exitcode(status)
    # Anything the command left in its process group goes too.
    child.signal(signal.SIGKILL)
    if child in _live:
        _live.remove(child)
    return Finished(
        argv=child.argv,
        returncode=child.popen.returncode,
        stdout=child.stdout_text(),
        stderr=_tail(child.stderr_path, 20000),
        wall_s=wall_s,
        cpu_s=usage.ru_utime + usage.ru_stime,
        timed_out=timed_out,
    )


def stop_all():
    """Stops every child still registered, newest first."""
    for child in reversed(list(_live)):
        try:
            child.stop(grace_s=3.0)
        except Exception:  # keep stopping the rest whatever one of them does
            child.signal(signal.SIGKILL)


atexit.register(stop_all)


def _tail(path, limit):
    try:
        data = Path(path).read_bytes()
    except OSError:
        return ""
    return data[-limit:].decode(errors="replace")


def descendants(pid):
    """Pids of all descendants of `pid`, from the ppid field of /proc/*/stat."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses; fields after the last ')' are fixed.
        fields = stat[stat.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    found = []
    stack = [pid]
    while stack:
        for kid in children.get(stack.pop(), []):
            found.append(kid)
            stack.append(kid)
    return found


CLOCK_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuTimes:
    """User and system CPU seconds, summed over some processes."""

    user_s: float
    sys_s: float

    def __sub__(self, earlier):
        return CpuTimes(self.user_s - earlier.user_s, self.sys_s - earlier.sys_s)

    @property
    def total_s(self):
        return self.user_s + self.sys_s


def cpu_times(pids):
    """utime and stime (fields 14 and 15 of /proc/PID/stat) of `pids`, summed, in seconds.

    A process's stat counts all its threads; children are not included (pass them in
    `pids`, as `Child.pids()` does). Processes that exited in between are skipped.
    """
    user = system = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses; fields after the last ')' are
        # fixed, starting with field 3 (state), so field N is at index N - 3.
        fields = stat[stat.rfind(")") + 2 :].split()
        try:
            user += int(fields[14 - 3])
            system += int(fields[15 - 3])
        except (IndexError, ValueError):
            continue
    return CpuTimes(user * CLOCK_TICK_S, system * CLOCK_TICK_S)


def cpu_ns(pids):
    """Nanoseconds on CPU of all threads of `pids` (schedstat), summed."""
    total = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            except (OSError, IndexError, ValueError):
                continue
    return total


def settled_memory_kb(pids, *, step_s=0.5, steady_s=2.0, timeout_s=10.0):
    """`memory_kb(pids)` once RSS has settled: read every `step_s` until it has stayed
    within 1% (and 64 kB) of one value for `steady_s`, or `timeout_s` passed. An
    allocator that returns freed memory to the system on a timer would otherwise be read
    halfway: holdfast's jemalloc gives it back in steps about a second apart (after 10,000
    silent connections closed: 18.7 MB, then 10.3 MB for 1 s, then 9.1 MB from 2 s on).
    Returns (rss, hwm, seconds waited)."""
    started = time.monotonic()
    rss, hwm = memory_kb(pids)
    steady_since = started
    while time.monotonic() - started < timeout_s:
        time.sleep(step_s)
        before = rss
        rss, hwm = memory_kb(pids)
        now = time.monotonic()
        if abs(rss - before) > max(64, before // 100):
            steady_since = now
        elif now - steady_since >= steady_s:
            break
    return rss, hwm, round(time.monotonic() - started, 2)


def memory_kb(pids):
    """(VmRSS, VmHWM) summed over `pids`, in kB."""
    rss = hwm = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm += int(line.split()[1])
    return rss, hwm


def core_times():
    """Per-CPU (busy, total) jiffies from /proc/stat, keyed by CPU number."""
    cores = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        name, *values = line.split()
        values = [int(v) for v in values]
        idle = values[3] + values[4]  # idle + iowait
        cores[int(name[3:])] = (sum(values[:8]) - idle, sum(values[:8]))
    return cores


def core_busy(before, after):
    """Share of time each CPU was busy between two `core_times()` samples."""
    busy = {}
    for cpu, (b1, t1) in after.items():
        b0, t0 = before.get(cpu, (0, 0))
        busy[cpu] = (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0
    return busy
