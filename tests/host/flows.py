"""Traffic across a lab while a playbook runs: 50 pings a second on each flow, each flow's loss
counted by icmp_seq and printed (the host tests of key rotation: test_rotation.py, test_connect.py);
and UDP echoes at a fixed rate counted by their own sequence numbers (RateFlows: the migration test)."""

import json
import os
import re
import signal
import subprocess
import time

INTERVAL = "0.02"  # 50 pings a second
BOUND = 50  # packets of one flow: 1 s at 50/s, the bound (the goal is 0)


def address(lab, dst):
    """A flow's destination: a host of the lab (its LAN address) or an address as it is."""
    return lab.hosts[dst]["lan_ip"] if dst in lab.hosts else dst


def warm_up(lab, pairs):
    """First packets wait for handshakes: each flow answers 3 pings before the measure."""
    procs = [
        (
            pair,
            subprocess.Popen(
                lab.nsenter_argv(
                    pair[0], ["ping", "-c", "3", "-i", "0.2", "-w", "20", address(lab, pair[1])]
                ),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            ),
        )
        for pair in pairs
    ]
    for pair, proc in procs:
        out, _ = proc.communicate(timeout=40)
        assert proc.returncode == 0, (pair, out)


class Flows(object):
    """50 pings a second on each (src, dst) pair, from src's namespace to ``address(dst)``."""

    def __init__(self, lab, pairs):
        self.pairs = pairs
        self.procs = []
        for src, dst in pairs:
            argv = lab.nsenter_argv(src, ["ping", "-i", INTERVAL, "-W", "5", address(lab, dst)])
            self.procs.append(
                subprocess.Popen(
                    argv,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
            )

    def stop(self):
        """{(src, dst): (sent, lost icmp_seq list)}."""
        out = {}
        for pair, proc in zip(self.pairs, self.procs):
            if proc.poll() is None:
                # nsenter forks ping into the host's PID namespace: signal the whole group
                os.killpg(proc.pid, signal.SIGINT)
            text, _ = proc.communicate(timeout=20)
            found = re.search(r"(\d+) packets transmitted", text)
            assert found, (pair, text[-500:])
            sent = int(found.group(1))
            received = set(int(s) for s in re.findall(r"icmp_seq=(\d+)", text))
            # the last two echo requests may still be on their way when ping is stopped
            out[pair] = (sent, sorted(set(range(1, sent - 1)) - received))
        return out


def spans(seqs):
    """[3, 4, 5, 9] -> '3-5,9'."""
    out, start = [], None
    for i, seq in enumerate(seqs):
        if start is None:
            start = seq
        if i + 1 == len(seqs) or seqs[i + 1] != seq + 1:
            out.append("%d" % start if start == seq else "%d-%d" % (start, seq))
            start = None
    return ",".join(out)


def under_traffic(lab, what, run, pairs, check_bound=True):
    """``run()`` (a playbook) while every pair pings at 50/s (1 s before, 2 s after); prints each
    flow's loss and checks it (the bound too unless ``check_bound`` is false); returns
    ({(src, dst): (sent, lost icmp_seq list)}, what run() returned)."""
    warm_up(lab, pairs)
    flows = Flows(lab, pairs)
    try:
        time.sleep(1)
        started = time.monotonic()
        out = run()
        took = time.monotonic() - started
        time.sleep(2)
    finally:
        result = flows.stop()
    print(
        "\n%s: %s; the playbook took %.1f s"
        % (
            what,
            ", ".join(
                "lost %d of %d (%s->%s%s)"
                % (len(lost), sent, src, dst, " seq %s" % spans(lost) if lost else "")
                for (src, dst), (sent, lost) in result.items()
            ),
            took,
        )
    )
    for pair, (sent, lost) in result.items():
        # the flow ran through the whole run (3 s of it outside the run at 50/s)
        assert sent > 100, (pair, sent)
    if check_bound:
        assert over_bound(result) == [], over_bound(result)
    return result, out


def over_bound(result):
    return [
        "%s->%s lost %d of %d: seq %s" % (pair + (len(lost), sent, spans(lost)))
        for pair, (sent, lost) in sorted(result.items())
        if len(lost) >= BOUND
    ]


# -- flows at a fixed rate, counted by sequence number ----------------------------------------
# iputils ping slows down while its echoes go unanswered (to about 14 a second at -i 0.02), so an
# outage costs fewer of its sequence numbers than it lasts. These senders keep their schedule
# whatever comes back: each UDP datagram carries its flow and sequence number, the echo server in
# the destination host sends it back, and a number never answered is a lost echo, sent at a known
# time (start + seq / rate).
UDP_PORT = 7107
ECHO = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", int(sys.argv[1])))
while True:
    data, peer = s.recvfrom(64)
    s.sendto(data, peer)
"""
SENDER = r"""
import json, select, signal, socket, struct, sys, time
port, rate, dsts = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
stop = []
signal.signal(signal.SIGINT, lambda *a: stop.append(1))
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
got = [set() for _ in dsts]
def drain():
    while True:
        try:
            data = s.recv(64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            continue
        if len(data) == 8:
            i, seq = struct.unpack("!II", data)
            if i < len(got):
                got[i].add(seq)
start, n = time.time(), 0
while not stop:
    now = time.time()
    due = start + n / rate
    if now >= due:
        for i, dst in enumerate(dsts):
            try:
                s.sendto(struct.pack("!II", i, n), (dst, port))
            except OSError:
                pass  # no route: never answered, so counted lost
        n += 1
        continue
    try:
        select.select([s], [], [], due - now)
    except InterruptedError:
        pass
    drain()
end = time.time() + 1.0  # the last ones sent get a second to come back
while time.time() < end:
    try:
        select.select([s], [], [], max(0.0, end - time.time()))
    except InterruptedError:
        pass
    drain()
print(json.dumps({"start": start, "rate": rate, "sent": n,
                  "lost": dict((d, sorted(set(range(n)) - got[i])) for i, d in enumerate(dsts))}))
"""


class RateFlows(object):
    """UDP echoes at ``rate`` a second from each source host to each of its destinations, counted
    by sequence number (see above): ``pairs`` is [(src host, dst host)]; one echo server per
    destination host and one sender per source host, started at once and stopped by ``stop()``.

    ``stop()`` returns {(src, dst): (sent, [send time of each lost echo])}."""

    def __init__(self, lab, pairs, rate=50):
        self.lab, self.pairs, self.rate = lab, list(pairs), rate
        self.servers, self.senders = [], {}
        for host in sorted(set(dst for _src, dst in self.pairs)):
            self.servers.append(
                subprocess.Popen(
                    lab.nsenter_argv(host, ["python3", "-c", ECHO, str(UDP_PORT)]),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        time.sleep(0.5)  # the servers bind before the first echo
        for src in sorted(set(src for src, _dst in self.pairs)):
            dsts = [address(lab, dst) for s, dst in self.pairs if s == src]
            self.senders[src] = subprocess.Popen(
                lab.nsenter_argv(src, ["python3", "-c", SENDER, str(UDP_PORT), str(rate)] + dsts),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )

    def stop(self):
        out = {}
        for proc in self.senders.values():
            os.killpg(proc.pid, signal.SIGINT)  # nsenter forks into the host's PID namespace
        for src, proc in sorted(self.senders.items()):
            text, _ = proc.communicate(timeout=30)
            report = json.loads(text.strip().splitlines()[-1])
            for s, dst in self.pairs:
                if s == src:
                    lost = report["lost"][address(self.lab, dst)]
                    out[(src, dst)] = (
                        report["sent"],
                        [report["start"] + seq / report["rate"] for seq in lost],
                    )
        for proc in self.servers:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        return out


def lost_between(result, start, end):
    """{(src, dst): echoes lost of those sent in [start, end)} of RateFlows.stop()'s result."""
    return dict(
        (pair, sum(1 for t in times if start <= t < end)) for pair, (_sent, times) in result.items()
    )
