#!/usr/bin/env python3
"""The holdfast-vhosts drill: the plugin, a real holdfast and real app processes, driven
through Dokku's lifecycle trigger by trigger, under load.

run-drill is the entry point (it finds or builds holdfast and checks what the drill
needs); this file is the drill. Python 3 standard library only.

What stands in for Dokku (nothing else is simulated):
  - standin/plugn: `plugn trigger NAME ARGS...` over the enabled plugins, as plugn does;
  - standin/dokku: Dokku's command dispatcher, for `dokku holdfast:*`;
  - standin/core: the core plugins' answers (proxy-type, network-get-listeners,
    ports-get, domains-list, certs-exists...), read from the files where Dokku keeps them;
  - this file: the core commands (apps:create, ports:set, domains:add, deploy, ps:scale,
    certs:add, apps:rename, apps:destroy, proxy:disable, proxy:enable,
    proxy:build-config --all), each writing that state and calling the triggers in the
    order Dokku's scheduler-docker-local, apps and proxy plugins call them; app-restart
    (ps:restart) is a deploy the drill runs once the command that asked for it returns;
  - a scheduler (--scheduler process: a "container" is a Node.js process on 127.0.0.1 and
    a port of its own; the check Dokku runs before a container counts is a GET of
    /__health on it).

Phases (--phase runs some of them): deploys (under load), proxy (proxy:disable/enable
and the holdfast:* commands that read state), grpc (a grpcio app behind a grpc mapping),
acme (pebble issuing through holdfast for the app's domains, then for a domain added on
a reload).

Everything listens on loopback only: holdfast on 127.0.0.1:18080/18443/18051 and [::1]
(the port mappings http:18080:5000, https:18443:5000, grpc:18051:50051), pebble, its
DNS server and the instances on free ports.
"""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGIN_SRC = os.path.dirname(HERE)
HTTP_PORT = 18080
HTTPS_PORT = 18443
DOMAIN = "drill.example.test"
OTHER_DOMAIN = "other.example.test"
KEEPALIVE_CLIENTS = 6
CLOSING_CLIENTS = 3
REDEPLOYS = 10
TOGGLE_DOMAIN = "toggle.example.test"
GRPC_PORT = 18051
GRPC_DOMAIN = "grpc.example.test"
GRPC_CALLS = 20
ACME_DOMAIN = "acme.example.test"
ACME_DOMAIN_2 = "acme2.example.test"
PHASES = ("deploys", "proxy", "grpc", "acme")

sys.path.insert(0, os.path.join(HERE, "..", "..", "drill"))
from clients import (Failure, Load, WebSocket, drill_arguments, free_port, log, now_ms,  # noqa: E402
                     read_events, run_drill, stop_process)
import clients  # noqa: E402

APP_JS = os.path.join(HERE, "..", "..", "drill", "app.js")


def request(host, path="/", port=HTTP_PORT, **kwargs):
    """clients.request to holdfast's http port unless told another."""
    return clients.request(host, path, port=port, **kwargs)


# --- the machine: a Dokku tree under a temp dir --------------------------------------


class Machine:
    """A temp dir laid out as a Dokku host, the environment its commands see, and the
    calls into the plugin (`plugn trigger`, `dokku`)."""

    def __init__(self, root, holdfast_bin):
        self.root = root
        self.dokku_root = os.path.join(root, "home/dokku")
        self.lib_root = os.path.join(root, "var/lib/dokku")
        self.plugin_path = os.path.join(self.lib_root, "plugins")
        self.data = os.path.join(self.lib_root, "data/holdfast")
        self.main = os.path.join(self.data, "holdfast.toml")
        self.log_dir = os.path.join(root, "log")
        for d in (self.dokku_root, self.log_dir, os.path.join(self.plugin_path, "available"),
                  os.path.join(self.plugin_path, "enabled"),
                  os.path.join(self.lib_root, "core-plugins/available")):
            os.makedirs(d, exist_ok=True)
        bin_dir = os.path.join(root, "bin")
        os.makedirs(bin_dir)
        for name in ("plugn", "dokku"):
            shutil.copy2(os.path.join(HERE, "standin", name), os.path.join(bin_dir, name))
        os.symlink(holdfast_bin, os.path.join(bin_dir, "holdfast"))
        self.env = dict(os.environ)
        self.env.pop("HOLDFAST_BIN", None)
        self.env.update({
            "PATH": bin_dir + os.pathsep + os.environ["PATH"],
            "DOKKU_ROOT": self.dokku_root,
            "DOKKU_LIB_ROOT": self.lib_root,
            "PLUGIN_PATH": self.plugin_path,
            "PLUGIN_AVAILABLE_PATH": os.path.join(self.plugin_path, "available"),
            "PLUGIN_ENABLED_PATH": os.path.join(self.plugin_path, "enabled"),
            "PLUGIN_CORE_PATH": os.path.join(self.lib_root, "core-plugins"),
            "PLUGIN_CORE_AVAILABLE_PATH": os.path.join(self.lib_root, "core-plugins/available"),
            "DOKKU_NOT_IMPLEMENTED_EXIT": "10",
            "DOKKU_PID": str(os.getpid()),
        })
        self.env.pop("DOKKU_TRACE", None)
        self.calls = 0

    def run(self, args, check=True, quiet=False):
        self.calls += 1
        p = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=120)
        if not quiet:
            for line in (p.stdout + p.stderr).splitlines():
                print(f"    | {line}", flush=True)
        if check and p.returncode != 0:
            raise Failure(f"{' '.join(args)} exited {p.returncode}: {p.stderr.strip()}")
        return p

    def trigger(self, name, *args, check=True, quiet=False):
        return self.run(["plugn", "trigger", name, *args], check=check, quiet=quiet)

    def dokku(self, *args, check=True, quiet=False):
        return self.run(["dokku", *args], check=check, quiet=quiet)

    def install_plugin(self):
        """As `dokku plugin:install file:///.../holdfast-vhosts.tar.gz --name holdfast-vhosts`:
        plugn fetches the archive with curl and unpacks it; an archive holding one folder
        becomes the plugin's folder; then the plugin is enabled and `install` triggered."""
        archive = os.path.join(self.root, "holdfast-vhosts.tar.gz")
        subprocess.run(["make", "-s", "-C", PLUGIN_SRC, "package", f"ARCHIVE={archive}"], check=True)
        target = os.path.join(self.plugin_path, "available/holdfast-vhosts")
        os.makedirs(target)
        subprocess.run(f"curl -sfL 'file://{archive}' | tar xz -C '{target}'", shell=True, check=True)
        entries = os.listdir(target)
        if len(entries) == 1 and os.path.isdir(os.path.join(target, entries[0])):
            inner = os.path.join(target, entries[0])
            for name in os.listdir(inner):
                os.rename(os.path.join(inner, name), os.path.join(target, name))
            os.rmdir(inner)
        core = os.path.join(self.plugin_path, "available/00_dokku-core")
        shutil.copytree(os.path.join(HERE, "standin/core"), core, symlinks=True)
        for name in ("00_dokku-core", "holdfast-vhosts"):
            os.symlink(os.path.join(self.plugin_path, "available", name),
                       os.path.join(self.plugin_path, "enabled", name))
        self.trigger("install")

    def app_file(self, app):
        return os.path.join(self.data, "apps", f"{app}.toml")

    def write(self, path, text):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def prop_write(self, plugin, app, key, value):
        self.write(os.path.join(self.lib_root, "config", plugin, app, key), value)

    def stop_holdfast(self):
        pidfile = os.path.join(self.data, "holdfast.pid")
        if os.path.exists(pidfile):
            self.dokku("holdfast:stop", check=False)


