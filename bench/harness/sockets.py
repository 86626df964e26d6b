"""Picks free loopback ports and counts TCP sockets with `ss`: listening, established,
TIME_WAIT."""

import re
import socket
import subprocess
import time

# Linux keeps a closed connection in TIME_WAIT for this long (TCP_TIMEWAIT_LEN).
TIME_WAIT_S = 60.0


def free_ports(count, start=23400):
    """`count` ports on 127.0.0.1 that nothing is bound to, below the ephemeral range."""
    ports = []
    port = start
    while len(ports) < count:
        if port >= 32768:
            raise RuntimeError("no free loopback ports between 23400 and 32767")
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
                ports.append(port)
            except OSError:
                pass
        port += 1
    return ports


def _ss(args, netns=None):
    argv = ["ss", "-Htn", *args]
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    return out.stdout.splitlines()


def _port(endpoint):
    return int(endpoint.rsplit(":", 1)[1])


def is_listening(port, netns=None):
    return any(_port(line.split()[3]) == port for line in _ss(["-l"], netns))


def wait_listening(port, *, timeout_s, netns=None, child=None):
    """Waits until something listens on `port`; False on timeout or if `child` exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if is_listening(port, netns):
            return True
        if child is not None and not child.is_alive():
            return False
        time.sleep(0.05)
    return False


def established(local_port, netns=None):
    """Established connections whose local port is `local_port` (a server's accepted sockets)."""
    lines = _ss(["state", "established"], netns)
    return sum(1 for line in lines if _port(line.split()[2]) == local_port)


def established_count(local_port, netns=None):
    """Like `established`, with the port filter done by ss in the kernel: cheap enough to
    sample during a load window with thousands of sockets."""
    return len(_ss(["state", "established", f"( sport = :{local_port} )"], netns))


def established_to(remote_port, netns=None):
    """Established connections whose peer port is `remote_port`: a client's (a proxy's)
    connections to the server on that port, filtered in the kernel like
    `established_count`."""
    return len(_ss(["state", "established", f"( dport = :{remote_port} )"], netns))


def established_on_any(local_ports, netns=None):
    """Established connections whose local port is any of `local_ports` (a server's
    accepted sockets on several ports), filtered in the kernel like `established_count`."""
    ports = list(local_ports)
    if not ports:
        return 0
    expression = " or ".join(f"sport = :{port}" for port in ports)
    return len(_ss(["state", "established", f"( {expression} )"], netns))


def not_closed(local_port, netns=None):
    """A server's connections on `local_port` that it has not closed yet: established, or
    closed by the peer and not yet by the server (CLOSE_WAIT), or closing. Not TIME_WAIT,
    and not SYN_RECV: a handshake the kernel has not finished is no socket of the server's
    yet."""
    return len(_ss(["state", "connected", "exclude", "time-wait", "exclude", "syn-recv",
                    f"( sport = :{local_port} )"], netns))


def handshaking(local_port, netns=None):
    """Connections to `local_port` in SYN_RECV: the kernel has not finished their handshake
    (a full accept queue makes it drop the client's last ACK, and the client, which thinks
    it is connected, has its ACK retried later)."""
    return len(_ss(["state", "syn-recv", f"( sport = :{local_port} )"], netns))


def _listener(port, netns=None):
    """(accept queue length, backlog) of the listener on `port` (its Recv-Q and Send-Q),
    or None if nothing listens there."""
    for line in _ss(["-l", f"( sport = :{port} )"], netns):
        fields = line.split()
        if fields and fields[0] == "LISTEN":
            return int(fields[1]), int(fields[2])
    return None


def accept_queue(port, netns=None):
    """Connections waiting in the accept queue of the listener on `port`; None if nothing
    listens there."""
    listener = _listener(port, netns)
    return listener[0] if listener else None


def listen_backlog(port, netns=None):
    """The backlog the listener on `port` asked for (capped by net.core.somaxconn): once
    that many connections wait to be accepted, the kernel drops new SYNs and the clients
    retry after 1 s, 3 s, 7 s...; None if nothing listens there."""
    listener = _listener(port, netns)
    return listener[1] if listener else None


_TIMER = re.compile(r"timer:\(timewait,(\d+)(ms|sec|min)")
_UNIT_S = {"ms": 0.001, "sec": 1.0, "min": 60.0}


def time_wait(ports, *, since_s=None, netns=None):
    """TIME_WAIT sockets with a local or peer port in `ports`.

    With `since_s`, only those that entered TIME_WAIT in the last `since_s` seconds count,
    judged by the time they have left (ss prints whole seconds, so one second of slack), so
    sockets left over from an earlier run do not count against this one.
    """
    ports = set(ports)
    count = 0
    for line in _ss(["-o", "state", "time-wait"], netns):
        fields = line.split()
        if _port(fields[2]) not in ports and _port(fields[3]) not in ports:
            continue
        if since_s is not None:
            match = _TIMER.search(line)
            if match:
                left_s = int(match.group(1)) * _UNIT_S[match.group(2)]
                if left_s < TIME_WAIT_S - since_s - 1.0:
                    continue
        count += 1
    return count
