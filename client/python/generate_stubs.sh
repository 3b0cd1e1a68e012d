#!/usr/bin/env bash
# Writes the replicad.v1 Python stubs (src/replicad/v1/replicad_pb2.py and
# replicad_pb2_grpc.py) from proto/replicad/v1/replicad.proto with Debian's protoc 3.21 and
# grpc_python_plugin (scripts/install-deps.sh installs both). The stubs are committed, so that
# `pip install ./client/python` needs neither; protoc 3.21's output runs on protobuf 3.20
# through 6.x. tests/client/python/test_stubs.py fails when they differ from the .proto.
# Usage: bash client/python/generate_stubs.sh [OUT_DIR]   (default: client/python/src)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/src}"
plugin="$(command -v grpc_python_plugin)"
protoc -I"$here/../../proto" --python_out="$out" --grpc_python_out="$out" \
  --plugin=protoc-gen-grpc_python="$plugin" replicad/v1/replicad.proto
