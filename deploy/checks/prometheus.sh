#!/usr/bin/env bash
# Prometheus, its rules and the Grafana dashboard (run by deploy/check.sh; needs promtool and
# prometheus from scripts/install-deps.sh, PyYAML (.venv-deploy, or Debian's python3-yaml) and a
# built build/bin/replicad, or $REPLICAD_BIN_DIR):
#   1. promtool check config (the shipped scrape config and the rule file it names)
#   2. promtool check rules and promtool test rules (every alert firing and staying quiet)
#   3. the operator's PrometheusRule is what make_prometheus_rule.py writes from the rule file,
#      and fits the CRD's schema (deploy/schemas, where present)
#   4. the dashboard is valid JSON with the variables and data sources its panels use
#   5. live: a real Prometheus runs the shipped config (a temp copy: target rewritten to a
#      replicad started here, intervals 1 s) and must scrape it, evaluate every rule without
#      error, record series from its traffic, and fire no alert at a healthy daemon.
# Bounded (about 15 s; every wait has a deadline), ports picked free, everything stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

python=/usr/bin/python3
if [ -x .venv-deploy/bin/python ]; then python=.venv-deploy/bin/python; fi
rules=deploy/prometheus/rules/replicad.rules.yml
dashboard=deploy/grafana/replicad-dashboard.json

echo "-- promtool check config"
promtool check config deploy/prometheus/prometheus.yml
echo "-- promtool check rules"
promtool check rules "$rules"
echo "-- promtool test rules"
promtool test rules deploy/prometheus/rules/replicad.rules.test.yml

echo "-- PrometheusRule up to date"
"$python" deploy/prometheus/make_prometheus_rule.py --check
schema=deploy/schemas/monitoring.coreos.com_v1_PrometheusRule.json
if [ -f "$schema" ] && "$python" -c 'import jsonschema' 2>/dev/null; then
  "$python" - "$schema" deploy/prometheus/operator/prometheusrule.yaml <<'EOF'
import json, sys, yaml, jsonschema
schema = json.load(open(sys.argv[1]))
doc = yaml.safe_load(open(sys.argv[2]))
errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
          for e in jsonschema.validators.validator_for(schema)(schema).iter_errors(doc)]
assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule"
if errors:
    sys.exit(f"{sys.argv[2]} does not fit {sys.argv[1]}:\n" + "\n".join(errors))
print(f"{sys.argv[2]} fits {sys.argv[1]}")
EOF
fi

echo "-- Grafana dashboard"
"$python" -m json.tool "$dashboard" >/dev/null
"$python" - "$dashboard" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
names = {v["name"]: v for v in d["templating"]["list"]}
assert names["datasource"]["type"] == "datasource" and names["datasource"]["query"] == "prometheus"
assert names["model"]["type"] == "query", names["model"]
assert 36 <= d["schemaVersion"] <= 41, d["schemaVersion"]
ids, targets = set(), 0
def walk(panels):
    global targets
    for p in panels:
        assert p["id"] not in ids, f"panel id {p['id']} twice"
        ids.add(p["id"])
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            for t in p["targets"]:
                assert t["datasource"]["uid"] == "${datasource}" and t["expr"], p["title"]
                targets += 1
        walk(p.get("panels", []))
walk(d["panels"])
print(f"{sys.argv[1]}: {len(ids)} panels, {targets} queries, schemaVersion {d['schemaVersion']}")
EOF

echo "-- live: Prometheus scrapes replicad and evaluates the rules"
bin_dir="${REPLICAD_BIN_DIR:-build/bin}"
if [ ! -x "$bin_dir/replicad" ] || [ ! -x "$bin_dir/replicactl" ]; then
  echo "deploy/checks/prometheus.sh: $bin_dir/replicad and replicactl are needed (build first)" >&2
  exit 1
fi
tmp="$(mktemp -d)"
replicad_pid=""
prometheus_pid=""
cleanup() {
  for pid in $prometheus_pid $replicad_pid; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in $prometheus_pid $replicad_pid; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
# Waits up to $1 seconds for the command after it to succeed.
until_ok() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    if [ "$SECONDS" -ge "$deadline" ]; then return 1; fi
    sleep 0.5
  done
}
fail() {
  echo "--- replicad log:" >&2; tail -5 "$tmp/replicad.log" | cut -c1-400 >&2 || true
  echo "--- prometheus log:" >&2; tail -5 "$tmp/prometheus.log" | cut -c1-400 >&2 || true
  echo "deploy/checks/prometheus.sh: FAILED: $*" >&2
  exit 1
}

mkdir "$tmp/checkpoints"
"$bin_dir/replicad" serve --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --http-listen '' \
  --devices cpu:0,cpu:0 --checkpoint-root "$tmp/checkpoints" >"$tmp/replicad.log" 2>&1 &
replicad_pid=$!
until_ok 30 grep -q 'replicad: ready: ' "$tmp/replicad.log" || fail "replicad did not start"
grpc_port="$(sed -n 's/.*gRPC listening on port \([0-9]*\).*/\1/p' "$tmp/replicad.log")"
metrics_port="$(sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' "$tmp/replicad.log")"
web_port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

# A Predict input: float32 [4, 1, 28, 28] as .npy (no numpy needed).
"$python" - "$tmp/image.npy" <<'EOF'
import struct, sys
shape = (4, 1, 28, 28)
header = "{'descr': '<f4', 'fortran_order': False, 'shape': %r, }" % (shape,)
header += " " * (-(10 + len(header) + 1) % 64) + "\n"
count = shape[0] * shape[1] * shape[2] * shape[3]
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<%df" % count, *([0.5] * count)))
EOF
predict() {
  "$bin_dir/replicactl" --server "127.0.0.1:$grpc_port" predict --model default \
    --input "image=$tmp/image.npy" --output-dir "$tmp" >/dev/null
}
predict || fail "Predict failed"

