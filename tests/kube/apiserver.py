"""A real Kubernetes control plane for tests: etcd plus kube-apiserver on 127.0.0.1.

The binaries come from `bash scripts/kube.sh` (.cache/kube/bin; KILO_KUBE_BIN overrides).
`ApiServer` starts both with TLS, token authentication (an admin in system:masters and an
unprivileged user) and RBAC, in a private temporary directory, and stops exactly the two
processes it started. With KILO_TEST_KUBECONFIG set it starts nothing and describes that cluster.
"""

import base64
import datetime
import ipaddress
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("KILO_KUBE_BIN") or os.path.join(ROOT, ".cache", "kube", "bin")
BINARIES = ("etcd", "kube-apiserver", "kubectl")
USER_NAME = "kilo-test-user"


def binaries_missing(bin_dir=BIN):
    """The names of the binaries that are not executable in bin_dir."""
    return [b for b in BINARIES if not os.access(os.path.join(bin_dir, b), os.X_OK)]


def free_port(address="127.0.0.1"):
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _write_pem(path, data, private=False):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key_pem(key):
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_pki(directory, address="127.0.0.1"):
    """A CA, a server certificate for 127.0.0.1/localhost (and ``address``) and a service-account key pair."""
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=2)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kilo-mesh test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    ips = sorted(set(["127.0.0.1", address]))
    san = x509.SubjectAlternativeName(
        [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        + [
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes"),
            x509.DNSName("kubernetes.default.svc"),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(san, critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    sa_key = ec.generate_private_key(ec.SECP256R1())
    paths = {
        name: os.path.join(directory, name)
        for name in ("ca.crt", "ca.key", "server.crt", "server.key", "sa.key", "sa.pub")
    }
    _write_pem(paths["ca.crt"], ca.public_bytes(serialization.Encoding.PEM))
    _write_pem(paths["ca.key"], _key_pem(ca_key), private=True)  # client certificates of the tests
    _write_pem(paths["server.crt"], cert.public_bytes(serialization.Encoding.PEM))
    _write_pem(paths["server.key"], _key_pem(key), private=True)
    _write_pem(paths["sa.key"], _key_pem(sa_key), private=True)
    _write_pem(
        paths["sa.pub"],
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    return paths


def _terminate(proc, timeout=15):
    """Stop a process this module started: SIGTERM, then SIGKILL after ``timeout`` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


class ApiServer:
    """etcd + kube-apiserver for one test session (or the cluster of $KILO_TEST_KUBECONFIG).

    Attributes: kubeconfig (path, admin), host (https://127.0.0.1:PORT), ca_cert (path),
    token (admin bearer token), user_token (an unprivileged user's, None for an external cluster),
    user_name, external (True when $KILO_TEST_KUBECONFIG names the cluster).
    """

    def __init__(self, bin_dir=BIN, timeout=90.0, detached=False, bind_address="127.0.0.1"):
        self.bin_dir = bin_dir
        # 127.0.0.1, or a lab's management bridge address so that agents in lab hosts reach it
        self.bind_address = bind_address
        self._apiserver_argv = None
        self.detached = (
            detached  # in a session of their own: they outlive the process that started them
        )
        self.timeout = timeout
        self.kubeconfig = self.host = self.ca_cert = self.ca_key = self.token = self.user_token = (
            None
        )
        self.user_name = USER_NAME
        self.external = bool(os.environ.get("KILO_TEST_KUBECONFIG"))
        self.tmp = None
        self._procs = []  # (name, Popen, log path), in start order

    @property
    def procs(self):
        """(name, Popen, log path) of the processes started, in start order."""
        return list(self._procs)

    # -- life cycle -------------------------------------------------------------------------
    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        if self.external:
            self._from_kubeconfig(os.environ["KILO_TEST_KUBECONFIG"].split(os.pathsep)[0])
            return self
        missing = binaries_missing(self.bin_dir)
        if missing:
            raise FileNotFoundError(
                f"{', '.join(missing)} missing in {self.bin_dir}: run `bash scripts/kube.sh`"
            )
        self.tmp = tempfile.mkdtemp(prefix="kilo-kube-")
        try:
            self._start_etcd()
            self._start_apiserver()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        """Stop the processes this object started (by PID, newest first) and drop the tempdir."""
        while self._procs:
            _name, proc, _log = self._procs.pop()
            _terminate(proc)
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    # -- processes --------------------------------------------------------------------------
    def _spawn(self, name, argv):
        log = os.path.join(self.tmp, f"{name}.log")
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.tmp,
                start_new_session=self.detached,
            )
        self._procs.append((name, proc, log))
        return proc

    def _wait(self, name, proc, ready, what):
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self._log_tail(name)}")
            if ready():
                return
            time.sleep(0.2)
        raise TimeoutError(f"{name}: no {what} after {self.timeout:.0f} s:\n{self._log_tail(name)}")

    def _log_tail(self, name, lines=30):
        for n, _proc, log in self._procs:
            if n == name:
                with open(log, "rb") as f:
                    return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
        return ""

    def _start_etcd(self):
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        proc = self._spawn(
            "etcd",
            [
                os.path.join(self.bin_dir, "etcd"),
                "--name",
                "kilo-test",
                "--data-dir",
                os.path.join(self.tmp, "etcd"),
                "--listen-client-urls",
                self.etcd_url,
                "--advertise-client-urls",
                self.etcd_url,
                "--listen-peer-urls",
                peer_url,
                "--initial-advertise-peer-urls",
                peer_url,
                "--initial-cluster",
                f"kilo-test={peer_url}",
                "--initial-cluster-state",
                "new",
                "--unsafe-no-fsync",
                "--logger",
                "zap",
                "--log-level",
                "warn",
            ],
        )

        def healthy():
            try:
                with urllib.request.urlopen(self.etcd_url + "/health", timeout=2) as r:
                    return json.load(r).get("health") == "true"
            except (OSError, ValueError):
                return False

        self._wait("etcd", proc, healthy, "/health")

    def _start_apiserver(self):
        pki = make_pki(self.tmp, self.bind_address)
        self.ca_cert = pki["ca.crt"]
        self.ca_key = pki["ca.key"]
        self.token = secrets.token_urlsafe(24)
        self.user_token = secrets.token_urlsafe(24)
        tokens = os.path.join(self.tmp, "tokens.csv")
        fd = os.open(tokens, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f'{self.token},kilo-test-admin,uid-admin,"system:masters"\n')
            f.write(f"{self.user_token},{self.user_name},uid-user\n")
        port = free_port(self.bind_address)
        self.host = f"https://{self.bind_address}:{port}"
        self._apiserver_argv = [
            os.path.join(self.bin_dir, "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={self.bind_address}",
            f"--advertise-address={self.bind_address}",
            f"--secure-port={port}",
            "--insecure-port=0",
            f"--cert-dir={self.tmp}",
            f"--tls-cert-file={pki['server.crt']}",
            f"--tls-private-key-file={pki['server.key']}",
            f"--client-ca-file={pki['ca.crt']}",
            f"--token-auth-file={tokens}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={pki['sa.pub']}",
            f"--service-account-signing-key-file={pki['sa.key']}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.96.0.0/16",
            # v1.20 keeps a Node's spec.podCIDRs to its first range unless dual-stack is on
            # (alpha there); the dual-stack tests need Nodes with a range of each family
            "--feature-gates=IPv6DualStack=true",
            "--profiling=false",
            "--v=0",
        ]
        self._run_apiserver()
        self.kubeconfig = os.path.join(self.tmp, "kubeconfig")
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "kilo-test",
            "clusters": [
                {
                    "name": "kilo-test",
                    "cluster": {"server": self.host, "certificate-authority": self.ca_cert},
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [
                {"name": "kilo-test", "context": {"cluster": "kilo-test", "user": "admin"}}
            ],
        }
        fd = os.open(self.kubeconfig, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(config, f)

    def _run_apiserver(self):
        proc = self._spawn("kube-apiserver", self._apiserver_argv)
        context = ssl.create_default_context(cafile=self.ca_cert)

        def ready():
            req = urllib.request.Request(
                self.host + "/readyz", headers={"Authorization": f"Bearer {self.token}"}
            )
            try:
                with urllib.request.urlopen(req, timeout=5, context=context) as r:
                    return r.status == 200
            except (OSError, urllib.error.HTTPError):
                return False

        self._wait("kube-apiserver", proc, ready, "/readyz")

    def stop_apiserver(self):
        """Stop kube-apiserver alone (etcd keeps the cluster's state): the API server is away."""
        for i, (name, proc, _log) in enumerate(self._procs):
            if name == "kube-apiserver":
                _terminate(proc)
                del self._procs[i]
                return

    def start_apiserver(self):
        """Start kube-apiserver again, same address, port, certificates and tokens."""
        self._run_apiserver()

    # -- an existing cluster -----------------------------------------------------------------
    def _from_kubeconfig(self, path):
        self.kubeconfig = path
        with open(path) as f:
            config = yaml.safe_load(f) or {}
        contexts = {c["name"]: c.get("context") or {} for c in config.get("contexts") or []}
        context = contexts.get(config.get("current-context"), {})

        def pick(kind, name):
            for item in config.get(kind + "s") or []:
                if item.get("name") == name:
                    return item.get(kind) or {}
            return {}

        cluster = pick("cluster", context.get("cluster"))
        user = pick("user", context.get("user"))
        self.host = cluster.get("server")
        self.token = user.get("token")
        self.user_token = None
        ca = cluster.get("certificate-authority")
        if ca:
            self.ca_cert = ca if os.path.isabs(ca) else os.path.join(os.path.dirname(path), ca)
        elif cluster.get("certificate-authority-data"):
            self.tmp = tempfile.mkdtemp(prefix="kilo-kube-")
            self.ca_cert = os.path.join(self.tmp, "ca.crt")
            _write_pem(self.ca_cert, base64.b64decode(cluster["certificate-authority-data"]))

    # -- clients ------------------------------------------------------------------------------
    def client(self, token=None):
        """A kubernetes.client.ApiClient; token=None means the admin of the kubeconfig."""
        from kubernetes import client, config  # pylint: disable=import-outside-toplevel

        if token is None:
            return config.new_client_from_config(config_file=self.kubeconfig)
        conf = client.Configuration()
        conf.host = self.host
        conf.ssl_ca_cert = self.ca_cert
        conf.verify_ssl = self.ca_cert is not None
        conf.api_key = {"authorization": token}
        conf.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(conf)

    def kubectl(self, *args, check=True):
        """Run the cached kubectl (or the one on PATH) against this cluster; its stdout."""
        exe = os.path.join(self.bin_dir, "kubectl")
        if not os.access(exe, os.X_OK):
            exe = "kubectl"
        done = subprocess.run(
            [exe, f"--kubeconfig={self.kubeconfig}", *args],
            check=check,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.stdout