# --- schedulers: where an app's containers run -----------------------------------------


class Instance:
    """One container of an app: its address, its event log, and the times the drill
    made it visible to the proxy and sent it SIGTERM."""

    def __init__(self, ident, port, events):
        self.id = ident
        self.port = port
        self.events_path = events
        self.visible_ms = None
        self.sigterm_ms = None

    def events(self):
        return read_events(self.events_path)


class ProcessScheduler:
    """--scheduler process: each container is `node app.js` on 127.0.0.1:PORT."""

    name = "process"
    check = "http"

    def __init__(self, root):
        self.root = root
        self.procs = {}

    def start(self, ident, port):
        events = os.path.join(self.root, "events", f"{ident}.jsonl")
        os.makedirs(os.path.dirname(events), exist_ok=True)
        env = dict(os.environ, PORT=str(port), INSTANCE=ident, EVENTS=events)
        out = open(os.path.join(self.root, "events", f"{ident}.out"), "w")
        self.procs[ident] = subprocess.Popen(["node", APP_JS], env=env,
                                             stdout=out, stderr=subprocess.STDOUT)
        return Instance(ident, port, events)

    def signal(self, inst, sig):
        proc = self.procs[inst.id]
        if proc.poll() is None:
            proc.send_signal(sig)

    def alive(self, inst):
        return self.procs[inst.id].poll() is None

    def cleanup(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


class DockerScheduler:
    """--scheduler docker: each container is `node /app/app.js` in a Docker container on
    the host network (the daemon start-docker runs has no bridge), listening on
    127.0.0.1:PORT, with --init so SIGTERM reaches node (DOCKER.md). The image is made
    from the host's node and app.js by make-image; the events folder is mounted at the
    same path, so the drill reads each container's log as it reads a process's."""

    name = "docker"
    check = "http"
    image = "holdfast-dokku-drill-app"

    def __init__(self, root):
        self.root = root
        self.names = {}
        for script in ("start-docker", "make-image"):
            if not os.access(os.path.join(HERE, script), os.X_OK):
                raise Failure(f"--scheduler docker needs tests/{script}")
        subprocess.run([os.path.join(HERE, "start-docker")], check=True)
        node = shutil.which("node")
        subprocess.run([os.path.join(HERE, "make-image"), self.image, node,
                        f"{APP_JS}:/app/app.js"], check=True,
                       stdout=subprocess.DEVNULL)
        self.events = os.path.join(root, "events")
        os.makedirs(self.events, exist_ok=True)

    def docker(self, *args, check=True):
        return subprocess.run(["docker", *args], check=check, capture_output=True, text=True, timeout=60)

    def start(self, ident, port):
        events = os.path.join(self.events, f"{ident}.jsonl")
        name = f"holdfast-drill-{os.getpid()}-{ident}".replace(".", "-")
        self.docker("run", "-d", "--init", "--network", "host", "--name", name,
                    "-e", f"PORT={port}", "-e", f"INSTANCE={ident}", "-e", f"EVENTS={events}",
                    "-v", f"{self.events}:{self.events}", self.image, "node", "/app/app.js")
        self.names[ident] = name
        return Instance(ident, port, events)

    def signal(self, inst, sig):
        self.docker("kill", f"--signal={int(sig)}", self.names[inst.id], check=False)

    def alive(self, inst):
        p = self.docker("inspect", "-f", "{{.State.Running}}", self.names[inst.id], check=False)
        return p.stdout.strip() == "true"

    def cleanup(self):
        if self.names:
            self.docker("rm", "-f", *self.names.values(), check=False)


class GrpcScheduler(ProcessScheduler):
    """The gRPC app's containers: `grpc_app.py server` (grpcio) on 127.0.0.1:PORT, as a
    process under either scheduler: the docker scheduler's image holds node and app.js
    only, and an image with Python and grpcio is more than the drill builds. What the
    drill proves of gRPC is holdfast's side (the h2c listener, the route by :authority,
    HTTP/2 to the app), which is the same wherever the instance runs. Its check is a TCP
    connect (a gRPC app has no /__health)."""

    name = "grpc"
    check = "tcp"

    def start(self, ident, port):
        events = os.path.join(self.root, "events", f"{ident}.jsonl")
        os.makedirs(os.path.dirname(events), exist_ok=True)
        out = open(os.path.join(self.root, "events", f"{ident}.out"), "w")
        self.procs[ident] = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "grpc_app.py"), "server", str(port), ident, events],
            stdout=out, stderr=subprocess.STDOUT)
        return Instance(ident, port, events)


