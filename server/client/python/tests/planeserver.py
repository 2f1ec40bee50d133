"""A real `leaseplane serve` for the tests: the built binary (LEASEPLANE_BIN),
a temporary data folder, a free port."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import urllib.request
from typing import List, Optional


class PlaneServer:
    def __init__(self) -> None:
        self.bin = os.environ.get("LEASEPLANE_BIN", "")
        if not self.bin or not os.access(self.bin, os.X_OK):
            raise RuntimeError("LEASEPLANE_BIN must name the built leaseplane binary (make test-python builds it)")
        self.dir = tempfile.mkdtemp(prefix="leaseplane-py-")
        self.data = os.path.join(self.dir, "data")
        self.proc = subprocess.Popen([self.bin, "serve", "--addr", "127.0.0.1:0", "--data", self.data],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.url = ""
        self.key = ""
        self.log: List[str] = []
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("export LEASEPLANE_KEY="):
                self.key = line.split("=", 1)[1].strip()
            if line.startswith("export LEASEPLANE_URL="):
                self.url = line.split("=", 1)[1].strip()
                break
        if not self.url or not self.key:
            self.stop()
            raise RuntimeError("leaseplane serve did not start: %s" % (self.proc.stderr.read() if self.proc.stderr else ""))
        # Keep reading its output so that it never blocks on a full pipe.
        for f in (self.proc.stdout, self.proc.stderr):
            threading.Thread(target=self._drain, args=(f,), daemon=True).start()
        self.operator = self.new_key("--operator")

    def _drain(self, f) -> None:  # type: ignore[no-untyped-def]
        for line in f:
            self.log.append(line)

    def new_key(self, *args: str) -> str:
        out = subprocess.run([self.bin, "keys", "create", "--data", self.data, "--workspace", "default", *args],
                             check=True, capture_output=True, text=True).stdout
        return out.split()[-1]

    def acquire_requests(self) -> int:
        """How many acquire requests (grants, renewals, refusals) the plane
        has answered, from its /metrics."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        n = 0
        for line in text.splitlines():
            if line.startswith("leaseplane_requests_total{") and 'op="acquire"' in line:
                n += int(float(line.split()[-1]))
        return n

    def suspend(self, did: str, resume: bool = False) -> None:
        route = "resume" if resume else "suspend"
        req = urllib.request.Request(self.url + "/api/v1/acp/operator/" + route, method="POST",
                                     data=('{"actorDid":"%s"}' % did).encode(),
                                     headers={"Authorization": "Bearer " + self.operator})
        with urllib.request.urlopen(req, timeout=10) as r:
            if r.status != 200:
                raise RuntimeError("%s %s: HTTP %d" % (route, did, r.status))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


_server: Optional[PlaneServer] = None


def shared() -> PlaneServer:
    global _server
    if _server is None:
        _server = PlaneServer()
    return _server


def stop_shared() -> None:
    global _server
    if _server is not None:
        _server.stop()
        _server = None
