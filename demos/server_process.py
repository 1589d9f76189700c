"""Run `python -m demos.app` as a child process on 127.0.0.1 (tests, benchmark, load test).

    with running_server(warm=False) as server:
        Client(server.url) ...

The server is always terminated on exit (then killed if it does not stop within 20 s); its output
is kept in ``server.log`` (a list of lines, read by a background thread).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, proc: subprocess.Popen, url: str):
        self.proc, self.url, self.log = proc, url, []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.log.append(line.rstrip("\n"))

    def wait_for_line(self, text: str, timeout: float) -> bool:
        """Wait until a log line contains ``text`` (e.g. the warm-up's "warm-up done")."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(text in line for line in list(self.log)):
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.2)
        return False


def _wait_ready(server: Server, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if server.proc.poll() is not None:
            time.sleep(0.3)
            raise RuntimeError(f"demo exited with {server.proc.returncode}:\n" + "\n".join(server.log[-40:]))
        try:
            with urllib.request.urlopen(server.url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"demo did not answer on {server.url} within {timeout:.0f} s:\n" + "\n".join(server.log[-40:]))


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def running_server(port: int | None = None, warm: bool = False, timeout: float = 240.0, extra_args=()):
    """Start the demo on 127.0.0.1:<port> (a free port by default), yield a :class:`Server`, stop it."""
    port = port or free_port()
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", TPO_DEMO_WARM="1" if warm else "0", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "demos.app", "--host", "127.0.0.1", "--port", str(port), *extra_args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        server = Server(proc, f"http://127.0.0.1:{port}/")
        _wait_ready(server, timeout)
        yield server
    finally:
        stop(proc)
