"""The agent's /metrics (agent/metrics.py) with a real Prometheus registry: the relays' two metrics
are the push textfile's (host/status.py), lines for lines.

The agent runs under the hosts' Python with Debian's python3-prometheus-client (the controller's
virtualenv has no client), so the registry is built there, from the agent's own zip application.
"""

import json
import os
import re
import subprocess

import pytest

from ansible_collections.kilo.mesh.plugins.module_utils.host import status as st
from ansible_collections.kilo.mesh.plugins.plugin_utils import agent_zip

from test_graph_units import NOW, live_of, relayed_result  # pylint: disable=import-error

# Under the hosts' Python: the agent's Metrics, fed as the agent feeds it (the plan it applied,
# its settings, the direct loop's WireGuard reading), scraped as /metrics answers, and parsed back
# with the client's own parser.
SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from prometheus_client.parser import text_string_to_metric_families
from ansible_collections.kilo.mesh.plugins.module_utils.agent.metrics import Metrics
given = json.load(sys.stdin)
metrics = Metrics()
out = {"before": metrics.exposition().decode()}
metrics.paths.current = given["current"]
metrics.paths.applied(given["plan"], given["settings"])
text = metrics.exposition().decode()
samples = [[s.name, s.labels, s.value] for f in text_string_to_metric_families(text) for s in f.samples]
out.update(text=text, samples=samples)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def scrape(tmp_path_factory):
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("no /usr/bin/python3")
    done = subprocess.run(
        ["/usr/bin/python3", "-c", "import prometheus_client"], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip("the hosts' Python has no prometheus_client (python3-prometheus-client)")
    app = tmp_path_factory.mktemp("agent") / "kilo-mesh-agent.pyz"
    app.write_bytes(agent_zip.build()[0])

    def run(plan, current, settings):
        done = subprocess.run(
            ["/usr/bin/python3", "-c", SCRIPT, str(app)],
            capture_output=True,
            text=True,
            input=json.dumps({"plan": plan, "current": current, "settings": settings}),
            timeout=60,
            cwd="/",
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    return run


def relay_samples(text):
    """[(name, labels, value)] of the relays' metrics in a text exposition (either writer's label
    order and number format)."""
    found = []
    for line in text.splitlines():
        if line.startswith(("kilo_path", "kilo_relay_forwarded")):
            name, rest = line.split("{", 1)
            labels, value = rest.rsplit("} ", 1)
            found.append((name, sorted(re.findall(r'(\w+)="([^"]*)"', labels)), float(value)))
    return sorted(found)


def test_a_leader_behind_nat_exports_the_textfiles_kilo_path(scrape):
    result = relayed_result()
    (pair,) = [p for p in result["paths"] if p["path"] == "relayed"]
    plan = result["plans"]["u"]
    current = live_of(plan, {pair["via"]: 4, "location:r": 4, "location:s": 4})
    got = scrape(plan, current, {"interface": "kilo0", "firewall": "nftables"})
    assert "kilo_path" not in got["before"]  # no plan applied yet: nothing said
    assert [s for s in got["samples"] if s[0] == "kilo_path"] == [
        ["kilo_path", {"segment": "location:v", "path": "relayed", "via": pair["via"]}, 1.0]
    ]
    # the textfile of the same host (push) says the same, line for line
    textfile = st.metrics(st.label_peers(st.host_status(current, NOW), plan))
    assert relay_samples(got["text"]) == relay_samples(textfile) != []
    assert "kilo_relay_forwarded_bytes_total" not in got["text"]  # no relay rule in its plan


def test_a_probing_pair_and_a_relay_without_rule(scrape):
    result = relayed_result()
    relay_name = [p for p in result["paths"] if p["path"] == "relayed"][0]["via"]
    plan = result["plans"]["u"]
    # a probe entry for v beside the relay's: the pair is probing (path_rows), the probe's handshake shown
    (relay_entry,) = [e for e in plan["peers"] if e["name"] == relay_name]
    probe = {"name": "location:v", "public_key": "p" * 43 + "=", "allowed_ips": [], "probe": True}
    plan = dict(plan, peers=plan["peers"] + [probe])
    current = live_of(plan, {relay_name: 4})
    got = scrape(plan, current, {"interface": "kilo0", "firewall": "none"})
    assert [s[1] for s in got["samples"] if s[0] == "kilo_path"] == [
        {"segment": "location:v", "path": "probing", "via": relay_name}
    ]
    assert relay_entry.get("relayed") == ["location:v"]
    # a relay's plan: no kilo_path (nothing of its own goes through a relay); firewall none: no rule to read
    relay_plan = result["plans"][relay_name.split(":", 1)[1]]
    assert (relay_plan.get("firewall") or {}).get("relay_accept")
    got = scrape(relay_plan, live_of(relay_plan, {}), {"interface": "kilo0", "firewall": "none"})
    assert relay_samples(got["text"]) == []
    assert "kilo_nodes 0.0" in got["text"]  # Kilo's metrics unchanged beside them
