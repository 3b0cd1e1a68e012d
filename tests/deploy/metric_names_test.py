"""The metric names the deployment files query exist in what replicad exports.

Run with: .venv-triton/bin/python tests/deploy/metric_names_test.py   (ctest runs it).

A live daemon (two CPU slots) answers Predicts over gRPC and HTTP and trains a few steps (and
refuses one), so its counters have series; then its /metrics is scraped. Every metric name
in the PromQL of the Grafana dashboard (panel queries and template variables), of the
Prometheus rules and of the rules' unit-test input series must be a family the daemon
exports (a histogram only through its _bucket, _sum or _count series), or a name a
recording rule defines. The label names their selectors match on must be labels of that
family (as the C++ registers them), or target labels Prometheus adds.

The replicad_gpu_* gauges exist only where NVML (libnvidia-ml.so.1) loads. They are not
skipped: GPU_ONLY names them, each must be registered in the C++ source, and the families
the source registers must equal those scraped plus GPU_ONLY (all of them when NVML loads), so
a new metric, a renamed one or a stale entry here fails the test. PLACED_ONLY likewise names
the pipeline metrics of placed models, which this daemon does not serve.

Before the first request, the daemon's /metrics is scraped too: every series those files
select (a family with the values of its plain equality matchers) must be there already, at 0
for counters, since increase() and alerts miss the first event of a series that appears with
it; APPEAR_WITH_TRAFFIC lists the families that cannot exist yet, and why.
"""

import os
import re
import sys
import tempfile
import unittest
import urllib.request
import json

import numpy as np
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
from replicad_daemon import Daemon  # noqa: E402

SOURCE_DIR = os.environ.get("REPLICAD_SOURCE_DIR", os.path.join(HERE, "..", ".."))
BIN_DIR = os.environ.get("REPLICAD_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin"))
DASHBOARD = os.path.join(SOURCE_DIR, "deploy", "grafana", "replicad-dashboard.json")
RULES = os.path.join(SOURCE_DIR, "deploy", "prometheus", "rules", "replicad.rules.yml")
RULES_TEST = os.path.join(SOURCE_DIR, "deploy", "prometheus", "rules", "replicad.rules.test.yml")

# Exported only where NVML loads (server/gpu_metrics.cc); each is checked against the source.
GPU_ONLY = {
    "replicad_gpu_utilization_ratio",
    "replicad_gpu_memory_used_bytes",
    "replicad_gpu_memory_total_bytes",
    "replicad_gpu_power_watts",
    "replicad_gpu_temperature_celsius",
}
GPU_SOURCE = os.path.join("server", "gpu_metrics.cc")

# Exported only for models served placed over several slots (model parallelism,
# server/pipeline_metrics.cc): the daemon here serves the default model whole, so they have
# no series; pipeline_replica_test and server_metrics_test drive them.
PLACED_ONLY = {
    "replicad_pipeline_seconds_total",
    "replicad_pipeline_part_busy_seconds_total",
    "replicad_pipeline_part_received_bytes_total",
}
PLACED_SOURCE = os.path.join("server", "pipeline_metrics.cc")

