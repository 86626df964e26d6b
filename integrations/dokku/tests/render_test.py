#!/usr/bin/env python3
"""What the plugin writes, checked without holdfast: the triggers run against the Dokku
stand-ins with a `holdfast` whose `check` accepts everything and that is never running,
and the files they write are compared with what each Dokku setting must give.

    python3 integrations/dokku/tests/render_test.py

The drill (run-drill) proves the same files against a real holdfast; this finds a
mistake in the scripts in a second. Python 3 standard library only.
"""

import os
import shutil
import sys
import tempfile
import tomllib
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import drill  # noqa: E402

FAKE_HOLDFAST = """#!/usr/bin/env bash
# Accepts every config; is never running (no admin listener).
[[ "$1" == check ]] && exit 0
echo "fake holdfast: $*" >&2
exit 1
"""


class Rendering(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="holdfast-dokku-render.")
        fake = os.path.join(self.root, "fake-holdfast")
        with open(fake, "w") as f:
            f.write(FAKE_HOLDFAST)
        os.chmod(fake, 0o755)
        self.m = drill.Machine(os.path.join(self.root, "m"), fake)
        self.m.install_plugin()
        self.m.prop_write("proxy", "--global", "type", "holdfast")
        self.m.dokku("holdfast:set", "--global", "admin-address", f"127.0.0.1:{drill.free_port()}", quiet=True)

    def tearDown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def app(self, name, maps=None, domains=(), listeners=("127.0.0.1:5000",)):
        root = os.path.join(self.m.dokku_root, name)
        os.makedirs(root)
        if maps:
            self.m.prop_write("ports", name, "map", "\n".join(maps) + "\n")
        if domains:
            self.m.write(os.path.join(root, "VHOST"), "\n".join(domains) + "\n")
        for i, listener in enumerate(listeners, 1):
            ip, port = listener.rsplit(":", 1)
            self.m.write(os.path.join(root, f"IP.web.{i}"), ip + "\n")
            self.m.write(os.path.join(root, f"PORT.web.{i}"), port + "\n")

    def build(self, name):
        self.m.trigger("proxy-build-config", name, quiet=True)
        with open(self.m.app_file(name), "rb") as f:
            app = tomllib.load(f)
        with open(self.m.main, "rb") as f:
            main = tomllib.load(f)
        return app, main

    def test_domains_and_bind_addresses(self):
        self.m.dokku("holdfast:set", "--global", "bind-address-ipv4", "127.0.0.1", quiet=True)
        self.m.dokku("holdfast:set", "--global", "bind-address-ipv6", "::1", quiet=True)
        self.app("a", ["http:8080:5000"], ["a.test", "www.a.test"], ["127.0.0.1:41000", "127.0.0.1:41001"])
        app, main = self.build("a")
        self.assertEqual(app["upstream"]["a-5000"]["servers"], ["127.0.0.1:41000", "127.0.0.1:41001"])
        self.assertEqual([r["host"] for r in app["route"]], ["a.test", "www.a.test"])
        for r in app["route"]:
            self.assertEqual(r["listeners"], ["127.0.0.1:8080", "[::1]:8080"])
            self.assertNotIn("redirect_https", r)
        self.assertEqual(main["include"], ["apps/*.toml"])
        self.assertEqual(sorted(x["address"] for x in main["listener"]),
                         ["127.0.0.1:80", "127.0.0.1:8080", "[::1]:80", "[::1]:8080"])

    def test_no_domain_routes_only_its_own_ports(self):
        self.app("b", ["http:9000:5000"])
        app, _ = self.build("b")
        (route,) = app["route"]
        self.assertNotIn("host", route)
        self.assertEqual(route["listeners"], ["0.0.0.0:9000", "[::]:9000"])

    def test_https_without_certificate_is_left_out(self):
        self.app("c", ["http:80:5000", "https:443:5000"], ["c.test"])
        app, main = self.build("c")
        self.assertEqual([r["listeners"] for r in app["route"]], [["0.0.0.0:80", "[::]:80"]])
        self.assertFalse(any("tls" in x for x in main["listener"]))

    def test_certificate_hsts_and_redirect(self):
        self.app("d", ["http:80:5000", "https:8443:5000"], ["d.test"])
        tls = os.path.join(self.m.dokku_root, "d", "tls")
        self.m.write(os.path.join(tls, "server.crt"), "crt")
        self.m.write(os.path.join(tls, "server.key"), "key")
        self.m.dokku("holdfast:set", "d", "hsts-preload", "true", quiet=True)
        app, main = self.build("d")
        self.assertEqual(app["certificate"], [{"cert": f"{tls}/server.crt", "key": f"{tls}/server.key"}])
        http, https = app["route"]
        self.assertEqual(http["redirect_https"], 8443)
        self.assertEqual(https["hsts"], "15724800s")
        self.assertIs(https["hsts_include_subdomains"], True)
        self.assertIs(https["hsts_preload"], True)
        tls_listeners = [x for x in main["listener"] if "tls" in x]
        self.assertEqual(sorted(x["address"] for x in tls_listeners), ["0.0.0.0:8443", "[::]:8443"])
        self.assertEqual(tls_listeners[0]["tls"], {})

    def test_grpc_is_h2c(self):
        self.app("e", ["http:80:5000", "grpc:50051:50051"], [], ["127.0.0.1:5000"])
        app, main = self.build("e")
        self.assertEqual(app["upstream"]["e-50051-grpc"]["protocol"], "h2c")
        # Two container ports: each upstream takes the container's address with its own port.
        self.assertEqual(app["upstream"]["e-50051-grpc"]["servers"], ["127.0.0.1:50051"])
        self.assertEqual(app["upstream"]["e-5000"]["servers"], ["127.0.0.1:5000"])
        grpc = [x for x in main["listener"] if x["address"] == "0.0.0.0:50051"]
        self.assertIs(grpc[0]["h2c"], True)

    def test_properties_map_to_route_keys(self):
        self.app("f", ["http:80:5000"], ["f.test"])
        self.m.dokku("holdfast:set", "--global", "client-max-body-size", "1m", quiet=True)
        self.m.dokku("holdfast:set", "f", "client-max-body-size", "512k", quiet=True)
        self.m.dokku("holdfast:set", "f", "proxy-read-timeout", "120", quiet=True)
        self.m.dokku("holdfast:set", "f", "proxy-connect-timeout", "5s", quiet=True)
        self.m.dokku("holdfast:set", "f", "access-log-path", "/var/log/holdfast/f.log", quiet=True)
        app, _ = self.build("f")
        (route,) = app["route"]
        self.assertEqual(route["client_max_body"], "512KB")
        self.assertEqual(route["read_timeout"], "120s")
        self.assertEqual(route["connect_timeout"], "5s")
        self.assertEqual(route["access_log"], "/var/log/holdfast/f.log")
        bad = self.m.dokku("holdfast:set", "f", "client-max-body-size", "lots", check=False, quiet=True)
        self.assertNotEqual(bad.returncode, 0)
        glob = self.m.dokku("holdfast:set", "f", "trusted-proxies", "10.0.0.0/8", check=False, quiet=True)
        self.assertIn("only be set globally", glob.stderr)

    def test_acme(self):
        self.m.dokku("holdfast:set", "--global", "letsencrypt-email", "ops@example.test", quiet=True)
        self.m.dokku("holdfast:set", "--global", "letsencrypt-server", "https://127.0.0.1:14000/dir", quiet=True)
        self.m.dokku("holdfast:set", "--global", "trusted-proxies", "10.0.0.0/8,fd00::/8", quiet=True)
        self.app("g", None, ["g.test"])
        force = self.m.trigger("certs-force", "g", quiet=True)
        self.assertEqual(force.stdout.strip(), "true")
        app, main = self.build("g")
        self.assertEqual(main["acme"]["contact"], "mailto:ops@example.test")
        self.assertEqual(main["acme"]["directory"], "https://127.0.0.1:14000/dir")
        self.assertEqual(main["trusted_proxies"], ["10.0.0.0/8", "fd00::/8"])
        https = [x for x in main["listener"] if x["address"] == "0.0.0.0:443"]
        self.assertEqual(https[0]["tls"], {"acme": True})
        http = [r for r in app["route"] if r["listeners"] == ["0.0.0.0:80", "[::]:80"]]
        self.assertIs(http[0]["redirect_https"], True)
        # The last app with a TLS listener goes: [acme] stays, waiting for the next
        # app's names (holdfast takes an [acme] with no name yet and no TLS listener).
        self.m.trigger("post-delete", "g", "tag", quiet=True)
        with open(self.m.main, "rb") as f:
            self.assertIn("acme", tomllib.load(f))

    def test_other_proxy_types_are_left_alone(self):
        self.app("h", ["http:80:5000"])
        self.m.prop_write("proxy", "h", "type", "nginx")
        self.m.trigger("proxy-build-config", "h", quiet=True)
        self.assertFalse(os.path.exists(self.m.app_file("h")))
        self.assertEqual(self.m.trigger("certs-force", "h", quiet=True).stdout, "")

    def test_delete_and_clear(self):
        self.app("i", ["http:80:5000"])
        self.build("i")
        self.m.trigger("proxy-clear-config", "--all", quiet=True)
        self.assertFalse(os.path.exists(self.m.app_file("i")))
        self.build("i")
        self.m.trigger("post-delete", "i", "tag", quiet=True)
        self.assertFalse(os.path.exists(self.m.app_file("i")))


if __name__ == "__main__":
    unittest.main()
