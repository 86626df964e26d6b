"""Makes the certificates of the HTTPS scenarios at run time, with the `openssl` command.

A CA of the session's own and one server certificate it signed, for IP 127.0.0.1 and the
name `localhost`, used by every TLS listener of a run: the proxies' (HTTPS clients) and
the origin's (bench-origin in TLS mode). ECDSA P-256 keys throughout: the key type
decides what a full handshake costs, and every contender gets the same one. The files go
into the session directory, which the harness deletes at the end; nothing here is ever
written into the work tree. Valid for two days, so a clock that moves during a run does
not matter.
"""

import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = 2
CURVE = "prime256v1"  # ECDSA P-256
SERVER_NAME = "localhost"
SERVER_IP = "127.0.0.1"

# What the server certificate is for: a TLS server at 127.0.0.1 or localhost, not a CA.
SERVER_EXTENSIONS = (
    f"subjectAltName=IP:{SERVER_IP},DNS:{SERVER_NAME}\n"
    "basicConstraints=critical,CA:FALSE\n"
    "keyUsage=critical,digitalSignature\n"
    "extendedKeyUsage=serverAuth\n"
)


@dataclass(frozen=True)
class Certs:
    """Paths of the session's certificate files (PEM)."""

    ca: Path  # the CA certificate: what clients and proxies trust
    cert: Path  # the server certificate
    key: Path  # its private key
    combined: Path  # certificate and key in one file, as HAProxy's `crt` takes them

    def describe(self):
        return {"key_type": f"ECDSA {CURVE}", "server_names": [SERVER_IP, SERVER_NAME],
                "ca": str(self.ca), "cert": str(self.cert), "key": str(self.key)}


class CertError(RuntimeError):
    """openssl failed; the message has its output."""


def _openssl(args, cwd):
    out = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                         timeout=60, check=False)
    if out.returncode != 0:
        raise CertError(f"openssl {' '.join(args[:2])} failed: {out.stderr.strip()[-1000:]}")


def make(directory):
    """Makes the CA and the server certificate in `directory`; returns their Certs."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o755)  # nginx reads the files as root before dropping privileges; HAProxy as root
    ec = ["-newkey", "ec", "-pkeyopt", f"ec_paramgen_curve:{CURVE}", "-nodes"]
    _openssl(["req", "-x509", *ec, "-days", str(DAYS), "-subj", "/CN=holdfast bench CA",
              "-addext", "basicConstraints=critical,CA:TRUE",
              "-addext", "keyUsage=critical,keyCertSign,cRLSign",
              "-keyout", "ca.key", "-out", "ca.pem"], d)
    _openssl(["req", "-new", *ec, "-subj", f"/CN={SERVER_NAME}",
              "-keyout", "server.key", "-out", "server.csr"], d)
    (d / "server.ext").write_text(SERVER_EXTENSIONS)
    _openssl(["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
              "-CAcreateserial", "-days", str(DAYS), "-extfile", "server.ext",
              "-out", "server.pem"], d)
    _openssl(["verify", "-CAfile", "ca.pem", "server.pem"], d)
    combined = d / "server-combined.pem"
    combined.write_text((d / "server.pem").read_text() + (d / "server.key").read_text())
    combined.chmod(0o600)
    return Certs(ca=d / "ca.pem", cert=d / "server.pem", key=d / "server.key",
                 combined=combined)