# --- pebble, the ACME test CA --------------------------------------------------------------


class Dns:
    """A DNS server for pebble's lookups: every name is 127.0.0.1 (A), with no other
    record, so pebble validates the drill's domains against holdfast on loopback."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    @staticmethod
    def answer(query):
        if len(query) < 12 or query[2] & 0x80 or query[4:6] != b"\x00\x01":
            return None
        at = 12
        while at < len(query) and query[at]:
            at += 1 + query[at]
        question = query[12:at + 5]
        if len(question) < at + 5 - 12:
            return None
        is_a = question[-4:-2] == b"\x00\x01"
        header = query[:2] + bytes([0x84 | (query[2] & 0x79), 0x80, 0, 1, 0, int(is_a), 0, 0, 0, 0])
        reply = header + question
        if is_a:
            reply += bytes([0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 127, 0, 0, 1])
        return reply

    def serve(self):
        while True:
            try:
                query, peer = self.sock.recvfrom(1500)
            except OSError:
                return
            reply = self.answer(query)
            if reply:
                self.sock.sendto(reply, peer)


class Pebble:
    """pebble on loopback: its HTTPS certificate from a CA made here (the file
    letsencrypt-ca names), TLS-ALPN-01 validations sent to the app's https port and
    HTTP-01 ones to its http port, names resolved by Dns, -strict, no artificial sleeps."""

    def __init__(self, root, http_port, tls_port):
        self.dir = os.path.join(root, "pebble")
        os.makedirs(self.dir)
        self.ca_file = os.path.join(self.dir, "ca.pem")
        self.make_tls_files()
        self.dns = Dns()
        self.log_path = os.path.join(self.dir, "pebble.log")
        for _ in range(3):  # a port taken between free_port() and pebble's bind: try others
            self.port, self.mgmt = free_port(), free_port()
            config = os.path.join(self.dir, "pebble-config.json")
            with open(config, "w") as f:
                json.dump({"pebble": {
                    "listenAddress": f"127.0.0.1:{self.port}",
                    "managementListenAddress": f"127.0.0.1:{self.mgmt}",
                    "certificate": os.path.join(self.dir, "cert.pem"),
                    "privateKey": os.path.join(self.dir, "key.pem"),
                    "httpPort": http_port, "tlsPort": tls_port,
                    "ocspResponderURL": "", "externalAccountBindingRequired": False}}, f)
            env = dict(os.environ, PEBBLE_VA_NOSLEEP="1", PEBBLE_WFE_NONCEREJECT="0")
            self.proc = subprocess.Popen(["pebble", "-config", config, "-strict", "-dnsserver", self.dns.address],
                                         env=env, stdout=open(self.log_path, "a"), stderr=subprocess.STDOUT)
            if self.wait_port(self.port) and self.wait_port(self.mgmt):
                self.directory = f"https://127.0.0.1:{self.port}/dir"
                return
            self.stop()
        raise Failure(f"pebble did not start; its log:\n{self.log()}")

    def make_tls_files(self):
        d = self.dir
        key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        for args in (
            ["req", "-x509", *key, "-keyout", f"{d}/ca.key", "-out", self.ca_file, "-days", "2",
             "-subj", "/CN=holdfast drill CA for pebble", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,digitalSignature"],
            ["req", *key, "-keyout", f"{d}/key.pem", "-out", f"{d}/cert.csr", "-subj", "/CN=127.0.0.1"],
        ):
            subprocess.run(["openssl", *args], check=True, capture_output=True)
        with open(f"{d}/ext", "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        subprocess.run(["openssl", "x509", "-req", "-in", f"{d}/cert.csr", "-CA", self.ca_file,
                        "-CAkey", f"{d}/ca.key", "-CAcreateserial", "-out", f"{d}/cert.pem", "-days", "2",
                        "-extfile", f"{d}/ext"], check=True, capture_output=True)

    def wait_port(self, port):
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def issuing_root(self):
        """The root pebble issues under (a new one at each start), from its management port."""
        conn = http.client.HTTPSConnection("127.0.0.1", self.mgmt, timeout=10,
                                           context=ssl.create_default_context(cafile=self.ca_file))
        conn.request("GET", "/roots/0")
        resp = conn.getresponse()
        pem = resp.read().decode()
        conn.close()
        if resp.status != 200 or "BEGIN CERTIFICATE" not in pem:
            raise Failure(f"pebble's /roots/0 answered {resp.status}: {pem[:200]!r}")
        return pem

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        stop_process(self.proc, 5)


# --- Dokku's core commands, trigger by trigger -----------------------------------------


class Dokku:
    """The core side of the commands the drill runs, in the order Dokku runs them."""

    def __init__(self, machine, scheduler):
        self.m = machine
        self.sched = scheduler
        self.instances = {}  # app -> current web instances
        self.all = {}  # id -> Instance, every instance of the scheduler ever started
        self.schedulers = {}  # app -> where its instances run, when not self.sched
        self.deploys = 0

    def app_root(self, app):
        return os.path.join(self.m.dokku_root, app)

    def apps_create(self, app):
        os.makedirs(self.app_root(app))
        self.m.trigger("post-create", app)
        self.instances[app] = []

    def ports_set(self, app, *maps):
        self.m.prop_write("ports", app, "map", "\n".join(maps) + "\n")
        self.m.trigger("post-proxy-ports-update", app, "set")

    def domains_add(self, app, *domains):
        path = os.path.join(self.app_root(app), "VHOST")
        existing = open(path).read().split() if os.path.exists(path) else []
        self.m.write(path, "\n".join(existing + list(domains)) + "\n")
        self.m.trigger("post-domains-update", app, "add", *domains)

    def new_app(self, app, domain, *maps):
        """apps:create, ports:set with `maps`, domains:add `domain`: an app before its
        first deploy."""
        self.apps_create(app)
        self.ports_set(app, *maps)
        self.domains_add(app, domain)

    def certs_add(self, app, crt, key):
        tls = os.path.join(self.app_root(app), "tls")
        shutil.rmtree(tls, ignore_errors=True)
        os.makedirs(tls)
        shutil.copy(crt, os.path.join(tls, "server.crt"))
        shutil.copy(key, os.path.join(tls, "server.key"))
        self.m.trigger("post-certs-update", app)
        self.m.trigger("post-domains-update", app)

    def wait_healthy(self, inst, sched):
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                if sched.check == "tcp":
                    socket.create_connection(("127.0.0.1", inst.port), timeout=2).close()
                    return
                c = http.client.HTTPConnection("127.0.0.1", inst.port, timeout=2)
                c.request("GET", "/__health")
                if c.getresponse().status == 200:
                    c.close()
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise Failure(f"{inst.id} did not pass its check on 127.0.0.1:{inst.port} in 10 s")

    def deploy(self, app, scale=None, sched=None):
        """scheduler-docker-local's scheduler-deploy for the web process: each new
        container started and checked, its IP.web.N/PORT.web.N written (what
        network-get-listeners reads), scheduler-post-deploy-process, the files of
        indexes past the scale removed, core-post-deploy, post-deploy, then SIGTERM to
        every old container."""
        sched = sched or self.schedulers.get(app, self.sched)
        self.schedulers[app] = sched
        old = list(self.instances[app])
        scale = scale or max(1, len(old))
        self.deploys += 1
        new = []
        for index in range(1, scale + 1):
            ident = f"{app}-d{self.deploys}-web.{index}"
            inst = sched.start(ident, free_port())
            if sched is self.sched:
                self.all[ident] = inst
            self.wait_healthy(inst, sched)
            self.m.write(os.path.join(self.app_root(app), f"IP.web.{index}"), "127.0.0.1\n")
            self.m.write(os.path.join(self.app_root(app), f"PORT.web.{index}"), f"{inst.port}\n")
            new.append(inst)
        visible = now_ms()
        for inst in new:
            inst.visible_ms = visible
        self.m.trigger("scheduler-post-deploy-process", app, "web", quiet=True)
        for name in os.listdir(self.app_root(app)):
            for kind in ("IP.web.", "PORT.web."):
                if name.startswith(kind) and int(name[len(kind):]) > scale:
                    os.remove(os.path.join(self.app_root(app), name))
        self.m.trigger("core-post-deploy", app, "5000", "127.0.0.1", f"d{self.deploys}", quiet=True)
        self.m.trigger("post-deploy", app, "5000", "127.0.0.1", f"d{self.deploys}", quiet=True)
        for inst in old:
            inst.sigterm_ms = now_ms()
            sched.signal(inst, signal.SIGTERM)
        self.instances[app] = new
        return new

    def stop_app(self, app):
        sched = self.schedulers.get(app, self.sched)
        for inst in self.instances.get(app, []):
            inst.sigterm_ms = now_ms()
            sched.signal(inst, signal.SIGTERM)
        self.instances[app] = []

    def restarts(self):
        """The app-restart triggers the last command fired (the core stand-in lists the
        apps): ps:restart, a deploy of the same app at the same scale."""
        path = os.path.join(self.m.lib_root, "app-restarts")
        if not os.path.exists(path):
            return []
        apps = open(path).read().split()
        os.remove(path)
        for app in dict.fromkeys(apps):
            self.deploy(app)
        return apps

    def proxy_disable(self, app):
        """proxy:disable (Dokku's proxy plugin): the `disabled` property set, so that
        proxy-is-enabled answers false, then proxy-disable; its app-restart follows."""
        self.m.prop_write("proxy", app, "disabled", "true")
        self.m.trigger("proxy-disable", app)
        return self.restarts()

    def proxy_enable(self, app):
        """proxy:enable: the `disabled` property removed, then proxy-enable; the
        app-restart it asks for is the deploy that routes the app again."""
        os.remove(os.path.join(self.m.lib_root, "config", "proxy", app, "disabled"))
        self.m.trigger("proxy-enable", app)
        return self.restarts()

    def proxy_build_config_all(self):
        """proxy:build-config --all: proxy-build-config for each app, one after the other."""
        for app in sorted(os.listdir(self.m.dokku_root)):
            if os.path.isdir(self.app_root(app)):
                self.m.trigger("proxy-build-config", app, quiet=True)

    def apps_destroy(self, app):
        """apps:destroy: pre-delete, scheduler-stop (containers stopped),
        scheduler-post-delete, post-delete, then the app's folders go."""
        self.m.trigger("pre-delete", app, "tag")
        self.stop_app(app)
        self.m.trigger("scheduler-post-delete", "docker-local", app, "tag")
        self.m.trigger("post-delete", app, "tag")
        shutil.rmtree(self.app_root(app))
        for plugin in ("ports", "proxy"):
            shutil.rmtree(os.path.join(self.m.lib_root, "config", plugin, app), ignore_errors=True)

    def apps_rename(self, old, new):
        """apps:rename: the new app is created, post-app-rename-setup (each plugin
        copies its state: here the core's VHOST, tls, ports and proxy properties),
        the old app destroyed, then post-app-rename, after which Dokku rebuilds the app."""
        scale = len(self.instances[old])
        self.apps_create(new)
        for name in ("VHOST", "tls"):
            src = os.path.join(self.app_root(old), name)
            if os.path.isdir(src):
                shutil.copytree(src, os.path.join(self.app_root(new), name))
            elif os.path.exists(src):
                shutil.copy(src, os.path.join(self.app_root(new), name))
        for plugin in ("ports", "proxy"):
            src = os.path.join(self.m.lib_root, "config", plugin, old)
            if os.path.isdir(src):
                shutil.copytree(src, os.path.join(self.m.lib_root, "config", plugin, new))
        self.m.trigger("post-app-rename-setup", old, new)
        self.apps_destroy(old)
        self.m.trigger("post-app-rename", old, new)
        return self.deploy(new, scale)


# --- the drill ---------------------------------------------------------------------------


class Drill:
    def __init__(self, args):
        self.args = args
        self.root = tempfile.mkdtemp(prefix="holdfast-dokku-drill.")
        self.m = Machine(self.root, args.holdfast)
        self.sched = {"process": ProcessScheduler, "docker": DockerScheduler}[args.scheduler](self.root)
        self.d = Dokku(self.m, self.sched)
        self.grpc_sched = GrpcScheduler(self.root)
        self.pebble = None
        self.problems = []
        self.numbers = {}

    def expect(self, ok, message):
        if not ok:
            self.problems.append(message)
            log(f"FAIL: {message}")

    def step(self, text):
        log(text)

    def run(self):
        started = time.time()
        m, d = self.m, self.d
        app = "drill-app"

        self.step("plugin:install from the package archive, then the global settings")
        m.install_plugin()
        m.dokku("holdfast:set", "--global", "bind-address-ipv4", "127.0.0.1")
        m.dokku("holdfast:set", "--global", "bind-address-ipv6", "::1")
        m.dokku("holdfast:set", "--global", "http-port", str(HTTP_PORT))
        m.dokku("holdfast:set", "--global", "admin-address", f"127.0.0.1:{free_port()}")
        m.dokku("holdfast:set", "--global", "access-log-path", os.path.join(m.log_dir, "access.log"))
        rejected = m.dokku("holdfast:set", app, "x-forwarded-for-value", "$remote_addr", check=False)
        self.expect(rejected.returncode != 0 and "trusted-proxies" in rejected.stderr,
                    "holdfast:set x-forwarded-for-value is refused with a pointer to trusted-proxies")
        m.prop_write("proxy", "--global", "type", "holdfast")  # proxy:set --global type holdfast
        m.dokku("holdfast:start")

        phases = self.args.phase or PHASES
        for name in PHASES:
            if name in phases:
                getattr(self, f"phase_{name}")()

        self.check_instances()
        self.numbers["duration_seconds"] = round(time.time() - started, 1)
        self.numbers["plugin_calls"] = m.calls

    def phase_deploys(self):
        """Deploys under load, scaling, parallel builds, certificates, rename, destroy."""
        m, d = self.m, self.d
        app = "drill-app"
        started = time.time()
        self.step(f"apps:create {app}, ports:set, domains:add (nothing to route yet)")
        d.new_app(app, DOMAIN, f"http:{HTTP_PORT}:5000", f"https:{HTTPS_PORT}:5000")
        self.expect(not os.path.exists(m.app_file(app)), "no app file before the first deploy")

        self.step("first deploy")
        d.deploy(app, 1)
        resp, body = request(DOMAIN)
        self.expect(resp.status == 200, f"first deploy serves: {resp.status} {body[:100]!r}")

        load = Load(HTTP_PORT, DOMAIN, d.all, KEEPALIVE_CLIENTS, CLOSING_CLIENTS)
        ws = WebSocket(HTTP_PORT, DOMAIN)
        load.start()
        deploy_start = time.time()
        self.step(f"{REDEPLOYS} redeploys under load ({KEEPALIVE_CLIENTS} keep-alive, "
                  f"{CLOSING_CLIENTS} closing clients, one WebSocket)")
        for _ in range(REDEPLOYS):
            d.deploy(app)
            time.sleep(0.4)
        self.step("ps:scale web=3, then web=1, under load")
        d.deploy(app, 3)
        time.sleep(1.0)
        d.deploy(app, 1)
        time.sleep(0.5)

        self.step("a second app, then proxy:build-config --all --parallel 4 (twice) under load")
        other = "drill-other"
        d.new_app(other, OTHER_DOMAIN, f"http:{HTTP_PORT}:5000")
        d.deploy(other, 1)
        procs = []
        for _ in range(2):
            for a in (app, other):
                procs.append(subprocess.Popen(["plugn", "trigger", "proxy-build-config", a], env=m.env,
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for p in procs:
            out, err = p.communicate(timeout=60)
            self.expect(p.returncode == 0, f"parallel proxy-build-config exited {p.returncode}: {err.strip()}")
        resp, body = request(OTHER_DOMAIN)
        self.expect(resp.status == 200 and other in body.decode(),
                    f"after the parallel builds {OTHER_DOMAIN} reaches {other}: {resp.status} {body[:100]!r}")
        time.sleep(0.5)
        load.finish()
        deploy_seconds = time.time() - deploy_start

        self.expect(ws.error is None, ws.error or "")
        self.expect(time.time() - ws.last_echo < 2, "the WebSocket echoed within the last 2 s")
        ws_instance, ws_echoes = ws.instance, ws.echoes
        ws.close()
        self.numbers.update(requests=load.ok + len(load.failures), failed=len(load.failures),
                            ws_echoes=ws_echoes, ws_instance=ws_instance,
                            deploy_seconds=round(deploy_seconds, 1))
        for f in load.failures[:10]:
            log(f"  failed request: {f}")
        self.expect(not load.failures, f"{len(load.failures)} of {load.ok + len(load.failures)} "
                                       "requests failed during the deploys")

        self.step("a certificate holdfast cannot load: the deploy step fails, the previous file stays")
        before = open(m.app_file(app)).read()
        bad_crt = os.path.join(self.root, "bad.crt")
        m.write(bad_crt, "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
        tls_dir = os.path.join(d.app_root(app), "tls")
        os.makedirs(tls_dir)
        shutil.copy(bad_crt, os.path.join(tls_dir, "server.crt"))
        shutil.copy(bad_crt, os.path.join(tls_dir, "server.key"))
        bad = m.trigger("post-certs-update", app, check=False)
        self.expect(bad.returncode != 0, "post-certs-update with a broken certificate fails")
        self.expect(open(m.app_file(app)).read() == before, "the app file is unchanged after the failure")
        resp, _ = request(DOMAIN)
        self.expect(resp.status == 200, f"the app still serves after the rejected config: {resp.status}")
        shutil.rmtree(tls_dir)

        self.step("certs:add (self-signed), then HTTPS with SNI on the https port")
        crt, key = self.make_cert()
        d.certs_add(app, crt, key)
        tls = ssl.create_default_context(cafile=crt)
        resp, body = request(DOMAIN, port=HTTPS_PORT, tls=tls)
        self.expect(resp.status == 200, f"HTTPS answers 200: {resp.status} {body[:100]!r}")
        hsts = resp.getheader("strict-transport-security") or ""
        self.expect("max-age=15724800" in hsts and "includeSubDomains" in hsts,
                    f"HSTS with Dokku's defaults: {hsts!r}")
        resp, _ = request(DOMAIN, path="/x")
        location = resp.getheader("location") or ""
        self.expect(resp.status in (301, 308) and location.startswith(f"https://{DOMAIN}:{HTTPS_PORT}/x"),
                    f"plain HTTP redirects to the https port: {resp.status} {location!r}")

        self.step("holdfast:set client-max-body-size 1k, then a 4 KiB upload gets 413")
        m.dokku("holdfast:set", app, "client-max-body-size", "1k")
        m.trigger("proxy-build-config", app, quiet=True)
        resp, _ = request(DOMAIN, method="POST", body=b"x" * 4096, port=HTTPS_PORT, tls=tls)
        self.expect(resp.status == 413, f"the body limit applies: {resp.status}")
        m.dokku("holdfast:set", app, "client-max-body-size")
        m.trigger("proxy-build-config", app, quiet=True)
        report = m.dokku("holdfast:report", app, quiet=True)
        self.expect("Holdfast computed bind address ipv4:" in report.stdout, "holdfast:report prints the app's section")
        shown = m.dokku("holdfast:show-config", app, quiet=True)
        self.expect(DOMAIN in shown.stdout, "holdfast:show-config prints the app file")

        self.step("apps:rename drill-app drill-renamed")
        renamed = "drill-renamed"
        d.apps_rename(app, renamed)
        self.expect(not os.path.exists(m.app_file(app)), "the old name's file is gone")
        self.expect(os.path.exists(m.app_file(renamed)), "the new name has its file")
        resp, body = request(DOMAIN, port=HTTPS_PORT, tls=tls)
        self.expect(resp.status == 200 and renamed in body.decode(),
                    f"the domain reaches the renamed app: {resp.status} {body[:100]!r}")

        self.step("apps:destroy drill-renamed, then drill-other (the last app: no route left)")
        d.apps_destroy(renamed)
        self.expect(not os.path.exists(m.app_file(renamed)), "the destroyed app's file is gone")
        resp, _ = request(DOMAIN)
        self.expect(resp.status == 404, f"the destroyed app's domain gets 404: {resp.status}")
        resp, body = request(OTHER_DOMAIN)
        self.expect(resp.status == 200 and other in body.decode(), f"{other} still serves: {resp.status}")
        d.apps_destroy(other)
        self.expect(not os.listdir(os.path.join(m.data, "apps")), "no app file is left")
        resp, _ = request(OTHER_DOMAIN)
        self.expect(resp.status == 404, f"with no app left holdfast answers 404: {resp.status}")
        self.numbers["deploys_phase_seconds"] = round(time.time() - started, 1)

    def phase_proxy(self):
        """proxy:disable and proxy:enable, and the holdfast:* commands that read state."""
        m, d = self.m, self.d
        app = "drill-toggle"
        started = time.time()
        self.step(f"apps:create {app}, deploy, then proxy:disable: its domain gets 404")
        d.new_app(app, TOGGLE_DOMAIN, f"http:{HTTP_PORT}:5000")
        d.deploy(app, 1)
        resp, body = request(TOGGLE_DOMAIN)
        self.expect(resp.status == 200 and app in body.decode(), f"{app} serves: {resp.status} {body[:100]!r}")
        restarted = d.proxy_disable(app)
        self.expect(restarted == [app], f"proxy-disable restarts {app} (app-restart): {restarted}")
        self.expect(not os.path.exists(m.app_file(app)), "proxy:disable removes the app file")
        resp, _ = request(TOGGLE_DOMAIN)
        self.expect(resp.status == 404, f"with the proxy disabled holdfast answers 404: {resp.status}")
        m.trigger("proxy-build-config", app, quiet=True)
        resp, _ = request(TOGGLE_DOMAIN)
        self.expect(resp.status == 404, f"proxy-build-config leaves a disabled app out: {resp.status}")

        self.step("proxy:enable: the restart it asks for routes the app again")
        restarted = d.proxy_enable(app)
        self.expect(restarted == [app], f"proxy-enable restarts {app} (app-restart): {restarted}")
        resp, body = request(TOGGLE_DOMAIN)
        self.expect(resp.status == 200 and app in body.decode(),
                    f"after proxy:enable {app} serves again: {resp.status} {body[:100]!r}")

        self.step("holdfast:report, holdfast:show-config, holdfast:logs")
        report = m.dokku("holdfast:report", app, quiet=True)
        self.expect(report.returncode == 0 and f"{app} holdfast information" in report.stdout
                    and re.search(r"Holdfast proxy type:\s+holdfast\n", report.stdout) is not None
                    and re.search(r"Holdfast running:\s+true\n", report.stdout) is not None,
                    f"holdfast:report {app} names the proxy type and that holdfast runs:\n{report.stdout}")
        flag = m.dokku("holdfast:report", app, "--holdfast-app-config", quiet=True)
        self.expect(flag.stdout.strip() == m.app_file(app), f"holdfast:report --holdfast-app-config: {flag.stdout!r}")
        shown = m.dokku("holdfast:show-config", app, quiet=True)
        self.expect(shown.returncode == 0 and "[[route]]" in shown.stdout
                    and f'host = "{TOGGLE_DOMAIN}"' in shown.stdout
                    and f"[upstream.{app}-5000]" in shown.stdout,
                    f"holdfast:show-config prints the app's TOML with its route:\n{shown.stdout}")
        logs = m.dokku("holdfast:logs", quiet=True)
        lines = logs.stdout.splitlines()
        self.expect(logs.returncode == 0 and lines and any("reload" in line.lower() for line in lines),
                    f"holdfast:logs prints holdfast's log lines (with its reloads): {lines[-5:]}")
        access = m.dokku("holdfast:logs", app, quiet=True)
        self.expect(access.returncode == 0 and TOGGLE_DOMAIN in access.stdout,
                    f"holdfast:logs {app} prints the access log: {access.stdout[-300:]!r}")
        self.numbers["proxy"] = dict(report_lines=len(report.stdout.splitlines()),
                                     config_lines=len(shown.stdout.splitlines()), log_lines=len(lines))
        d.apps_destroy(app)
        self.numbers["proxy_phase_seconds"] = round(time.time() - started, 1)

    def phase_grpc(self):
        """A gRPC app (grpc:HOSTPORT:50051) deployed through the triggers, called through
        holdfast's h2c listener."""
        m, d = self.m, self.d
        app = "drill-grpc"
        started = time.time()
        self.step(f"apps:create {app}, ports:set grpc:{GRPC_PORT}:50051, deploy a grpcio instance")
        d.new_app(app, GRPC_DOMAIN, f"grpc:{GRPC_PORT}:50051")
        inst, = d.deploy(app, 1, sched=self.grpc_sched)
        main = open(m.main).read()
        self.expect(f'address = "127.0.0.1:{GRPC_PORT}"\nh2c = true' in main,
                    f"the main file has an h2c listener on {GRPC_PORT}")
        self.expect('protocol = "h2c"' in open(m.app_file(app)).read(), "the app's upstream speaks h2c")

        self.step(f"{GRPC_CALLS} gRPC calls through holdfast (:authority {GRPC_DOMAIN})")
        p = subprocess.run([sys.executable, os.path.join(HERE, "grpc_app.py"), "client",
                            f"127.0.0.1:{GRPC_PORT}", GRPC_DOMAIN, str(GRPC_CALLS)],
                           capture_output=True, text=True, timeout=60)
        try:
            result = json.loads(p.stdout)
        except ValueError:
            raise Failure(f"the gRPC client exited {p.returncode}: {p.stderr.strip()[-500:]}")
        answers, errors = result["answers"], result["errors"]
        self.expect(not errors, f"gRPC calls failed: {errors[:5]}")
        expected = sorted(f"{inst.id} call {i}" for i in range(GRPC_CALLS))
        self.expect(sorted(answers) == expected,
                    f"every gRPC call answered by {inst.id}: {sorted(answers)[:3]}... ({len(answers)})")
        calls = [e for e in inst.events() if e["ev"] == "call"]
        peers = {e["peer"] for e in calls}
        self.expect(len(calls) == GRPC_CALLS, f"the instance saw {len(calls)} calls, not {GRPC_CALLS}")
        self.expect(1 <= len(peers) <= 2, f"{GRPC_CALLS} calls came on {len(peers)} HTTP/2 connections "
                                          f"to the instance (holdfast multiplexes: 1-2)")
        self.numbers["grpc"] = dict(calls=len(answers), errors=len(errors), connections=len(peers))
        d.apps_destroy(app)
        self.numbers["grpc_phase_seconds"] = round(time.time() - started, 1)

    def phase_acme(self):
        """letsencrypt-* set through holdfast:set, pebble issuing for the app's domains,
        and a domain added later getting its certificate on a reload."""
        m, d = self.m, self.d
        app = "drill-acme"
        started = time.time()
        self.step("pebble on loopback (-strict), validating on the app's ports")
        if not shutil.which("pebble"):
            raise Failure("pebble is not installed (apt-get install pebble): the ACME phase cannot run")
        self.pebble = Pebble(self.root, HTTP_PORT, HTTPS_PORT)
        pebble = self.pebble

        self.step(f"apps:create {app}, deploy; holdfast:set --global letsencrypt-*; "
                  "proxy:build-config --all; holdfast:stop, holdfast:start")
        d.new_app(app, ACME_DOMAIN, f"http:{HTTP_PORT}:5000", f"https:{HTTPS_PORT}:5000")
        d.deploy(app, 1)
        m.dokku("holdfast:set", "--global", "letsencrypt-email", "ops@example.test")
        m.dokku("holdfast:set", "--global", "letsencrypt-server", pebble.directory)
        m.dokku("holdfast:set", "--global", "letsencrypt-ca", pebble.ca_file)
        d.proxy_build_config_all()
        main = open(m.main).read()
        self.expect("[acme]" in main and f'directory = "{pebble.directory}"' in main
                    and f'ca = "{pebble.ca_file}"' in main, f"the main file has the [acme] section:\n{main}")
        m.dokku("holdfast:stop")
        m.dokku("holdfast:start")
        pid = open(os.path.join(m.data, "holdfast.pid")).read().strip()
        root = pebble.issuing_root()
        root_file = os.path.join(pebble.dir, "issuing-root.pem")
        m.write(root_file, root)
        trust = ssl.create_default_context(cafile=root_file)

        self.step(f"{ACME_DOMAIN}: a certificate from pebble, HTTPS 200, plain HTTP 308")
        waited = self.wait_certificate(ACME_DOMAIN, trust, pebble)
        resp, body = request(ACME_DOMAIN, port=HTTPS_PORT, tls=trust)
        self.expect(resp.status == 200 and app in body.decode(),
                    f"HTTPS with pebble's certificate reaches {app}: {resp.status} {body[:100]!r}")
        resp, _ = request(ACME_DOMAIN, path="/x")
        location = resp.getheader("location") or ""
        self.expect(resp.status == 308 and location.startswith(f"https://{ACME_DOMAIN}:{HTTPS_PORT}/x"),
                    f"plain HTTP gets 308 to https: {resp.status} {location!r}")

        self.step(f"domains:add {app} {ACME_DOMAIN_2}: its certificate comes on the reload, no restart")
        d.domains_add(app, ACME_DOMAIN_2)
        waited_2 = self.wait_certificate(ACME_DOMAIN_2, trust, pebble)
        resp, body = request(ACME_DOMAIN_2, port=HTTPS_PORT, tls=trust)
        self.expect(resp.status == 200 and app in body.decode(),
                    f"HTTPS for {ACME_DOMAIN_2} reaches {app}: {resp.status} {body[:100]!r}")
        now_pid = open(os.path.join(m.data, "holdfast.pid")).read().strip()
        self.expect(now_pid == pid and os.path.exists(f"/proc/{pid}"),
                    f"holdfast was not restarted for the new domain (pid {pid}, now {now_pid})")
        orders = pebble.log().count("Added order")
        self.expect(orders >= 2, f"pebble logged {orders} orders, expected one per domain")
        self.numbers["acme"] = dict(first_seconds=round(waited, 1), second_seconds=round(waited_2, 1),
                                    orders=orders)
        d.apps_destroy(app)
        self.numbers["acme_phase_seconds"] = round(time.time() - started, 1)

    def wait_certificate(self, name, trust, pebble, limit=30):
        """Seconds until holdfast serves NAME (SNI, on the https port) a chain that
        verifies against pebble's issuing root; a Failure with pebble's log after LIMIT."""
        started = time.time()
        last = None
        while time.time() - started < limit:
            try:
                with socket.create_connection(("127.0.0.1", HTTPS_PORT), timeout=5) as raw:
                    with trust.wrap_socket(raw, server_hostname=name) as tls:
                        issuer = dict(x[0] for x in tls.getpeercert()["issuer"])
                        log(f"  {name}: certificate issued by {issuer.get('commonName')!r} "
                            f"after {time.time() - started:.1f} s")
                        return time.time() - started
            except (OSError, ssl.SSLError) as e:
                last = e
                time.sleep(0.2)
        raise Failure(f"no certificate for {name} that chains to pebble's root within {limit} s "
                      f"(last: {last}); pebble's log ends:\n{pebble.log()[-2000:]}")

    def make_cert(self):
        crt = os.path.join(self.root, "server.crt")
        key = os.path.join(self.root, "server.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                        "-out", crt, "-days", "2", "-subj", f"/CN={DOMAIN}",
                        "-addext", f"subjectAltName=DNS:{DOMAIN}"],
                       check=True, capture_output=True)
        return crt, key

    def check_instances(self):
        """From each instance's own log: no request before the reload that included it,
        none after its SIGTERM, and upstream connections far fewer than requests."""
        per_instance = []
        bound = 2 * (KEEPALIVE_CLIENTS + CLOSING_CLIENTS)
        for inst in self.d.all.values():
            events = inst.events()
            reqs = [e["t"] for e in events if e["ev"] == "req"]
            conns = [e for e in events if e["ev"] == "conn"]
            # One connection is the check's, one the WebSocket's where it landed.
            upstream_conns = len(conns) - 1 - (1 if inst.id == self.numbers.get("ws_instance") else 0)
            per_instance.append((inst.id, len(reqs), upstream_conns))
            if reqs and inst.visible_ms is not None:
                early = [t for t in reqs if t < int(inst.visible_ms)]
                self.expect(not early, f"{inst.id}: {len(early)} requests before the reload that included it")
            if inst.sigterm_ms is not None:
                late = [t for t in reqs if t > int(inst.sigterm_ms)]
                self.expect(not late, f"{inst.id}: {len(late)} requests after its SIGTERM "
                                      f"(first {min(late) - inst.sigterm_ms:.0f} ms after)" if late else "")
            if len(reqs) >= 50:
                self.expect(upstream_conns <= bound,
                            f"{inst.id}: {upstream_conns} upstream connections for {len(reqs)} requests "
                            f"(bound {bound}: twice the clients)")
        self.numbers["instances"] = per_instance

    def summary(self):
        n = self.numbers
        print("\n== holdfast-vhosts drill summary ==")
        print(f"scheduler: {self.sched.name}; temp dir: {self.root}")
        if "requests" in n:
            print(f"requests during deploys: {n['requests']}, failed: {n['failed']} "
                  f"({n['deploy_seconds']} s, {self.d.deploys} deploys in all)")
            print(f"WebSocket: {n['ws_echoes']} echoes, held by {n['ws_instance']} throughout")
        for ident, reqs, conns in n.get("instances", []):
            if reqs:
                print(f"  {ident:28} {reqs:6} requests {conns:4} upstream connections")
        if "proxy" in n:
            p = n["proxy"]
            print(f"proxy:disable -> 404, proxy:enable -> 200; holdfast:report {p['report_lines']} lines, "
                  f"show-config {p['config_lines']} lines, logs {p['log_lines']} lines "
                  f"({n['proxy_phase_seconds']} s)")
        if "grpc" in n:
            g = n["grpc"]
            print(f"gRPC through the h2c listener: {g['calls']} calls, {g['errors']} failed, "
                  f"{g['connections']} HTTP/2 connection(s) to the instance ({n['grpc_phase_seconds']} s)")
        if "acme" in n:
            a = n["acme"]
            print(f"ACME (pebble): {ACME_DOMAIN} served its certificate {a['first_seconds']} s after the "
                  f"restart, {ACME_DOMAIN_2} {a['second_seconds']} s after its reload (no restart); "
                  f"{a['orders']} orders ({n['acme_phase_seconds']} s)")
        if "duration_seconds" in n:
            print(f"duration: {n['duration_seconds']} s, {n['plugin_calls']} plugin calls")
        if self.problems:
            print(f"FAILED: {len(self.problems)} problem(s):")
            for p in self.problems:
                print(f"  - {p}")
        else:
            print("PASSED")

    def cleanup(self):
        try:
            self.m.stop_holdfast()
        finally:
            self.sched.cleanup()
            self.grpc_sched.cleanup()
            if self.pebble:
                self.pebble.stop()
        if not self.problems and not self.args.keep:
            shutil.rmtree(self.root, ignore_errors=True)


def main():
    parser = drill_arguments(__doc__, PHASES)
    parser.add_argument("--scheduler", choices=["process", "docker"], default="process")
    args = parser.parse_args()
    return run_drill(Drill(args))


if __name__ == "__main__":
    sys.exit(main())
