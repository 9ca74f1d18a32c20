"""One UDP socket in a lab host, driven from the test: it sends what it is told and reports every
datagram it receives with its source, so a test sees the address and port a NAT gave a sender.

The socket lives in a small Python process inside the host (``Lab.nsenter_argv``), reading
commands on stdin (``send IP PORT PAYLOAD``) and writing ``recv IP PORT PAYLOAD`` lines.
"""

import subprocess
import threading
import time

AGENT = r"""
import os, select, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
buf = b""
while True:
    r, _, _ = select.select([s, 0], [], [])
    if s in r:
        data, src = s.recvfrom(2048)
        print("recv %s %d %s" % (src[0], src[1], data.decode()), flush=True)
    if 0 in r:
        chunk = os.read(0, 4096)  # not sys.stdin: its buffer would hide lines from select
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            _, ip, port, payload = line.decode().split(" ", 3)
            try:
                s.sendto(payload.encode(), (ip, int(port)))
            except OSError as e:
                print("error %s" % e, flush=True)
"""


class UdpPeer(object):
    def __init__(self, lab, host, port):
        self.host, self.port = host, port
        self.proc = subprocess.Popen(
            lab.nsenter_argv(host, ["python3", "-c", AGENT, str(port)]),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.lines = []
        self.cond = threading.Condition()
        first = self.proc.stdout.readline()
        if first.strip() != "ready":
            raise AssertionError(
                "UDP socket %s:%d did not start: %s %s"
                % (host, port, first, self.proc.stderr.read())
            )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()

    def send(self, ip, port, payload):
        self.proc.stdin.write("send %s %d %s\n" % (ip, port, payload))
        self.proc.stdin.flush()

    def _find(self, payload):
        for line in self.lines:
            words = line.split(" ", 3)
            if words[0] == "recv" and words[3] == payload:
                return (words[1], int(words[2])), payload
            if words[0] == "error":
                raise AssertionError("%s:%d: %s" % (self.host, self.port, line))
        return None

    def saw(self, payload, wait=0.0):
        """Whether ``payload`` arrived (within ``wait`` seconds)."""
        deadline = time.monotonic() + wait
        with self.cond:
            while True:
                if self._find(payload):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)

    def wait_for(self, payload, timeout=5.0):
        """((source ip, source port), payload) of the first datagram carrying ``payload``."""
        if not self.saw(payload, timeout):
            raise AssertionError(
                "%s:%d received no %r within %ss (got: %s)"
                % (self.host, self.port, payload, timeout, self.lines)
            )
        with self.cond:
            return self._find(payload)

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
