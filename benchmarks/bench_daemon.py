"""`replicad serve` as a child process of a benchmark, on a port the kernel picks."""

import os
import re
import select
import signal
import subprocess
import time


class ReplicadDaemon:
    """Runs `replicad serve ARGS --listen 127.0.0.1:0 --metrics-listen '' --http-listen ''`."""

    def __init__(self, replicad, serve_args):
        self.argv = [replicad, "serve", *serve_args, "--listen", "127.0.0.1:0",
                     "--metrics-listen", "", "--http-listen", ""]
        self.proc = None
        self.port = None
        self.output = ""
        self.listening_seconds = None
        self.ready_seconds = None

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def start(self, timeout=300):
        """Waits for "gRPC listening on port N" and then "ready: " (the startup models
        loaded); returns None, or why they did not come. Sets listening_seconds and
        ready_seconds, from the start."""
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        # Raw reads: a buffered reader could hold the port line while select() sees nothing.
        fd = self.proc.stdout.fileno()
        started = time.monotonic()
        deadline = started + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                if self.proc.poll() is not None:
                    break
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self.output += chunk.decode(errors="replace")
            match = re.search(r"gRPC listening on port (\d+)", self.output)
            if match and self.port is None:
                self.port = int(match.group(1))
                self.listening_seconds = time.monotonic() - started
            if self.port is not None and re.search(r"replicad: ready: ", self.output):
                self.ready_seconds = time.monotonic() - started
                return None
        self.stop()
        last = self.output.strip().splitlines()[-1:] or ["(no output)"]
        return f"replicad serve did not start within {timeout} s: {last[0][:300]}"

    def peak_rss_bytes(self):
        """VmHWM of the daemon, or None."""
        return peak_rss_bytes(self.proc.pid)

    def stop(self):
        """SIGTERM (the daemon drains), then SIGKILL after a minute."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            rest, _ = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rest, _ = self.proc.communicate()
        self.output += (rest or b"").decode(errors="replace")


def peak_rss_bytes(pid):
    """VmHWM (peak resident set) of process `pid` in bytes, or None."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None
