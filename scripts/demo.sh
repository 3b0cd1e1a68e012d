#!/usr/bin/env bash
# The main job: installs dependencies, builds replicad, starts it on its
# embedded default model on all local devices, trains it for one epoch on
# Fashion-MNIST through TrainSteps (data-parallel over the slots), predicts
# test images through replicactl, trains one more epoch from Python with the
# client package's Keras-style fit, and shows the devices, the model and a
# metrics summary. DEMO_EPOCHS (default 1) sets replicactl's epochs.
# Ports: REPLICAD_PORT (default 8500) and REPLICAD_METRICS_PORT (default 9090).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh replicad replicactl
bash scripts/client-venv.sh  # the Python client (client/python), for the fit step below

bin="${REPLICAD_BUILD_DIR:-build}/bin"
port="${REPLICAD_PORT:-8500}"
metrics_port="${REPLICAD_METRICS_PORT:-9090}"
http_port="${REPLICAD_HTTP_PORT:-8000}"
work="$(mktemp -d)"
log="$work/replicad.log"

"$bin/replicad" serve --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$metrics_port" \
  --http-listen "127.0.0.1:$http_port" --devices all --checkpoint-root "$work" >"$log" 2>&1 &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null || true; wait $daemon 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
  grep -q "replicad: ready: " "$log" && break
  kill -0 $daemon 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
cat "$log"

ctl=("$bin/replicactl" --server "127.0.0.1:$port")
echo; echo "== devices"; "${ctl[@]}" devices
echo; echo "== model"; "${ctl[@]}" model default

# "all" means one slot per GPU where there are GPUs (they then train on the
# GPUs, reducing with NCCL), else CPU slots.
echo; echo "== train: ${DEMO_EPOCHS:-1} epoch(s) of Fashion-MNIST through TrainSteps (one stream an epoch), test accuracy through Predict"
"${ctl[@]}" train --model default --data /usr/share/datasets/fashion-mnist \
  --epochs "${DEMO_EPOCHS:-1}" --batch-size 64 --optimizer sgd --lr 0.02 --momentum 0.9 \
  --checkpoint trained.onnx


echo; echo "== predict: 64 Fashion-MNIST test images with the trained weights"
/usr/bin/python3 - "$work" <<'PY'
import gzip, sys
import numpy as np
root = "/usr/share/datasets/fashion-mnist/"
with gzip.open(root + "t10k-images-idx3-ubyte.gz") as f:
    images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[:64]
with gzip.open(root + "t10k-labels-idx1-ubyte.gz") as f:
    labels = np.frombuffer(f.read(), np.uint8, offset=8)[:64]
np.save(sys.argv[1] + "/image.npy", (images / 255.0).astype(np.float32))
np.save(sys.argv[1] + "/labels.npy", labels.astype(np.int64))
PY
"${ctl[@]}" predict --model default --input "image=$work/image.npy" --output-dir "$work/out"
/usr/bin/python3 - "$work" <<'PY'
import sys
import numpy as np
p = np.load(sys.argv[1] + "/out/probabilities.npy")
labels = np.load(sys.argv[1] + "/labels.npy")
pred = p.argmax(1)
print("first 16 predicted:", pred[:16].tolist())
print("first 16 labels:   ", labels[:16].tolist())
print("accuracy on these 64: %.3f" % (pred == labels).mean())
print("probability rows sum to 1: max |sum-1| = %.2e" % abs(p.sum(1) - 1).max())
PY

echo; echo "== from Python (client/python): one more epoch with replicad.Client.fit"
.venv-client/bin/python - "127.0.0.1:$port" <<'PY'
import sys
import replicad
from replicad.datasets import load_idx
x, y = load_idx("/usr/share/datasets/fashion-mnist", "train")
x_test, y_test = load_idx("/usr/share/datasets/fashion-mnist", "t10k")
x, x_test = (x / 255.0)[:, None], (x_test / 255.0)[:, None]
with replicad.Client(sys.argv[1]) as client:  # trains with the configuration replicactl set
    history = client.fit("default", x, y, batch_size=64, epochs=1, seed=1, verbose=2,
                         validation_data=(x_test, y_test))
    print("history:", {k: round(v[0], 4) for k, v in history.history.items()},
          "server step", history.step)
PY

echo; echo "== metrics (http://127.0.0.1:$metrics_port/metrics)"
/usr/bin/python3 -c "import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1]).read().decode())" \
  "http://127.0.0.1:$metrics_port/metrics" | grep -v '^#' | grep -v '_bucket' |
  grep -E 'replicad_(train|samples|slot|requests_total|device_slots)'
