"""Traffic across a lab while a playbook runs: 50 pings a second on each flow, each flow's loss
counted by icmp_seq and printed (the host tests of key rotation: test_rotation.py, test_connect.py)."""
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
    procs = [(pair, subprocess.Popen(lab.nsenter_argv(pair[0], ["ping", "-c", "3", "-i", "0.2", "-w", "20",
                                                                  address(lab, pair[1])]),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
             for pair in pairs]
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
            self.procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                               start_new_session=True))

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
    print("\n%s: %s; the playbook took %.1f s" % (what, ", ".join(
        "lost %d of %d (%s->%s%s)" % (len(lost), sent, src, dst, " seq %s" % spans(lost) if lost else "")
        for (src, dst), (sent, lost) in result.items()), took))
    for pair, (sent, lost) in result.items():
        # the flow ran through the whole run (3 s of it outside the run at 50/s)
        assert sent > 100, (pair, sent)
    if check_bound:
        assert over_bound(result) == [], over_bound(result)
    return result, out


def over_bound(result):
    return ["%s->%s lost %d of %d: seq %s" % (pair + (len(lost), sent, spans(lost)))
            for pair, (sent, lost) in sorted(result.items()) if len(lost) >= BOUND]
