"""The Docker side of the Docker drill: a dockerd of the drill's own, the Engine API over
its unix socket, the daemon's event stream, and a proxy on that socket that holds the
answer to a listing. Python 3 standard library only.

The drill runs its own dockerd (start-docker's options, which include --live-restore, plus
its own socket, data root and exec root under a temp dir) rather than the machine's: the
daemon-restart phase stops and starts it, which must not disturb anyone else's containers,
and holdfast then sees the drill's containers and no others.
"""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse

from clients import Failure, log

API = "/v1.41"  # docker.io 20.10's API; the drill needs nothing newer
DRILL_LABEL = "holdfast-drill"  # on every container the drill starts, so cleanup finds them


class UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 to a unix socket (the Engine API)."""

    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.unix_path)
        self.sock = sock


class Engine:
    """The Engine API calls the drill makes, each on a connection of its own (the load
    threads and the phase call it at once)."""

    def __init__(self, sock_path):
        self.sock_path = sock_path

    def call(self, method, path, body=None, timeout=60, ok=(200, 201, 204, 304)):
        conn = UnixConnection(self.sock_path, timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json"} if data is not None else {}
            conn.request(method, API + path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        if resp.status not in ok:
            raise Failure(f"Docker API {method} {path}: {resp.status} {raw[:300]!r}")
        if raw and resp.getheader("content-type", "").startswith("application/json"):
            return json.loads(raw)
        return raw

    def ping(self):
        try:
            return self.call("GET", "/_ping", timeout=2) == b"OK"
        except (OSError, http.client.HTTPException, Failure):
            return False

    def run(self, name, image, cmd, env=(), labels=None, health=True, init=True, binds=()):
        """`docker run -d [--init] --network host --name NAME [--no-healthcheck] ...`:
        creates and starts a container, returns its full id."""
        body = {
            "Image": image,
            "Cmd": list(cmd),
            "Env": list(env),
            "Labels": {DRILL_LABEL: "1", **(labels or {})},
            "HostConfig": {"NetworkMode": "host", "Init": init, "Binds": list(binds)},
        }
        if not health:
            body["Healthcheck"] = {"Test": ["NONE"]}
        created = self.call("POST", f"/containers/create?name={urllib.parse.quote(name)}", body)
        self.call("POST", f"/containers/{created['Id']}/start")
        return created["Id"]

    def stop(self, ident, grace=10):
        self.call("POST", f"/containers/{ident}/stop?t={grace}", timeout=grace + 30)

    def kill(self, ident, sig="KILL"):
        self.call("POST", f"/containers/{ident}/kill?signal={sig}")

    def remove(self, ident):
        self.call("DELETE", f"/containers/{ident}?force=1", ok=(200, 204, 404))

    def inspect(self, ident):
        return self.call("GET", f"/containers/{ident}/json")

    def drill_containers(self):
        filters = urllib.parse.quote(json.dumps({"label": [f"{DRILL_LABEL}=1"]}))
        return [c["Id"] for c in self.call("GET", f"/containers/json?all=1&filters={filters}")]

    def remove_drill_containers(self):
        ids = self.drill_containers()
        for ident in ids:
            self.remove(ident)
        return len(ids)


class Daemon:
    """The drill's dockerd: started and stopped by the drill, with start-docker's options
    (`start-docker --options`) and a socket, data root, exec root and pid file in a short
    temp dir (containerd's socket paths must stay under 108 bytes)."""

    def __init__(self, start_docker):
        options = subprocess.run([start_docker, "--options"], check=True, capture_output=True,
                                 text=True).stdout.split()
        if "--live-restore" not in options:
            raise Failure(f"start-docker's options lack --live-restore: {options}")
        self.dir = tempfile.mkdtemp(prefix="hfdd.", dir="/tmp")
        self.sock = os.path.join(self.dir, "docker.sock")
        self.argv = ["dockerd", *options, "-H", f"unix://{self.sock}",
                     "--data-root", os.path.join(self.dir, "data"),
                     "--exec-root", os.path.join(self.dir, "exec"),
                     "--pidfile", os.path.join(self.dir, "docker.pid")]
        self.log_path = os.path.join(self.dir, "dockerd.log")
        self.engine = Engine(self.sock)
        self.proc = None
        self.env = dict(os.environ, DOCKER_HOST=f"unix://{self.sock}")

    def start(self, timeout=60):
        started = time.time()
        with open(self.log_path, "a") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        while not self.engine.ping():
            if self.proc.poll() is not None:
                raise Failure(f"dockerd exited {self.proc.returncode} before answering; log:\n{self.log_tail()}")
            if time.time() - started > timeout:
                raise Failure(f"dockerd did not answer within {timeout} s; log:\n{self.log_tail()}")
            time.sleep(0.05)
        return time.time() - started

    def stop(self, timeout=30):
        """SIGTERM to dockerd and wait for it to exit; with --live-restore its containers
        keep running."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, lines=20):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    def destroy(self):
        """Stops dockerd (containers first: live-restore would leave them running) and
        removes its directory, unmounting what it left mounted there."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.engine.remove_drill_containers()
            except (OSError, http.client.HTTPException, Failure) as e:
                log(f"cleanup: removing containers failed: {e}")
        self.stop()
        with open("/proc/mounts") as f:
            mounts = [line.split()[1] for line in f if line.split()[1].startswith(self.dir + "/")]
        for path in sorted(mounts, reverse=True):
            subprocess.run(["umount", "-l", path], check=False, capture_output=True)
        subprocess.run(["rm", "-rf", self.dir], check=False, capture_output=True)


class Events:
    """The daemon's container events (the drill's containers only), read from
    /events in a thread, reconnecting while the daemon is down; each kept as the API's
    dict. `t_ms(event)` is the event's time in ms since the epoch (the daemon's clock is
    the host's)."""

    def __init__(self, engine):
        self.engine = engine
        self.lock = threading.Lock()
        self.seen = set()
        self.list = []
        self.stop = threading.Event()
        self.since = time.time() - 1
        self.connected = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()
        if not self.connected.wait(10):
            raise Failure("the Docker event stream did not open within 10 s")

    @staticmethod
    def t_ms(event):
        return event["timeNano"] / 1e6

    def loop(self):
        filters = urllib.parse.quote(json.dumps({"type": ["container"], "label": [f"{DRILL_LABEL}=1"]}))
        while not self.stop.is_set():
            conn = UnixConnection(self.engine.sock_path, timeout=None)
            try:
                conn.request("GET", f"{API}/events?since={int(self.since)}&filters={filters}")
                resp = conn.getresponse()
                self.connected.set()
                while not self.stop.is_set():
                    line = resp.readline()
                    if not line:
                        break
                    self.add(json.loads(line))
            except (OSError, http.client.HTTPException, ValueError):
                pass
            finally:
                conn.close()
            self.stop.wait(0.2)

    def add(self, event):
        key = (event.get("id"), event.get("Action"), event.get("timeNano"))
        with self.lock:
            if key in self.seen:
                return
            self.seen.add(key)
            self.list.append(event)
            self.since = max(self.since, event["time"] - 1)

    def find(self, ident, action):
        """The first event of container `ident` whose Action starts with `action`."""
        with self.lock:
            for event in self.list:
                if event.get("id") == ident and event.get("Action", "").startswith(action):
                    return event
        return None

    def wait(self, ident, action, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            event = self.find(ident, action)
            if event:
                return event
            time.sleep(0.02)
        raise Failure(f"no '{action}' event for container {ident[:12]} within {timeout} s")

    def close(self):
        self.stop.set()


class HeldListing:
    """A unix socket at `path` that passes everything on to the daemon's socket at once,
    except the daemon's answer to the first container listing (`GET /vN/containers/json`,
    not an inspection `/containers/ID/json`): that waits until `release()`, or `hold_max`
    s. So a container can start after the daemon made the listing and before the client
    reads it, a race that otherwise lasts microseconds. The answer is held rather than the
    request: a request held while the container starts would list it."""

    LISTING = re.compile(rb"^GET (/v[0-9.]+)?/containers/json[? ]", re.M)

    def __init__(self, path, daemon_sock, hold_max=5.0):
        self.path = path
        self.daemon_sock = daemon_sock
        self.hold_max = hold_max
        self.armed = True  # only the first listing is held
        self.holding = threading.Event()
        self.released = threading.Event()
        self.went_on = None  # when the answer went on (time.time())
        self.held_for = None  # for how many seconds it was held
        self.ran_out = False  # hold_max passed before release()
        self.lock = threading.Lock()
        self.socks = []
        self.stop = threading.Event()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(16)
        # accept() wakes every 0.2 s to see `stop`: closing a listening socket from
        # another thread does not wake it on Linux (and its number could be reused).
        self.listener.settimeout(0.2)
        self.acceptor = threading.Thread(target=self.accept_loop, daemon=True)
        self.acceptor.start()

    def accept_loop(self):
        while not self.stop.is_set():
            try:
                client, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            client.settimeout(None)
            daemon = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                daemon.connect(self.daemon_sock)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.socks += [client, daemon]
            threading.Thread(target=self.connection, args=(client, daemon), daemon=True).start()

    def connection(self, client, daemon):
        """Both directions of one connection, each on a thread of its own so that neither
        waits for the other (an events stream flows one way only); closed once both
        have ended."""
        listing = threading.Event()  # this connection's next answer is the listing's
        up = threading.Thread(target=self.pump, args=(client, daemon, self.spot, listing), daemon=True)
        up.start()
        self.pump(daemon, client, self.hold, listing)
        up.join()
        with self.lock:
            self.socks = [s for s in self.socks if s not in (client, daemon)]
        client.close()
        daemon.close()

    def spot(self, chunk, listing):
        """client -> daemon: marks the connection before its listing request goes on,
        so the answer cannot arrive first."""
        with self.lock:
            first = self.armed and self.LISTING.search(chunk)
            if first:
                self.armed = False
        if first:
            listing.set()

    def hold(self, chunk, listing):
        """daemon -> client: the first chunk of the listing's answer waits."""
        if listing.is_set():
            listing.clear()
            began = time.time()
            self.holding.set()
            self.ran_out = not self.released.wait(self.hold_max)
            self.held_for = time.time() - began
            self.went_on = began + self.held_for

    def pump(self, src, dst, look, listing):
        """Copies `src` to `dst` until `src` ends (then ends `dst`'s writing half, so the
        far side sees the end as this one did) or either fails (then shuts both down,
        which ends the other direction too)."""
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    dst.shutdown(socket.SHUT_WR)
                    return
                look(chunk, listing)
                dst.sendall(chunk)
        except OSError:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def release(self):
        self.released.set()

    def close(self):
        """Stops accepting and ends every connection (their pumps then return)."""
        self.stop.set()
        self.released.set()
        self.acceptor.join(timeout=5)
        self.listener.close()
        with self.lock:
            socks, self.socks = self.socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
