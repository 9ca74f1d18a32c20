"""The Kubernetes client options beyond the token (kube_client, kubernetes.core's names) against the
real API server: a client certificate and key signed by the cluster's CA, impersonation of a user
and of a group, and a proxy that is really used (a refusing one makes the call fail)."""

import datetime
import os

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_client
from apiserver import free_port  # pylint: disable=import-error


def client_certificate(kube, directory, user, groups=()):
    """(certificate path, key path) of ``user`` in ``groups``, signed by the test cluster's CA."""
    with open(kube.ca_key, "rb") as f:
        ca_key = serialization.load_pem_private_key(f.read(), None)
    with open(kube.ca_cert, "rb") as f:
        ca = x509.load_pem_x509_certificate(f.read())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, user)]
        + [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = (os.path.join(directory, "client.crt"), os.path.join(directory, "client.key"))
    with open(paths[0], "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(os.open(paths[1], os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return paths


def status_of(options):
    """HTTP status of listing Nodes with the client ``options`` give (200 when allowed)."""
    with kube_client.api_client(options) as api:
        try:
            client.CoreV1Api(api).list_node(limit=1)
            return 200
        except client.ApiException as e:
            return e.status


@pytest.fixture
def pki_cluster(kube):
    if kube.external or not kube.ca_key:
        pytest.skip("a cluster of our own is needed (its CA signs the test's client certificate)")
    return kube


def test_a_client_certificate_and_key_authenticate(pki_cluster, tmp_path):
    kube = pki_cluster
    cert, key = client_certificate(kube, str(tmp_path), "kilo-cert-admin", ["system:masters"])
    base = {"host": kube.host, "ca_cert": kube.ca_cert}
    assert status_of(dict(base, client_cert=cert, client_key=key)) == 200
    # the same through kubernetes.core's aliases and K8S_AUTH_* variables
    assert (
        kube_client.auth_options({}, {"K8S_AUTH_CERT_FILE": cert, "K8S_AUTH_KEY_FILE": key})[
            "client_cert"
        ]
        == cert
    )
    # without them the server knows nobody
    assert status_of(dict(base, api_key="not-a-token")) == 401


def test_impersonation_acts_as_the_user_and_group(pki_cluster):
    kube = pki_cluster
    admin = {"host": kube.host, "ca_cert": kube.ca_cert, "api_key": kube.token}
    assert status_of(admin) == 200
    # the admin acting as the unprivileged user: its rights, not the admin's
    assert status_of(dict(admin, impersonate_user=kube.user_name)) == 403
    # and as a user in the masters' group: allowed again
    assert (
        status_of(dict(admin, impersonate_user="someone", impersonate_groups=["system:masters"]))
        == 200
    )
    with pytest.raises(kube_client.KubeError) as e:
        status_of(dict(admin, impersonate_user="someone", impersonate_groups=["a", "b"]))
    assert "one group at most" in str(e.value)


def test_the_proxy_is_used(pki_cluster):
    kube = pki_cluster
    admin = {"host": kube.host, "ca_cert": kube.ca_cert, "api_key": kube.token}
    refused = "http://127.0.0.1:%d" % free_port()  # nobody listens there
    with pytest.raises(Exception) as e:  # urllib3's ProxyError inside MaxRetryError
        status_of(dict(admin, proxy=refused))
    assert "proxy" in repr(e.value).lower() or "refused" in repr(e.value).lower(), repr(e.value)
    # no_proxy names the API server: the proxy is passed by
    assert status_of(dict(admin, proxy=refused, no_proxy="127.0.0.1")) == 200
