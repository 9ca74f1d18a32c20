#!/usr/bin/python3
"""Run the CNI plugins of a node's conflist for one "pod", the way a container runtime does.

    cni_pod.py add NETNS [CONFLIST]   # makes network namespace NETNS, prints the chain's result (JSON)
    cni_pod.py del NETNS [CONFLIST]   # runs DEL through the chain and removes NETNS

Runs on the host itself (stdlib only; the tests pipe it to the host's python3). Each plugin gets
CNI_* in its environment and its config on stdin: the list's name and cniVersion added, the
previous plugin's result as prevResult (for DEL: the result ADD ended with, kept under /run).
Loopback for "lo" is the runtime's own network, not part of Kilo's list.
"""

import json
import os
import subprocess
import sys

CNI_BIN = "/usr/lib/cni"
CONFLIST = "/etc/cni/net.d/10-kilo.conflist"
LOOPBACK = {"cniVersion": "0.3.1", "name": "cni-loopback", "type": "loopback"}


def invoke(command, netns, ifname, config):
    env = dict(
        os.environ,
        CNI_COMMAND=command,
        CNI_CONTAINERID=netns,
        CNI_NETNS="/var/run/netns/" + netns,
        CNI_IFNAME=ifname,
        CNI_PATH=CNI_BIN,
    )
    done = subprocess.run(
        [os.path.join(CNI_BIN, config["type"])],
        input=json.dumps(config),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(
            "%s %s for %s: exit %d: %s%s"
            % (config["type"], command, netns, done.returncode, done.stdout, done.stderr)
        )
    return json.loads(done.stdout) if done.stdout.strip() else None


def chain(conflist, prev=None):
    for plugin in conflist["plugins"]:
        config = dict(plugin, name=conflist["name"], cniVersion=conflist["cniVersion"])
        if prev is not None:
            config["prevResult"] = prev
        yield config


def saved(netns):
    return "/run/cni-pod-%s.json" % netns


def add(netns, conflist):
    subprocess.run(["ip", "netns", "add", netns], check=True)
    invoke("ADD", netns, "lo", LOOPBACK)
    result = None
    for config in chain(conflist):
        if result is not None:
            config["prevResult"] = result
        result = invoke("ADD", netns, "eth0", config)
    with open(saved(netns), "w") as f:
        json.dump(result, f)
    return result


def delete(netns, conflist):
    with open(saved(netns)) as f:
        result = json.load(f)
    for config in reversed(list(chain(conflist, result))):
        invoke("DEL", netns, "eth0", config)
    invoke("DEL", netns, "lo", LOOPBACK)
    subprocess.run(["ip", "netns", "del", netns], check=True)
    os.remove(saved(netns))


def main(argv):
    command, netns = argv[1], argv[2]
    with open(argv[3] if len(argv) > 3 else CONFLIST) as f:
        conflist = json.load(f)
    if command == "add":
        print(json.dumps(add(netns, conflist)))
    elif command == "del":
        delete(netns, conflist)
    else:
        sys.exit("usage: cni_pod.py add|del NETNS [CONFLIST]")


if __name__ == "__main__":
    main(sys.argv)
