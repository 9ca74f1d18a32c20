"""A lab whose hosts are Nodes of a real kube-apiserver: for Molecule's `kubernetes` scenario
and for tests/kube/test_site_kubernetes.py.

    python tests/kube/labcluster.py up --prefix kmk 2 2   # API server, lab, Nodes, a Peer, inventory
    python tests/kube/labcluster.py down --prefix kmk     # all of it gone (safe to repeat)

`up` starts etcd and kube-apiserver (tests/kube/apiserver.py) detached from this process, and
records their PIDs and start times in the lab's state dir, so `down` (another process) stops
exactly those two. The inventory it writes (`<state>/k8s/`) is the inventory plugin's config
plus the lab's SSH settings as group and host variables.
"""

import argparse
import contextlib
import ipaddress
import json
import os
import shutil
import signal
import sys
import tempfile
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, ROOT, os.path.join(ROOT, ".collections")]

from apiserver import ApiServer  # noqa: E402  pylint: disable=import-error,wrong-import-position
from lab.lab import Lab, process_alive, process_starttime  # noqa: E402  pylint: disable=import-error,wrong-import-position

from ansible_collections.kilo.mesh.plugins.module_utils.kube import kube_node as kn  # noqa: E402

CRDS = os.path.join(ROOT, "manifests", "crds.yaml")
PEER_KEY = "zji092EqdeMrpvl7gOcd4/s6KOkqLShA23iwQjmAoUw="
PEER_ALLOWED_IPS = ["10.5.0.1/32"]
# What a kubelet writes on its Node (Kilo's agent fails on a Node without any annotation).
KUBELET_ANNOTATIONS = {"volumes.kubernetes.io/controller-managed-attach-detach": "true"}
# Lab host variables that reach the host (the rest come from the Node).
SSH_VARS = (
    "ansible_ssh_common_args",
    "ansible_user",
    "ansible_python_interpreter",
    "ansible_become",
    "ansible_become_password",
)


def pod_cidr(h):
    return "10.50.%d.0/24" % (10 * h["location_index"] + h["index"])


def pod_cidr6(h):
    """The host's IPv6 pod range on a dual-stack cluster (beside pod_cidr's, same number)."""
    return "fd50:0:0:%d::/64" % (10 * h["location_index"] + h["index"])


def pods(lab, host):
    """[(pod range, pod address)] of a dual-stack Node's host (the first address of each range):
    the shape of tests/host/test_dual_stack.pods, for its unreached()."""
    h = lab.hosts[host]
    return [(c, str(ipaddress.ip_network(c)[1])) for c in (pod_cidr(h), pod_cidr6(h))]


def register_nodes(lab, core, made=None, only=None, skip=(), ipv6=False):
    """Every lab host becomes a Node: location by the topology label in location 1 and by Kilo's
    annotation elsewhere (a wrong label beside it, which the annotation beats), the first host of
    location 2 a forced leader, a pod CIDR, the management address as InternalIP (so Ansible
    reaches it). With ``ipv6`` the Node is dual-stack as a kube-controller-manager would make it:
    spec.podCIDRs holds pod_cidr and pod_cidr6, spec.podCIDR the first. Returns the Node names,
    also appended to ``made`` as each is created (so a failure half-way still lets the caller
    delete what exists)."""
    from kubernetes import client  # pylint: disable=import-outside-toplevel

    made = [] if made is None else made
    for name, h in sorted(lab.hosts.items()):
        if (only is not None and name not in only) or name in skip:
            continue
        i, k = h["location_index"], h["index"]
        labels, annotations = {}, dict(KUBELET_ANNOTATIONS)
        if i == 1:
            labels[kn.REGION_LABEL] = h["location"]
        else:
            annotations[kn.LOCATION] = h["location"]
            labels[kn.REGION_LABEL] = "ignored-when-annotated"
        if i == 2 and k == 1:
            annotations[kn.LEADER] = "true"
        core.create_node(
            client.V1Node(
                metadata=client.V1ObjectMeta(name=name, labels=labels, annotations=annotations),
                spec=client.V1NodeSpec(
                    pod_cidr=pod_cidr(h), pod_cidrs=([pod_cidr(h), pod_cidr6(h)] if ipv6 else None)
                ),
            )
        )
        made.append(name)
        core.patch_node_status(
            name,
            {
                "status": {
                    "addresses": [
                        {"type": "InternalIP", "address": h["mgmt_ip"]},
                        {"type": "Hostname", "address": name},
                    ]
                }
            },
        )
    return made


def peer_resource(name):
    return {
        "apiVersion": kn.PEER_API_VERSION,
        "kind": "Peer",
        "metadata": {"name": name},
        "spec": {"allowedIPs": PEER_ALLOWED_IPS, "publicKey": PEER_KEY, "persistentKeepalive": 0},
    }


def write_inventory(lab, kubeconfig, directory, registry):
    """<directory>/cluster.kubernetes.yml with group_vars/kilo.yml and host_vars/<host>.yml beside
    it; ``registry`` must lie outside ``directory`` (Ansible reads a directory's JSON files as
    inventory). Returns the plugin config's path."""
    with open(lab.inventory) as f:
        kilo = yaml.safe_load(f)["all"]["children"]["kilo"]
    for sub in ("group_vars", "host_vars"):
        os.makedirs(os.path.join(directory, sub), exist_ok=True)
    config = os.path.join(directory, "cluster.kubernetes.yml")
    _dump(config, {"plugin": "kilo.mesh.kubernetes", "kubeconfig": kubeconfig})
    # the client options once, in the plugin's file: it gives every host kilo_kube for the write-back
    _dump(
        os.path.join(directory, "group_vars", "kilo.yml"),
        dict(kilo["vars"], kilo_registry=registry),
    )
    for location in kilo["children"].values():
        for host, hvars in location["hosts"].items():
            _dump(
                os.path.join(directory, "host_vars", host + ".yml"),
                dict(
                    (k, v) for k, v in hvars.items() if k in SSH_VARS or k.startswith("kilo_lab_")
                ),
            )
    return config


