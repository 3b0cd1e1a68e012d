"""benchmarks/compare_gpu.py's sections, without a GPU: what a lent machine's run writes.

Run with: /usr/bin/python3 tests/benchmarks/compare_gpu_sections_test.py   (ctest runs it).
The measuring functions are replaced by stand-ins (a GPU machine runs the real ones); what is
checked is the plumbing a run depends on there and cannot debug: --sections picks and orders
the sections, an unknown one is refused before anything runs, and the report and the JSON are
written again after each section, so that a run cut short (a lent machine's calls end at 10
minutes) keeps every figure it measured, the others null; --merge keeps an earlier call's
figures for the sections a later call does not run.
"""

import json
import os
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import compare_gpu  # noqa: E402
import gpu_summary  # noqa: E402


class Interrupted(Exception):
    """A run cut short in the middle of a section."""


class CompareGpuSectionsTest(unittest.TestCase):
    def setUp(self):
        self.ran = []
        self.directory = tempfile.TemporaryDirectory()
        self.json = os.path.join(self.directory.name, "gpu-latest.json")
        self.output = os.path.join(self.directory.name, "gpu.md")

        def section(name, result):
            def run(*args):
                self.ran.append(name)
                if name == "graphs" and self.interrupt_graphs:
                    raise Interrupted()
                return result
            return run

        case = gpu_summary.case
        self.interrupt_graphs = False
        patches = [
            mock.patch.object(compare_gpu.torch.cuda, "is_available", lambda: True),
            mock.patch.object(compare_gpu.torch.cuda, "get_device_name", lambda i: "Fake GPU"),
            mock.patch.object(compare_gpu.models, "export_onnx", lambda *a, **k: None),
            mock.patch.object(compare_gpu, "export_resnet50_training", lambda path: None),
            mock.patch.object(compare_gpu.torch.nn.Module, "cuda", lambda self: self),
            mock.patch.object(compare_gpu, "git_commit", lambda: "abc1234"),
            mock.patch.object(compare_gpu, "predict_section", section(
                "predict", ([("engine", "ms"), ("x", "1")],
                            {True: case(40.0, 30.0), False: case(80.0, 88.0)}))),
            mock.patch.object(compare_gpu, "train_section", section(
                "train", ([("engine", "ms")], {True: case(100.0, 150.0), False: None}))),
            mock.patch.object(compare_gpu, "slots_per_gpu", section(
                "slots", [("slots", "ms")])),
            mock.patch.object(compare_gpu, "batch1_graphs", section(
                "graphs", ([("engine", "ms")], case(5.0, 4.0)))),
            mock.patch.object(compare_gpu, "reduced_precision", section(
                "precision", ([("precision", "ms")], {"fp16": case(50.0, 45.0), "bf16": None}))),
            mock.patch.object(compare_gpu, "int8_inference", section(
                "int8", ([("engine", "ms")], case(20.0, 10.0)))),
            mock.patch.object(compare_gpu, "fp16_train_step", section(
                "fp16_train", ([("engine", "ms")], case(60.0, 66.0)))),
            mock.patch.object(compare_gpu, "batching_gain", section(
                "batching", (1.5, [("batching", "infer/s")]))),
        ]
        for patch in patches:
            patch.start()
            self.addCleanup(patch.stop)
        self.addCleanup(self.directory.cleanup)

    def run_main(self, sections):
        argv = ["--json", self.json, "--output", self.output]
        if sections is not None:
            argv += ["--sections", sections]
        with mock.patch("sys.stdout"):
            return compare_gpu.main(argv)

    def document(self):
        with open(self.json) as f:
            return json.load(f)

    def test_every_section_by_default_in_order(self):
        self.assertEqual(self.run_main(None), 0)
        self.assertEqual(self.ran, list(compare_gpu.SECTIONS))
        document = self.document()
        self.assertEqual(document["gpu"], "Fake GPU")
        self.assertEqual(document["predict"]["tf32_on"]["ratio"], 0.75)
        self.assertEqual(document["train_step"]["tf32_on"]["ratio"], 1.5)
        self.assertEqual(document["predict"]["batch1_graphs"]["ratio"], 0.8)
        self.assertEqual(document["predict"]["int8"]["ratio"], 0.5)
        self.assertEqual(document["train_step"]["fp16"]["ratio"], 1.1)
        self.assertEqual(document["batching_gain"], 1.5)
        with open(self.output) as f:
            report = f.read()
        self.assertIn("Inference, batch 256:", report)
        self.assertIn("Dynamic batching", report)

    def test_chosen_sections_only_the_rest_null(self):
        self.assertEqual(self.run_main("int8,predict"), 0)
        self.assertEqual(self.ran, ["int8", "predict"])
        document = self.document()
        self.assertEqual(document["predict"]["int8"]["ratio"], 0.5)
        self.assertEqual(document["predict"]["tf32_off"]["ratio"], 1.1)
        self.assertIsNone(document["train_step"]["tf32_on"])
        self.assertIsNone(document["batching_gain"])

    def test_a_run_cut_short_keeps_what_it_measured(self):
        self.interrupt_graphs = True
        with self.assertRaises(Interrupted):
            self.run_main("predict,int8,graphs,batching")
        self.assertEqual(self.ran, ["predict", "int8", "graphs"])
        document = self.document()
        self.assertEqual(document["predict"]["tf32_on"]["ratio"], 0.75)
        self.assertEqual(document["predict"]["int8"]["ratio"], 0.5)
        self.assertIsNone(document["predict"]["batch1_graphs"])
        with open(self.output) as f:
            self.assertIn("int8, resnet18", f.read())

    def test_a_run_split_over_two_calls_merges_its_figures(self):
        self.assertEqual(self.run_main("predict,train"), 0)
        with mock.patch("sys.stdout"):
            self.assertEqual(compare_gpu.main(["--json", self.json, "--output", self.output,
                                               "--sections", "int8,batching", "--merge"]), 0)
        document = self.document()
        self.assertEqual(document["predict"]["tf32_on"]["ratio"], 0.75)  # From the first call.
        self.assertEqual(document["train_step"]["tf32_on"]["ratio"], 1.5)
        self.assertEqual(document["predict"]["int8"]["ratio"], 0.5)  # From the second.
        self.assertEqual(document["batching_gain"], 1.5)
        self.assertIsNone(document["predict"]["batch1_graphs"])  # Never run.
        # Without --merge a call's JSON holds its own sections only.
        self.assertEqual(self.run_main("int8"), 0)
        self.assertIsNone(self.document()["predict"]["tf32_on"])

    def test_an_unknown_section_is_refused_before_anything_runs(self):
        with mock.patch.object(compare_gpu, "log") as log:
            self.assertEqual(self.run_main("predict,trian"), 2)
        self.assertEqual(self.ran, [])
        self.assertIn("unknown trian", log.call_args[0][0])
        self.assertFalse(os.path.exists(self.json))


if __name__ == "__main__":
    unittest.main(verbosity=2)
