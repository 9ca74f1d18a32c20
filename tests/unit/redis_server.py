"""A throw-away redis-server for tests (Debian's redis-server, `scripts/setup.sh all`): on
127.0.0.1 at a free port, no persistence, its own directory; stopped by its PID, never by name."""

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ping(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def redis_server(timeout=20):
    """Yields the server's URL (``redis://127.0.0.1:PORT/0``); the server is gone afterwards."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.path.exists(binary):
        raise RuntimeError(
            "redis-server is not installed (scripts/setup.sh all installs Debian's redis-server)"
        )
    directory = tempfile.mkdtemp(prefix="kilo-redis-")
    port = free_port()
    log = open(os.path.join(directory, "redis.log"), "w")
    proc = subprocess.Popen(
        [
            binary,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            directory,
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + timeout
        while not ping(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                with open(os.path.join(directory, "redis.log")) as f:
                    raise RuntimeError("redis-server did not start: %s" % f.read()[-2000:])
            time.sleep(0.05)
        yield "redis://127.0.0.1:%d/0" % port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(directory, ignore_errors=True)