# The shipped config, with the target moved to this replicad, 1 s intervals and the rule
# file's absolute path.
"$python" - deploy/prometheus/prometheus.yml "$tmp/prometheus.yml" "127.0.0.1:$metrics_port" \
  "$PWD/$rules" <<'EOF'
import sys, yaml
config = yaml.safe_load(open(sys.argv[1]))
config["global"].update(scrape_interval="1s", evaluation_interval="1s")
jobs = [job for job in config["scrape_configs"] if job["job_name"] == "replicad"]
assert len(jobs) == 1, "the shipped config has no job 'replicad'"
jobs[0]["static_configs"] = [{"targets": [sys.argv[3]]}]
assert config["rule_files"] == ["rules/replicad.rules.yml"], config["rule_files"]
config["rule_files"] = [sys.argv[4]]
yaml.safe_dump(config, open(sys.argv[2], "w"))
EOF
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" \
  --web.listen-address="127.0.0.1:$web_port" --log.level=warn >"$tmp/prometheus.log" 2>&1 &
prometheus_pid=$!
api="http://127.0.0.1:$web_port"
until_ok 20 curl -sf "$api/-/ready" -o /dev/null || fail "Prometheus did not become ready"

# Each check reads Prometheus' HTTP API and says what it is waiting for; traffic keeps flowing
# between tries so that the rate rules have two samples to work with.
check_live() {
  predict || return 1
  curl -sf "$api/api/v1/targets" -o "$tmp/targets.json" &&
    curl -sf "$api/api/v1/rules" -o "$tmp/rules.json" &&
    curl -sf "$api/api/v1/alerts" -o "$tmp/alerts.json" &&
    curl -sfG "$api/api/v1/query" --data-urlencode \
      'query=model_method:replicad_requests:rate5m{model="default",method="Predict"}' \
      -o "$tmp/rate.json" &&
    curl -sfG "$api/api/v1/query" --data-urlencode \
      'query=model_method:replicad_request_errors:ratio_rate5m{model="default",method="Predict"}' \
      -o "$tmp/ratio.json" &&
    curl -sfG "$api/api/v1/query" --data-urlencode \
      'query=slot:replicad_slot_utilisation:ratio_rate1m{model="default"}' \
      -o "$tmp/slots.json" || return 1
  "$python" - "$tmp" "$rules" >"$tmp/verdict" 2>&1 <<'EOF'
import json, sys, yaml
tmp = sys.argv[1]
def load(name):
    return json.load(open(f"{tmp}/{name}.json"))["data"]
targets = load("targets")["activeTargets"]
if not targets or any(t["health"] != "up" for t in targets):
    sys.exit(f"waiting for the target: {[(t['scrapeUrl'], t['health'], t['lastError']) for t in targets]}")
shipped = sum(len(g["rules"]) for g in yaml.safe_load(open(sys.argv[2]))["groups"])
rules = [r for g in load("rules")["groups"] for r in g["rules"]]
def fatal(message):  # No point waiting: exit 2 stops the retries.
    print(message)
    sys.exit(2)
if len(rules) != shipped:
    fatal(f"Prometheus loaded {len(rules)} rules, the file has {shipped}")
bad = [(r["name"], r["health"], r.get("lastError")) for r in rules
       if r["health"] == "err" or r.get("lastError")]
if bad:
    fatal(f"rules failing: {bad}")
unhealthy = [(r["name"], r["health"]) for r in rules if r["health"] != "ok"]
if unhealthy:
    sys.exit(f"waiting for rules' health ok: {unhealthy}")
unevaluated = [r["name"] for r in rules if r["lastEvaluation"].startswith("0001-")]
if unevaluated:
    sys.exit(f"waiting for a first evaluation of {unevaluated}")
rate = load("rate")["result"]
if not rate or float(rate[0]["value"][1]) <= 0:
    sys.exit(f"waiting for model_method:replicad_requests:rate5m > 0: {rate}")
ratio = load("ratio")["result"]
if not ratio or float(ratio[0]["value"][1]) != 0:
    sys.exit(f"waiting for model_method:replicad_request_errors:ratio_rate5m == 0: {ratio}")
slots = load("slots")["result"]
if len(slots) != 2:
    sys.exit(f"waiting for slot:replicad_slot_utilisation:ratio_rate1m of 2 slots: {slots}")
alerts = load("alerts")["alerts"]
if alerts:
    fatal(f"a healthy replicad has alerts: {[(a['labels']['alertname'], a['state']) for a in alerts]}")
print(f"{len(targets)} target up; {len(rules)} rules healthy and evaluated; "
      f"requests/s {float(rate[0]['value'][1]):.3f}, error ratio 0, {len(slots)} slots' "
      "utilisation recorded; no alerts")
EOF
}
deadline=$((SECONDS + 30))
while true; do
  status=0
  check_live || status=$?
  if [ "$status" = 0 ]; then break; fi
  if [ "$status" = 2 ] || [ "$SECONDS" -ge "$deadline" ]; then
    fail "$(tail -1 "$tmp/verdict" 2>/dev/null)"
  fi
  sleep 0.5
done
cat "$tmp/verdict"
echo "deploy/checks/prometheus.sh: ok"
