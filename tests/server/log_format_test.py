"""The daemon's log as a collector reads it: with --log-format json every line it writes, on
stdout and stderr, parses as one JSON object with time, level and message; with --log-verbose 1
each inference the serving core answers (found or not) adds a verbose line naming the request's
id, the model, its rows and its status; without --log-verbose there is none.

Run with: .venv-triton/bin/python tests/server/log_format_test.py   (ctest runs it).
"""

import json
import os
import sys
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
from replicad_daemon import Daemon  # noqa: E402


def infer(daemon, request_id, pixels, model="default"):
    body = json.dumps({"id": request_id, "inputs": [
        {"name": "image", "shape": [len(pixels), 1, 28, 28], "datatype": "FP32",
         "data": [p for p in pixels for _ in range(784)]}]}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{daemon.http_port}/v2/models/{model}/infer", data=body,
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


class LogFormatTest(unittest.TestCase):

    def test_json_lines_parse_and_verbose_one_logs_each_request(self):
        daemon = Daemon("--devices", "cpu:0", "--log-format", "json", "--log-verbose", "1")
        try:
            self.assertEqual(infer(daemon, "req-\"1\"", [0.5, 0.25]), 200)
            self.assertEqual(infer(daemon, "lost", [0.5], model="nope"), 404)
        finally:
            daemon.stop()
        lines = [line for line in daemon.output if line.strip()]
        self.assertGreater(len(lines), 4)
        records = []
        for line in lines:
            record = json.loads(line)  # Every line, warnings and errors included.
            self.assertEqual(set(record) - {"verbose"}, {"time", "level", "message"}, line)
            self.assertRegex(record["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
            records.append(record)
        verbose = [r["message"] for r in records if r["level"] == "verbose"]
        self.assertTrue(any(m.startswith("request 'req-\"1\"' model 'default' version 1, 2 rows: OK")
                            for m in verbose), verbose)
        self.assertTrue(any(m.startswith("request 'lost' model 'nope' version 0, 0 rows: NOT_FOUND")
                            for m in verbose), verbose)
        self.assertTrue(all(r["verbose"] == 1 for r in records if r["level"] == "verbose"))

    def test_no_request_lines_by_default(self):
        daemon = Daemon("--devices", "cpu:0")
        try:
            self.assertEqual(infer(daemon, "quiet", [0.5]), 200)
        finally:
            daemon.stop()
        self.assertFalse([line for line in daemon.output if "request 'quiet'" in line])
        self.assertTrue(all(line.startswith("replicad: ") for line in daemon.output
                            if line.strip()), daemon.output)


if __name__ == "__main__":
    unittest.main(verbosity=2)