# Labels Prometheus (static, Kubernetes or operator discovery) puts on every scraped series.
TARGET_LABELS = {"job", "instance", "namespace", "pod", "container", "service", "endpoint",
                 "node"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
IDENTIFIER = re.compile(r"(?<![\w:$.])([A-Za-z_:][\w:]*)")
SELECTOR = re.compile(r"(?<![\w:$.])([A-Za-z_:][\w:]*)\s*\{([^}]*)\}")
MATCHER = re.compile(r'([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"')
REGISTRATION = re.compile(
    r'Add(Counter|Gauge|Histogram)\(\s*"(replicad_\w+)"\s*,\s*(?:"(?:[^"\\]|\\.)*"\s*)+,'
    r'\s*\{([^}]*)\}')


def registered_in_source():
    """{family: (kind, [labels], source file)} for every metric the C++ registers."""
    found = {}
    for top in ("core", "server"):
        for root, _, files in os.walk(os.path.join(SOURCE_DIR, top)):
            for name in files:
                if not name.endswith(".cc"):
                    continue
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                for kind, family, labels in REGISTRATION.findall(text):
                    found[family] = (kind.lower(), re.findall(r'"(\w+)"', labels),
                                     os.path.relpath(path, SOURCE_DIR))
    return found


def parse_exposition(text):
    """({family: type}, {family: set of label names seen on its series})."""
    types, labels = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split()
            types[family] = kind
            labels.setdefault(family, set())
        elif line and not line.startswith("#"):
            series = re.match(r"([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s", line)
            name = series.group(1)
            family = name
            for suffix in HISTOGRAM_SUFFIXES:
                if name.endswith(suffix) and types.get(name[:-len(suffix)]) == "histogram":
                    family = name[:-len(suffix)]
            labels.setdefault(family, set()).update(
                re.findall(r'(\w+)="', series.group(2) or ""))
    return types, labels


def queries_of_dashboard(dashboard):
    """[(where, PromQL)] of every panel target and query variable, rows' panels included."""
    out = []

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                if target.get("expr"):
                    out.append((f"panel '{panel.get('title')}' {target.get('refId')}",
                                target["expr"]))
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        for text in {query, variable.get("definition")} - {None, ""}:
            out.append((f"variable ${variable['name']}", text))
    return out


def queries_of_rules(rules):
    """([(where, PromQL)], {recorded names})."""
    out, recorded = [], set()
    for group in rules["groups"]:
        for rule in group["rules"]:
            name = rule.get("record") or rule.get("alert")
            if "record" in rule:
                recorded.add(rule["record"])
            out.append((f"rule {group['name']}/{name}", rule["expr"]))
    return out, recorded


def queries_of_rule_tests(tests):
    out = []
    for i, test in enumerate(tests["tests"]):
        for series in test.get("input_series", []):
            out.append((f"rules test {i} input series", series["series"]))
        for expr_test in test.get("promql_expr_test", []):
            out.append((f"rules test {i} promql_expr_test", expr_test["expr"]))
            for sample in expr_test.get("exp_samples", []):
                out.append((f"rules test {i} exp_samples", sample["labels"]))
    return out


def problems_of(where, promql, families, family_labels, recorded):
    """Every unknown metric name, bare histogram and unknown label in one PromQL text."""
    problems = []
    bare = STRING.sub('""', promql)
    for token in IDENTIFIER.findall(bare):
        if ":" in token:
            if token not in recorded:
                problems.append(f"{where}: '{token}' is no recording rule's name")
            continue
        if not token.startswith("replicad_"):
            continue
        if token in families:
            if families[token] == "histogram":
                problems.append(f"{where}: histogram '{token}' has no series of that name; "
                                "use its _bucket, _sum or _count")
            continue
        base = next((token[:-len(s)] for s in HISTOGRAM_SUFFIXES if token.endswith(s)), None)
        if base is None or families.get(base) != "histogram":
            problems.append(f"{where}: replicad exports no metric '{token}'")
    for name, matchers in SELECTOR.findall(promql):
        if ":" in name or not name.startswith("replicad_"):
            continue
        family = name
        if name not in families:
            family = next((name[:-len(s)] for s in HISTOGRAM_SUFFIXES
                           if name.endswith(s) and families.get(name[:-len(s)]) == "histogram"),
                          None)
            if family is None:
                continue  # reported above
        allowed = family_labels[family] | TARGET_LABELS | {"__name__"}
        if name.endswith("_bucket"):
            allowed = allowed | {"le"}
        for label in MATCHER.findall(matchers):
            if label not in allowed:
                problems.append(f"{where}: '{name}' has no label '{label}' "
                                f"(it has {sorted(family_labels[family])})")
    return problems


def series_of(text):
    """[(name, {label: value})] of every sample line of an exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        sample = re.match(r"([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s", line)
        out.append((sample.group(1),
                    dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', sample.group(2) or ""))))
    return out


FIXED_MATCHER = re.compile(r'([A-Za-z_]\w*)\s*=\s*"([^"$]*)"')


def selections_of(promql):
    """[(series name, {label: value})] of every selector's name and its plain equality
    matchers (not =~, !=, or a dashboard variable), bare names included."""
    out = []
    bare = STRING.sub('""', promql)
    with_matchers = {name for name, _ in SELECTOR.findall(promql)}
    for name, matchers in SELECTOR.findall(promql):
        out.append((name, dict(FIXED_MATCHER.findall(matchers))))
    for token in IDENTIFIER.findall(bare):
        if token.startswith("replicad_") and token not in with_matchers:
            out.append((token, {}))
    return out


# Families whose series a fresh daemon cannot have, with why: their label sets are made by
# traffic (which RPC method, which status code), by a slice having run (the measured speed
# and share), or by a step (its last loss and accuracy, its phases per slot).
APPEAR_WITH_TRAFFIC = {
    "replicad_requests_total": "{method, code} of each RPC answered",
    "replicad_request_duration_seconds": "{method} of each RPC answered",
    "replicad_slot_rows_per_second": "measured when a slot first runs",
    "replicad_slot_share": "set when a batch is first split",
    "replicad_train_loss": "the last step's; none before one",
    "replicad_train_accuracy": "the last step's; none before one",
    "replicad_train_loss_scale": "an fp16 step's; none before one",
    "replicad_train_seconds_total": "{slot, phase} of a step that ran",
}


def setUpModule():
    global scrape, fresh_scrape, daemon_output, source
    source = registered_in_source()
    sys.path.insert(0, os.path.join(SOURCE_DIR, "client", "python", "src"))
    import replicad  # noqa: E402  (the Python client, from the source tree)
    from replicad import errors  # noqa: E402

    rng = np.random.default_rng(0)
    x = rng.random((32, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, size=32).astype(np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "checkpoints"))
        daemon = Daemon("--devices", "cpu:0,cpu:0", "--checkpoint-root", tmp)
        try:
            metrics_port = next(int(m.group(1)) for line in daemon.output
                                for m in [re.search(r"metrics on port (\d+)", line)] if m)
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                        timeout=30) as response:
                fresh_scrape = response.read().decode()
            client = replicad.Client(f"127.0.0.1:{daemon.port}")
            client.predict("default", x)
            body = json.dumps({"inputs": [{"name": "image", "shape": [1, 1, 28, 28],
                                           "datatype": "FP32", "data": [0.5] * 784}]})
            with urllib.request.urlopen(urllib.request.Request(
                    f"http://127.0.0.1:{daemon.http_port}/v2/models/default/infer",
                    data=body.encode(), headers={"Content-Type": "application/json"}),
                    timeout=60) as response:
                assert response.status == 200
            # Two applied steps (the second writes a periodic checkpoint), one skipped for a
            # non-finite loss or gradient, one refused for a NaN pixel, one in fp16.
            client.configure_training("default", optimizer="sgd", non_finite_steps="skip",
                                      checkpoint_every_steps=2,
                                      checkpoint_dir=os.path.join(tmp, "checkpoints"))
            for _ in range(2):
                client.train_step("default", x, y)
            skipped = client.train_step("default", np.full_like(x, 3e38), y)
            assert skipped.skipped, skipped
            nan = x.copy()
            nan[0, 0, 0, 0] = np.nan
            try:
                client.train_step("default", nan, y)
                raise AssertionError("a NaN pixel was trained on")
            except errors.InvalidArgument:
                pass
            # An fp16 step, for its loss scale.
            client.configure_training("default", optimizer="sgd", precision="fp16")
            client.train_step("default", x, y)
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                        timeout=30) as response:
                scrape = response.read().decode()
        finally:
            daemon.stop()
            daemon_output = "".join(daemon.output)


class MetricNamesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.scraped, cls.scraped_labels = parse_exposition(scrape)
        cls.nvml = not re.search(r"no GPU metrics", daemon_output)
        # Families and their labels as the C++ registers them; the tests below hold the
        # scrape to the same (every family but the GPU gauges without NVML has series).
        cls.families = {name: kind for name, (kind, _, _) in source.items()}
        cls.family_labels = {name: set(labels) for name, (_, labels, _) in source.items()}
        with open(DASHBOARD, encoding="utf-8") as f:
            cls.dashboard = json.load(f)
        with open(RULES, encoding="utf-8") as f:
            cls.rules = yaml.safe_load(f)
        with open(RULES_TEST, encoding="utf-8") as f:
            cls.rule_tests = yaml.safe_load(f)
        cls.rule_queries, cls.recorded = queries_of_rules(cls.rules)

    def check(self, queries):
        problems = []
        for where, promql in queries:
            problems += problems_of(where, promql, self.families, self.family_labels,
                                    self.recorded)
        self.assertEqual(problems, [], "\n".join(problems))

    def test_scrape_matches_the_source(self):
        """Every family the source registers is scraped with series and the same labels
        (histograms add le), except the GPU gauges where NVML did not load."""
        expected = set(self.families) if self.nvml else set(self.families) - GPU_ONLY
        expected -= PLACED_ONLY
        self.assertEqual(set(self.scraped) - PLACED_ONLY, expected)
        for family in sorted(expected):
            labels = self.family_labels[family] | (
                {"le"} if self.families[family] == "histogram" else set())
            self.assertTrue(self.scraped_labels[family],
                            f"{family} has no series: drive it in setUpModule")
            self.assertEqual(self.scraped_labels[family], labels, family)
            self.assertEqual(self.scraped[family], self.families[family], family)
        for text in ('method="http:ModelInfer"', 'outcome="skipped",code="OK"',
                     'outcome="refused",code="INVALID_ARGUMENT"', 'outcome="written"'):
            self.assertTrue(text in scrape, f"no series with {text}")

    def test_a_fresh_daemon_has_every_series_the_rules_and_dashboard_select(self):
        """Before any request, each series the rules and the dashboard select
        (a family, with the values of its plain equality matchers) is scraped, at 0 for
        counters, so that increase() and alerts see a model's first event; only the
        families of APPEAR_WITH_TRAFFIC (and the GPU gauges without NVML) may be absent."""
        fresh = series_of(fresh_scrape)
        queries = queries_of_dashboard(self.dashboard) + self.rule_queries
        missing = set()
        for where, promql in queries:
            for name, wanted in selections_of(promql):
                wanted = {k: v for k, v in wanted.items() if k not in TARGET_LABELS}
                family = next((name[:-len(s)] for s in HISTOGRAM_SUFFIXES
                               if name.endswith(s) and self.families.get(name[:-len(s)])
                               == "histogram"), name)
                if family not in self.families or family in APPEAR_WITH_TRAFFIC:
                    continue
                if (family in GPU_ONLY and not self.nvml) or family in PLACED_ONLY:
                    continue
                names = {family} if self.families[family] != "histogram" else {
                    family + s for s in HISTOGRAM_SUFFIXES}
                if not any(n in names and all(labels.get(k) == v for k, v in wanted.items())
                           for n, labels in fresh):
                    missing.add(f"{name}{wanted or ''} ({where})")
        self.maxDiff = None
        self.assertEqual(sorted(missing), [], "not on a fresh daemon's /metrics")
        for text in ('replicad_train_steps_not_applied_total{model="default",outcome="skipped",'
                     'code="OK"} 0', 'replicad_train_checkpoints_total{model="default",'
                     'outcome="written"} 0',
                     'replicad_model_precision{model="default",precision="fp32"} 1',
                     'replicad_model_precision{model="default",precision="bf16"} 0',
                     'replicad_model_precision{model="default",precision="tf32"} 0'):
            self.assertIn(text, fresh_scrape)

    def test_gpu_only_metrics_are_registered_in_gpu_metrics(self):
        for family in sorted(GPU_ONLY):
            self.assertIn(family, source, f"{family} is registered nowhere in core/ or server/")
            self.assertEqual(source[family][2], GPU_SOURCE, family)
            self.assertEqual(source[family][1], ["gpu"], family)
        # Every family registered where the GPU gauges are is listed (a new one is noticed).
        in_gpu_source = {f for f, (_, _, where) in source.items() if where == GPU_SOURCE}
        self.assertEqual(in_gpu_source, GPU_ONLY)

    def test_placed_only_metrics_are_registered_in_pipeline_metrics(self):
        for family in sorted(PLACED_ONLY):
            self.assertIn(family, source, f"{family} is registered nowhere in core/ or server/")
            self.assertEqual(source[family][2], PLACED_SOURCE, family)
        in_source = {f for f, (_, _, where) in source.items() if where == PLACED_SOURCE}
        self.assertEqual(in_source, PLACED_ONLY)

    def test_dashboard_queries_use_exported_metrics(self):
        queries = queries_of_dashboard(self.dashboard)
        self.assertGreater(len(queries), 30)
        self.check(queries)

    def test_rules_use_exported_metrics(self):
        self.assertGreater(len(self.rule_queries), 15)
        self.check(self.rule_queries)

    def test_rule_tests_use_exported_metrics(self):
        self.check(queries_of_rule_tests(self.rule_tests))

    def test_every_exported_family_is_on_the_dashboard(self):
        used = set()
        for _, promql in queries_of_dashboard(self.dashboard):
            for token in IDENTIFIER.findall(STRING.sub('""', promql)):
                for suffix in ("",) + HISTOGRAM_SUFFIXES:
                    if suffix == "" or token.endswith(suffix):
                        used.add(token[:len(token) - len(suffix)] if suffix else token)
        missing = sorted(set(self.families) - used)
        self.assertEqual(missing, [], f"families no panel shows: {missing}")

    def test_the_checker_catches_mistakes(self):
        bad = [
            ("a", "rate(replicad_request_total[5m])"),                    # not exported
            ("b", "rate(replicad_request_duration_seconds[5m])"),         # bare histogram
            ("c", "replicad_samples_total_count"),                        # not a histogram
            ("d", 'rate(replicad_samples_total{slot="r0"}[1m])'),         # no such label
            ("e", "model:replicad_nothing:rate5m"),                       # no such recording
            ("f", 'replicad_request_queue_seconds_sum{le="1"}'),          # le only on _bucket
        ]
        for where, promql in bad:
            self.assertNotEqual(
                problems_of(where, promql, self.families, self.family_labels, self.recorded),
                [], promql)
        good = ('histogram_quantile(0.99, sum by (model, le) (rate('
                'replicad_request_queue_seconds_bucket{model=~"$model", le!="x"}[5m]))) '
                '/ on (model) model:replicad_samples:rate5m + label_replace(up, "x", '
                '"replicad_not_a_metric", "", "")')
        self.assertEqual(problems_of("g", good, self.families, self.family_labels,
                                     self.recorded), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
