"""benchmarks/gpu_summary.py: the GPU figures' JSON in issue #41's shape.

Run with: /usr/bin/python3 tests/benchmarks/gpu_summary_test.py   (ctest runs it).
The keys are the issue's; a case without a figure is null (never a number made up); the ratio
is replicad's time over PyTorch's; what is not a time is refused.
"""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import gpu_summary  # noqa: E402


class GpuSummaryTest(unittest.TestCase):
    def test_the_issues_shape_with_ratios_and_nulls(self):
        train = {True: gpu_summary.case(100.0, 150.0, replicad_case="1 slot"),
                 False: gpu_summary.case(200.0, None)}
        predict = {True: gpu_summary.case(40.0, 30.0), False: gpu_summary.case(80.0, 88.0)}
        document = gpu_summary.summary("2026-12-03", "NVIDIA H200", "abc1234", train, predict,
                                       reduced_precision={"fp16": gpu_summary.case(50.0, 45.0)},
                                       train_fp16=gpu_summary.case(60.0, 66.0),
                                       int8=gpu_summary.case(20.0, 10.0))
        self.assertEqual(set(document), {"date", "gpu", "commit", "train_step", "predict",
                                         "batching_gain"})
        self.assertEqual(set(document["train_step"]), {"tf32_on", "tf32_off", "fp16"})
        self.assertEqual(document["train_step"]["fp16"]["ratio"], 1.1)
        self.assertEqual(set(document["predict"]),
                         {"tf32_on", "tf32_off", "batch1_graphs", "fp16", "bf16", "int8"})
        self.assertEqual(document["train_step"]["tf32_on"],
                         {"pytorch_ms": 100.0, "replicad_ms": 150.0, "ratio": 1.5,
                          "replicad_case": "1 slot"})
        self.assertIsNone(document["train_step"]["tf32_off"])  # replicad's run failed
        self.assertEqual(document["predict"]["tf32_on"]["ratio"], 0.75)
        self.assertEqual(document["predict"]["tf32_off"]["ratio"], 1.1)
        self.assertIsNone(document["predict"]["batch1_graphs"])
        self.assertEqual(document["predict"]["fp16"]["ratio"], 0.9)
        self.assertIsNone(document["predict"]["bf16"])  # Not measured.
        self.assertEqual(document["predict"]["int8"]["ratio"], 0.5)
        self.assertIsNone(document["batching_gain"])

    def test_what_is_not_a_time_or_a_whole_pair_is_refused(self):
        with self.assertRaises(ValueError):
            gpu_summary.case(0.0, 10.0)
        with self.assertRaises(ValueError):
            gpu_summary.case(10.0, -1.0)
        with self.assertRaises(ValueError):
            gpu_summary.summary("d", "g", "c", {True: None}, {True: None, False: None})

    def test_written_as_indented_json(self):
        document = gpu_summary.summary("2026-12-03", "NVIDIA H200", "abc", {True: None,
                                       False: None}, {True: None, False: None})
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "results", "gpu-latest.json")
            gpu_summary.write(document, path)
            with open(path) as f:
                text = f.read()
        self.assertTrue(text.endswith("}\n"))
        self.assertEqual(json.loads(text), document)


if __name__ == "__main__":
    unittest.main(verbosity=2)