def _dump(path, data):
    with open(path, "w") as f:
        yaml.safe_dump(data, f, default_flow_style=False)


@contextlib.contextmanager
def nodes_of(kube, admin, prefix, peer, create_peer=True, ipv6=False):
    """A 2 x 2 lab (prefix ``prefix``) whose hosts are Nodes of ``kube``, with the Peer ``peer``
    (unless ``create_peer`` is false: a test makes it later): yields (lab, inventory path); the lab,
    the Nodes and the Peer are removed after, whatever happens. ``ipv6``: both families on the
    lab's links and the Nodes' pod ranges (register_nodes)."""
    from kubernetes import client  # pylint: disable=import-outside-toplevel
    from test_apiserver import eventually  # pylint: disable=import-error,import-outside-toplevel
    from test_inventory_plugin import delete_all  # pylint: disable=import-error,import-outside-toplevel

    core, custom = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
    group = (kn.PEER_GROUP, kn.PEER_VERSION, kn.PEER_PLURAL)
    lab = Lab(prefix)
    lab.down()
    lab.up(2, 2, 1, ipv6=ipv6)
    tmp = tempfile.mkdtemp(prefix="kilo-%s-" % prefix)
    made = []
    try:
        kube.kubectl("apply", "-f", CRDS)
        eventually(lambda: custom.list_cluster_custom_object(*group), 60)
        register_nodes(lab, core, made, ipv6=ipv6)
        if create_peer:
            custom.create_cluster_custom_object(*group, peer_resource(peer))
        yield (
            lab,
            write_inventory(
                lab,
                kube.kubeconfig,
                os.path.join(tmp, "inventory"),
                os.path.join(tmp, "kilo-registry.json"),
            ),
        )
    finally:
        lab.down()
        delete_all(core.delete_node, made)
        delete_all(lambda n: custom.delete_cluster_custom_object(*group, n), [peer])
        shutil.rmtree(tmp, ignore_errors=True)


# -- the control plane outliving this process -------------------------------------------------


def start_detached(state_file):
    """Start etcd + kube-apiserver for good and record them; returns the ApiServer."""
    server = ApiServer(detached=True)
    server.start()
    record = {
        "kubeconfig": server.kubeconfig,
        "tmp": server.tmp,
        "host": server.host,
        "processes": [
            {"name": n, "pid": p.pid, "start": process_starttime(p.pid)} for n, p, _ in server.procs
        ],
    }
    with open(state_file, "w") as f:
        json.dump(record, f, indent=1)
    return server


def stop_recorded(state_file, timeout=15.0):
    """Stop the processes ``state_file`` names (newest first), each only while its PID still
    has the recorded start time; remove their directory and the record."""
    try:
        with open(state_file) as f:
            record = json.load(f)
    except FileNotFoundError:
        return
    for proc in reversed(record["processes"]):
        if process_alive(proc["pid"], proc["start"]):
            os.kill(proc["pid"], signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while process_alive(proc["pid"], proc["start"]) and time.monotonic() < deadline:
                time.sleep(0.1)
            if process_alive(proc["pid"], proc["start"]):
                os.kill(proc["pid"], signal.SIGKILL)
    if record.get("tmp"):
        shutil.rmtree(record["tmp"], ignore_errors=True)
    os.remove(state_file)


def up(prefix, locations, hosts):
    lab = Lab(prefix)
    down(prefix)
    lab.up(locations, hosts, 1)
    state = lab.path("kube.json")
    server = start_detached(state)
    try:
        server.kubectl("apply", "-f", CRDS)
        with server.client() as api:
            from kubernetes import client  # pylint: disable=import-outside-toplevel

            register_nodes(lab, client.CoreV1Api(api))
            custom = client.CustomObjectsApi(api)
            deadline = time.monotonic() + 60
            while True:  # the CRD is served a moment after it is applied
                try:
                    custom.create_cluster_custom_object(
                        kn.PEER_GROUP,
                        kn.PEER_VERSION,
                        kn.PEER_PLURAL,
                        peer_resource(prefix + "-laptop"),
                    )
                    break
                except client.ApiException as e:
                    if e.status != 404 or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        print(
            write_inventory(
                lab, server.kubeconfig, lab.path("k8s"), lab.path("kilo-registry-k8s.json")
            )
        )
    except BaseException:
        down(prefix)
        raise


def down(prefix):
    lab = Lab(prefix)
    stop_recorded(lab.path("kube.json"))
    shutil.rmtree(lab.path("k8s"), ignore_errors=True)
    for path in (lab.path("kilo-registry-k8s.json"), lab.path("kilo-registry-k8s.json.lock")):
        if os.path.exists(path):
            os.remove(path)
    lab.down()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up")
    u.add_argument("locations", type=int)
    u.add_argument("hosts", type=int)
    d = sub.add_parser("down")
    for p in (u, d):
        p.add_argument("--prefix", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "up":
        up(args.prefix, args.locations, args.hosts)
    else:
        down(args.prefix)


if __name__ == "__main__":
    main()
