"""Starts `replicad serve` for the Python tests that drive it with clients we did not write."""

import json
import os
import re
import subprocess
import threading
import time


def text_of(line):
    """A log line as --log-format text writes it, also from a --log-format json line."""
    if line.startswith("{"):
        try:
            return "replicad: " + json.loads(line)["message"] + "\n"
        except (ValueError, KeyError):
            return line
    return line


class Daemon:
    """replicad serve on free loopback ports (gRPC `port`, HTTP `http_port`); stopped with SIGTERM.

    A "--listen" among the flags replaces the gRPC address (e.g. unix:PATH, where `port` stays
    None); `target` is what a gRPC client connects to either way. The binary comes from
    $REPLICAD_BIN_DIR (ctest sets it) or build/bin.
    """

    def __init__(self, *flags, launcher=()):
        """launcher: a command that starts the daemon, e.g. ("mpirun", "-np", "2") for a
        training job of two ranks; rank 0 listens, and `output` holds every rank's lines."""
        bin_dir = os.environ.get("REPLICAD_BIN_DIR",
                                 os.path.join(os.path.dirname(__file__), "../../build/bin"))
        self.process = subprocess.Popen(
            [*launcher, os.path.join(bin_dir, "replicad"), "serve",
             *([] if "--listen" in flags else ["--listen", "127.0.0.1:0"]),
             "--metrics-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.output = []
        self.port = None
        self.target = None
        self.http_port = None
        deadline = time.time() + 120
        ready = False  # The doors open first; "ready: ..." once the models loaded.
        while (self.target is None or not ready) and time.time() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.output.append(line)
            line = text_of(line)
            # Rank 0's lines (or a lone daemon's): other ranks say "replicad: rank R of N: ".
            ready = ready or re.match(r"replicad: ready: ", line) is not None
            http = re.match(r"replicad: HTTP listening on port (\d+)", line)
            if http:
                self.http_port = int(http.group(1))
            match = re.match(r"replicad: gRPC listening on (?:port (\d+)|(unix:\S+))", line)
            if match and match.group(1):
                self.port = int(match.group(1))
                self.target = f"127.0.0.1:{self.port}"
            elif match:
                self.target = match.group(2)
        if self.target is None or not ready:
            self.process.kill()
            self.process.wait(timeout=60)
            self.process.stdout.close()
            raise RuntimeError("replicad did not start:\n" + "".join(self.output))
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    def _drain(self):
        for line in self.process.stdout:
            self.output.append(line)

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=60)
        # The drainer reads to the pipe's end, which comes once every process
        # holding it (each rank under a launcher) has exited; then the pipe
        # can be closed without pulling it from under a read.
        self._drainer.join(timeout=10)
        if not self._drainer.is_alive():
            self.process.stdout.close()


