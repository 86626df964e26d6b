"""What the integration drills (integrations/dokku/tests, integrations/docker/tests) share:
the clients they send through holdfast (keep-alive and closing HTTP/1.1 load, one
WebSocket, one-off requests) and the small pieces every step uses (Failure, log,
free_port, wait_until). The app they send to is app.js beside this file.

Everything talks to 127.0.0.1 only. Python 3 standard library only.
"""

import argparse
import base64
import http.client
import json
import os
import random
import socket
import subprocess
import threading
import time
from dataclasses import dataclass


class Failure(Exception):
    """A step of a drill that did not do what it must."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def now_ms():
    return time.time() * 1000.0


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def wait_until(check, what, timeout=10.0, interval=0.05):
    """Calls `check` every `interval` seconds until it returns something true, and returns
    that; a Failure naming `what` after `timeout` seconds."""
    deadline = time.time() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.time() > deadline:
            raise Failure(f"{what}: not within {timeout:g} s")
        time.sleep(interval)


def drill_arguments(doc, phases):
    """The command line both drills take: --holdfast BINARY, --keep (the temp dir), and
    --phase NAME (repeatable; every phase by default). Each drill adds its own."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--holdfast", required=True, help="the holdfast binary")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    parser.add_argument("--phase", action="append", choices=phases,
                        help="run only this phase (repeatable); default: every phase")
    return parser


def run_drill(drill):
    """Runs a drill (an object with `run`, `cleanup`, `summary` and a `problems` list):
    its cleanup and summary whatever happens, and 1 as the exit code when it found a
    problem."""
    try:
        drill.run()
    except Failure as e:
        drill.problems.append(str(e))
        log(f"FAIL: {e}")
    except Exception as e:  # the summary must say what broke, whatever it was
        drill.problems.append(f"{type(e).__name__}: {e}")
        raise
    finally:
        drill.cleanup()
        drill.summary()
    return 1 if drill.problems else 0


def read_events(path, kind=None):
    """The events app.js logged to `path` (one JSON object a line), oldest first; only
    those named `kind` when given. Nothing yet when the file does not exist."""
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    event = json.loads(line)
                    if kind is None or event["ev"] == kind:
                        out.append(event)
    return out


def stop_process(proc, timeout):
    """SIGTERM to `proc` (a Popen) if it still runs, SIGKILL after `timeout` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def request(host, path="/", port=None, method="GET", body=None, tls=None, timeout=10):
    """One request on a new connection to 127.0.0.1:`port`; TLS with SNI `host` when tls
    (an SSLContext). Returns (response, body bytes)."""
    if tls is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=tls)
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        conn.sock = tls.wrap_socket(raw, server_hostname=host)
    headers = {"Host": host, "Connection": "close"}
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
    finally:
        conn.close()
    return resp, data


@dataclass
class Exchange:
    """One request of the load: when it started and ended (ms since the epoch), whether
    it got a 200 from a known instance, and that instance or what went wrong."""

    start_ms: float
    end_ms: float
    ok: bool
    detail: str


class Load:
    """Keep-alive clients (one connection each, reused) and closing clients (a new
    connection per request, Connection: close) to 127.0.0.1:`port` with Host `host`;
    every response must be a 200 naming an instance in `known` (anything with `in`).
    Each GET asks the app for a random delay of 0 to `max_delay_ms`, so requests are in
    flight at any moment. Bounded: each client stops after `max_seconds` or
    `max_requests`, whichever comes first, if `finish` has not stopped it before."""

    def __init__(self, port, host, known, keepalive=6, closing=3, max_delay_ms=15,
                 max_seconds=600, max_requests=200_000):
        self.port = port
        self.host = host
        self.known = known
        self.clients = (keepalive, closing)
        self.max_delay_ms = max_delay_ms
        self.deadline = time.time() + max_seconds
        self.max_requests = max_requests
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.ok = 0
        self.failures = []
        self.per_instance = {}
        self.exchanges = []
        self.threads = []

    def record(self, start_ms, ok, detail):
        with self.lock:
            self.exchanges.append(Exchange(start_ms, now_ms(), ok, detail))
            if ok:
                self.ok += 1
                self.per_instance[detail] = self.per_instance.get(detail, 0) + 1
            else:
                self.failures.append(detail)

    def check(self, resp, body):
        if resp.status != 200:
            return False, f"status {resp.status}: {body[:200]!r}"
        try:
            ident = json.loads(body)["instance"]
        except (ValueError, KeyError):
            return False, f"body {body[:200]!r}"
        if ident not in self.known:
            return False, f"unknown instance {ident!r}"
        return True, ident

    def running(self, sent):
        return not self.stop.is_set() and sent < self.max_requests and time.time() < self.deadline

    def path(self):
        return f"/?delay={random.randint(0, self.max_delay_ms)}"

    def keepalive(self):
        conn = None
        sent = 0
        while self.running(sent):
            sent += 1
            start = now_ms()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                conn.request("GET", self.path(), headers={"Host": self.host})
                resp = conn.getresponse()
                body = resp.read()
                self.record(start, *self.check(resp, body))
                if resp.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                self.record(start, False, f"keep-alive client: {type(e).__name__}: {e}")
                if conn is not None:
                    conn.close()
                conn = None
            time.sleep(0.005)
        if conn is not None:
            conn.close()

    def closing(self):
        sent = 0
        while self.running(sent):
            sent += 1
            start = now_ms()
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            try:
                conn.request("GET", self.path(), headers={"Host": self.host, "Connection": "close"})
                resp = conn.getresponse()
                self.record(start, *self.check(resp, resp.read()))
            except (OSError, http.client.HTTPException) as e:
                self.record(start, False, f"closing client: {type(e).__name__}: {e}")
            finally:
                conn.close()
            time.sleep(0.005)

    def start(self):
        keepalive, closing = self.clients
        for _ in range(keepalive):
            self.threads.append(threading.Thread(target=self.keepalive, daemon=True))
        for _ in range(closing):
            self.threads.append(threading.Thread(target=self.closing, daemon=True))
        for t in self.threads:
            t.start()
        return self

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=15)

    def total(self):
        return self.ok + len(self.failures)


class WebSocket:
    """One WebSocket to 127.0.0.1:`port` with Host `host`, a text frame echoed every
    `interval` seconds; `instance` is the app instance that answered the first echo."""

    def __init__(self, port, host, interval=0.25):
        self.interval = interval
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise Failure("WebSocket: connection closed during the handshake")
            head += chunk
        if not head.startswith(b"HTTP/1.1 101"):
            raise Failure(f"WebSocket handshake answered {head.splitlines()[0]!r}")
        self.echoes = 0
        self.instance = None
        self.error = None
        self.last_echo = time.time()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def recv_exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise OSError("connection closed")
            data += chunk
        return data

    def echo(self, text):
        payload = text.encode()
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + masked)
        head = self.recv_exact(2)
        length = head[1] & 0x7F
        if length == 126:
            length = int.from_bytes(self.recv_exact(2), "big")
        reply = self.recv_exact(length).decode()
        ident, _, echoed = reply.partition(" ")
        if echoed != text:
            raise OSError(f"echo {reply!r} for {text!r}")
        return ident

    def loop(self):
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                ident = self.echo(f"ping {n}")
            except OSError as e:
                self.error = f"WebSocket broke after {self.echoes} echoes: {e}"
                return
            self.instance = self.instance or ident
            self.echoes += 1
            self.last_echo = time.time()
            self.stop.wait(self.interval)

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        try:
            self.sock.sendall(bytes([0x88, 0x80]) + os.urandom(4))
        except OSError:
            pass
        self.sock.close()
