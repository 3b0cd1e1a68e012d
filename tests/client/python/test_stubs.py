"""The committed replicad.v1 stubs are what generate_stubs.sh makes of today's .proto."""

import os
import subprocess

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")
STUBS = os.path.join(ROOT, "client", "python", "src", "replicad", "v1")


def test_stubs_match_the_proto(tmp_path):
    subprocess.run(["bash", os.path.join(ROOT, "client", "python", "generate_stubs.sh"),
                    str(tmp_path)], check=True)
    for name in ("replicad_pb2.py", "replicad_pb2_grpc.py"):
        with open(os.path.join(STUBS, name)) as committed, \
                open(tmp_path / "replicad" / "v1" / name) as fresh:
            assert committed.read() == fresh.read(), (
                f"client/python/src/replicad/v1/{name} differs from the proto: run "
                "bash client/python/generate_stubs.sh and commit the result")
