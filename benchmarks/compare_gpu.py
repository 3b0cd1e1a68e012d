#!/usr/bin/env python3
"""replicad next to PyTorch on one GPU: resnet50 inference and training step.

Run with (on a machine with an NVIDIA GPU, after scripts/build.sh):
    /usr/bin/python3 benchmarks/compare_gpu.py [--batch 256] [--train-batch 128]
        [--iterations 20] [--warmup 5] [--device cuda:0] [--output FILE.md]

Inference, batch --batch, for TF32 off and on:
  - replicad in-process (build/benchmarks/model_forward_bench --device cuda:0): ReplicaSet
    Predict from host memory to host memory (the served path: staged copy in, run, copy out),
    with 1 and 2 slots on the one GPU, slices whole (--transfer-chunks 1) and cut into up to 4
    chunks whose copies overlap the compute, and (2 slots) merged in cuda:0's memory;
  - PyTorch (cudnn.benchmark on, inference_mode) on the module that was exported, timed the
    same way (host tensor in, .cpu() out, synchronised) and with the input already on the GPU.
Training step, batch --train-batch, SGD with momentum 0.9 and cross-entropy: PyTorch's
forward, loss, backward and step, next to replicad's DataParallelTrainer step
(build/benchmarks/train_step_bench: split, forward, loss, backward, gradient reduction on the
GPU, optimizer on the GPU; host tensors in, two batches in turn, the next one uploaded while a
step computes as for a TrainSteps client) with 1 and 2 slots on the one GPU, on resnet50
exported in training mode (BatchNormalization with batch statistics); each one-slot step also
with --no-cudnn-deterministic (cuDNN's fastest algorithms, as PyTorch's default) and with
--no-prefetch (each step uploading its own input first).
Slots of one GPU: Predict on 1, 2 and 4 slots at batch 1, 8 and 64 (--slot-batches).
fp16 training: replicad's TrainStep with precision fp16 (one slot) next to PyTorch's AMP step
(autocast float16 and GradScaler), the JSON's train_step.fp16.
Reduced precision: replicad --precision fp16 and bf16 (one slot, host tensors in and out)
next to PyTorch under torch.autocast with its input on the GPU (the JSON's predict.fp16 and
predict.bf16).
int8: resnet18 as quantize_static writes it (QDQ; gpu-bundle.sh carries the file, since the GPU
machine has no onnxruntime), its convolutions on int8 tensor cores, next to replicad's float32
resnet18 and PyTorch's float32 (input on the GPU) at batch --int8-batch, one slot (the JSON's
predict.int8: replicad int8 against PyTorch float32).
Batch 1, TF32 off: replicad on one slot with and without --cuda-graphs, next to PyTorch with
host tensors in and out and with its input on the GPU (the JSON's predict.batch1_graphs:
replicad with graphs against PyTorch with host tensors, as replicad's are).
Dynamic batching: benchmarks/perf_analyzer_bench.py against `replicad serve` with resnet50 on
one GPU slot, batch-1 requests at concurrency 16 over gRPC, batching off and on (the JSON's
batching_gain: throughput on over off); perf_analyzer is the bundle's bin/perf_analyzer or
.venv-triton's.
--sections runs some of these (predict, train, slots, graphs, precision, int8, fp16_train,
batching); the report and the JSON are written again after each section, so a run cut short
keeps what it measured, and --merge keeps the figures of the sections not run from the JSON
already at --json (a run split over a lent machine's 10-minute calls).
Every engine runs --warmup untimed and --iterations timed passes; the table gives medians and
the ratio replicad/PyTorch (below 1.0: replicad faster). resnet50 comes from torchvision with
weights=None (seed 0), exported at opset 13 with a dynamic batch.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
sys.path.insert(0, os.path.join(ROOT, "tests", "parity"))

import torch  # noqa: E402
import torchvision  # noqa: E402

from bench_report import git_commit  # noqa: E402
import gpu_summary  # noqa: E402
import export_torch_models as models  # noqa: E402


def log(message):
    print(message, file=sys.stderr, flush=True)


def median_ms(run, warmup, iterations):
    for _ in range(warmup):
        run()
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def replicad_ms(bench, key, argv_tail, args):
    """Median ms of `key` in the json line of a replicad benchmark binary, or (None, error)."""
    argv = [bench, "--json", "--iterations", str(args.iterations),
            "--warmup", str(args.warmup)] + argv_tail
    env = dict(os.environ)
    # scripts/gpu-check.sh: the bundled libraries are for replicad's process only.
    if os.environ.get("REPLICAD_BENCH_LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = os.environ["REPLICAD_BENCH_LD_LIBRARY_PATH"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=args.run_timeout,
                              env=env)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {args.run_timeout} s"
    log(f"  {key}: rc {proc.returncode}")
    if proc.returncode != 0:
        log(proc.stderr[-2000:])
        return None, (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1][:200]
    for line in proc.stdout.splitlines():
        if line.startswith("json: "):
            timing = json.loads(line[len("json: "):]).get(key)
            if timing:
                log(f"  {key}: median {timing['median_ms']:.2f} ms")
                return timing["median_ms"], None
    return None, f"no {key} timing in the output"


def torch_inference_ms(module, batch, tf32, on_device, args):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    host = torch.randn(batch, 3, 224, 224)
    resident = host.cuda()

    def run():
        with torch.inference_mode():
            x = resident if on_device else host.cuda()
            out = module(x)
            if on_device:
                torch.cuda.synchronize()
            else:
                out.cpu()
    return median_ms(run, args.warmup, args.iterations)


def export_resnet50_training(path):
    """resnet50 (weights=None, seed 0) at opset 13 in training mode (BatchNormalization with
    batch statistics), dynamic batch: the model both engines' training steps run."""
    torch.manual_seed(0)
    module = torchvision.models.resnet50(weights=None).train()
    torch.onnx.export(module, torch.randn(2, 3, 224, 224), path, opset_version=13,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      **models.TORCHSCRIPT_EXPORTER)


def torch_train_step(batch, tf32):
    """PyTorch's SGD step (momentum 0.9, cross-entropy) on resnet50, synchronised."""
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(0)
    module = torchvision.models.resnet50(weights=None).cuda().train()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224).cuda()
    y = torch.randint(0, 1000, (batch,)).cuda()

    def run():
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(module(x), y)
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
    return run


def torch_train_step_ms(batch, tf32, args):
    return median_ms(torch_train_step(batch, tf32), args.warmup, args.iterations)


def torch_amp_train_step(batch):
    """PyTorch's mixed-precision SGD step (torch.autocast float16 and GradScaler, as the AMP
    recipe writes it), TF32 off, synchronised."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    module = torchvision.models.resnet50(weights=None).cuda().train()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.cuda.amp.GradScaler()
    x = torch.randn(batch, 3, 224, 224).cuda()
    y = torch.randint(0, 1000, (batch,)).cuda()

    def run():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(module(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        torch.cuda.synchronize()
    return run


def fp16_train_step(train_bench, train_path, args):
    """replicad's fp16 TrainStep (one slot, precision fp16: products from float16-rounded
    operands, dynamic loss scaling) next to PyTorch's AMP step: the table's rows and the JSON
    case (train_step.fp16)."""
    log(f"PyTorch AMP training step, batch {args.train_batch}")
    peer = median_ms(torch_amp_train_step(args.train_batch), args.warmup, args.iterations)
    log(f"replicad training step, precision fp16, batch {args.train_batch}")
    ms, error = replicad_ms(train_bench, "train_step",
                            ["--model", train_path, "--device", args.device, "--slots", "1",
                             "--batch", str(args.train_batch), "--precision", "fp16"], args)
    rows = [("engine", "median ms per step", "images/s", "replicad/PyTorch"),
            ("PyTorch AMP (autocast float16, GradScaler)", f"{peer:.1f}",
             f"{args.train_batch / peer * 1000:.0f}", ""),
            ("replicad TrainStep, precision fp16, 1 slot",
             f"{ms:.1f}" if ms else f"failed: {error}",
             f"{args.train_batch / ms * 1000:.0f}" if ms else "", f"{ms / peer:.2f}" if ms else "")]
    # Close to like for like: both run the products on float16 tensor cores; replicad's
    # activations between them stay float32 (more memory traffic), and its operands are
    # rounded by Cast kernels of their own. A step skipped for overflow is shorter on both
    # sides (no update).
    return rows, gpu_summary.case(
        peer, ms, replicad_case="precision fp16, 1 slot, TF32 off: float16 tensor-core "
        "products of rounded operands, float32 activations",
        pytorch_case="torch.autocast(float16) + GradScaler")


def slots_per_gpu(bench, path, args):
    """Predict on 1, 2 and 4 slots of one GPU at each of --slot-batches: the table's rows."""
    rows = [("slots", "batch", "median ms", "images/s")]
    for batch in (int(b) for b in args.slot_batches.split(",")):
        for slots in (1, 2, 4):
            log(f"replicad inference, {slots} slot(s) of {args.device}, batch {batch}")
            ms, error = replicad_ms(bench, "predict",
                                    ["--model", path, "--device", args.device, "--slots",
                                     str(slots), "--batch", str(batch)], args)
            rows.append((str(slots), str(batch), f"{ms:.2f}" if ms else f"failed: {error}",
                         f"{batch / ms * 1000:.0f}" if ms else ""))
    return rows


def torch_autocast_ms(module, batch, dtype, args):
    """PyTorch under torch.autocast(dtype) with its input on the GPU (the issue's bar)."""
    resident = torch.randn(batch, 3, 224, 224).cuda()

    def run():
        with torch.inference_mode(), torch.autocast("cuda", dtype=dtype):
            module(resident)
            torch.cuda.synchronize()
    return median_ms(run, args.warmup, args.iterations)


def reduced_precision(bench, path, module, args):
    """--precision fp16 and bf16 Predict (host tensors in and out, one slot) next to PyTorch's
    autocast with its input on the GPU, batch --batch: the table's rows and the JSON cases."""
    rows = [("precision", "PyTorch autocast ms (input on GPU)", "replicad ms (host in/out)",
             "replicad/PyTorch")]
    cases = {}
    for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        log(f"PyTorch autocast {name}, batch {args.batch}")
        peer = torch_autocast_ms(module, args.batch, dtype, args)
        log(f"replicad --precision {name}, batch {args.batch}")
        ms, error = replicad_ms(bench, "predict",
                                ["--model", path, "--device", args.device, "--slots", "1",
                                 "--batch", str(args.batch), "--precision", name], args)
        rows.append((name, f"{peer:.1f}", f"{ms:.1f}" if ms else f"failed: {error}",
                     f"{ms / peer:.2f}" if ms else ""))
        cases[name] = gpu_summary.case(peer, ms, replicad_case=f"batch {args.batch}, 1 slot, "
                                       f"--precision {name}, host tensors in and out",
                                       pytorch_case=f"torch.autocast({name}), input on the GPU")
    return rows, cases


def int8_model(args):
    """resnet18 quantized by quantize_static (QDQ): the bundle's, or int8_bench.py's in the build
    tree; None where neither is there."""
    for path in (os.path.join(args.build_dir, "models", "resnet18_qdq.onnx"),
                 os.path.join(args.build_dir, "bench_models", "resnet18_qdq", "model.onnx")):
        if os.path.exists(path):
            return path
    return None


def int8_inference(bench, workdir, args):
    """resnet18 int8 (QDQ) on one slot next to replicad's and PyTorch's float32 resnet18, batch
    --int8-batch, TF32 off: the table's rows and the JSON case."""
    rows = [("engine", "median ms", "images/s", "vs PyTorch float32")]
    qdq = int8_model(args)
    if qdq is None:
        rows.append(("replicad int8", "skipped: no resnet18_qdq (scripts/gpu-bundle.sh with "
                     ".venv-triton, or benchmarks/int8_bench.py)", "", ""))
        return rows, None
    float_path = os.path.join(workdir, "resnet18.onnx")
    torch.manual_seed(0)
    module = torchvision.models.resnet18(weights=None).eval()
    models.export_onnx(module, [("input", (3, 224, 224))], ["logits"], float_path)
    module = module.cuda()
    log(f"PyTorch resnet18 float32, batch {args.int8_batch}")
    peer = torch_inference_ms(module, args.int8_batch, False, True, args)
    rows.append(("PyTorch float32, input on GPU", f"{peer:.2f}",
                 f"{args.int8_batch / peer * 1000:.0f}", ""))
    int8_ms = None
    for label, path in (("replicad float32", float_path), ("replicad int8 (QDQ)", qdq)):
        log(f"{label}, batch {args.int8_batch}")
        ms, error = replicad_ms(bench, "predict",
                                ["--model", path, "--device", args.device, "--slots", "1",
                                 "--batch", str(args.int8_batch)], args)
        rows.append((label, f"{ms:.2f}" if ms else f"failed: {error}",
                     f"{args.int8_batch / ms * 1000:.0f}" if ms else "",
                     f"{ms / peer:.2f}" if ms else ""))
        if path == qdq:
            int8_ms = ms
    return rows, gpu_summary.case(peer, int8_ms,
                                  replicad_case=f"resnet18 quantize_static QDQ, batch "
                                                f"{args.int8_batch}, 1 slot, host tensors in and out",
                                  pytorch_case="resnet18 float32, input on the GPU")


def batch1_graphs(bench, path, module, args):
    """Batch-1 latency, TF32 off: PyTorch (host tensors in and out, and its input on the GPU)
    against replicad on one slot with and without --cuda-graphs. The table's rows and the
    JSON case (replicad with graphs against PyTorch with host tensors, as replicad's are)."""
    log("PyTorch inference, batch 1")
    host = torch_inference_ms(module, 1, False, False, args)
    resident = torch_inference_ms(module, 1, False, True, args)
    rows = [("engine", "median ms"), ("PyTorch, host in/out", f"{host:.2f}"),
            ("PyTorch, input on GPU", f"{resident:.2f}")]
    graphs_ms = None
    for graphs in (False, True):
        log(f"replicad inference, batch 1, cuda graphs {graphs}")
        ms, error = replicad_ms(bench, "predict",
                                ["--model", path, "--device", args.device, "--slots", "1",
                                 "--batch", "1"] + (["--cuda-graphs"] if graphs else []), args)
        rows.append((f"replicad Predict{', --cuda-graphs' if graphs else ''}",
                     f"{ms:.2f}" if ms else f"failed: {error}"))
        if graphs:
            graphs_ms = ms
    return rows, gpu_summary.case(host, graphs_ms, replicad_case="batch 1, 1 slot, --cuda-graphs",
                                  pytorch_case="batch 1, host tensors in and out",
                                  pytorch_resident_ms=round(resident, 3))


def batching_gain(path, args, workdir):
    """(throughput with dynamic batching over without, table rows) from perf_analyzer_bench.py:
    resnet50 on one GPU slot, batch-1 requests at concurrency 16 over gRPC. (None, rows) where
    it could not run."""
    rows = [("batching", "infer/s", "p50 us", "p99 us", "rows per execution")]
    if args.batching_window_ms <= 0:
        return None, rows + [("skipped", "", "", "", "")]
    bundled = os.path.join(args.build_dir, "bin", "perf_analyzer")
    analyzer = bundled if os.path.exists(bundled) else os.path.join(ROOT, ".venv-triton", "bin",
                                                                     "perf_analyzer")
    out = os.path.join(workdir, "batching.json")
    env = dict(os.environ, REPLICAD_BIN_DIR=os.path.join(args.build_dir, "bin"))
    log("perf_analyzer: resnet50, concurrency 16, batching off and on")
    try:
        proc = subprocess.run(
            [sys.executable, os.path.join(ROOT, "benchmarks", "perf_analyzer_bench.py"),
             "--devices", args.device, "--model", f"resnet50={path}", "--concurrency", "16",
             "--protocol", "grpc", "--batching", "off,on", "--input-data", "zero",
             "--window-ms", str(args.batching_window_ms), "--perf-analyzer", analyzer,
             "--json", out], capture_output=True, text=True, env=env, timeout=args.run_timeout)
    except subprocess.TimeoutExpired:
        return None, rows + [(f"timed out after {args.run_timeout} s", "", "", "", "")]
    log(proc.stdout[-2000:] + proc.stderr[-2000:])
    if proc.returncode != 0 or not os.path.exists(out):
        failure = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
        return None, rows + [(f"failed: {failure[:200]}", "", "", "", "")]
    with open(out, encoding="utf-8") as f:
        result = json.load(f)
    for row in result["rows"]:
        rows.append((row["batching"], f"{row['throughput']:.1f}", str(row["p50"]),
                     str(row["p99"]), f"{row['rows_per_execution']:.2f}"))
    gain = result["gain"].get("grpc 16")
    return (round(gain, 3) if gain else None), rows


def predict_section(bench, path, module, args):
    """resnet50 Predict at --batch, TF32 off and on: replicad's layouts next to PyTorch (host
    tensors in and out, and its input on the GPU). The table's rows and the JSON cases by TF32:
    replicad's fastest layout against PyTorch with its input on the GPU (the issue's bar)."""
    rows = [("engine", "TF32", "slots", "chunks, merge", "median ms", "images/s",
             "replicad/PyTorch")]
    cases = {}
    for tf32 in (False, True):
        log(f"PyTorch inference, tf32={tf32}")
        peer = torch_inference_ms(module, args.batch, tf32, False, args)
        resident = torch_inference_ms(module, args.batch, tf32, True, args)
        rows.append(("PyTorch, host in/out", "on" if tf32 else "off", "—", "—", f"{peer:.1f}",
                     f"{args.batch / peer * 1000:.0f}", ""))
        rows.append(("PyTorch, input on GPU", "on" if tf32 else "off", "—", "—",
                     f"{resident:.1f}", f"{args.batch / resident * 1000:.0f}", ""))
        best = None  # (ms, description)
        for slots, chunks, merge in ((1, 1, "cpu:0"), (1, 4, "cpu:0"), (2, 1, "cpu:0"),
                                     (2, 4, "cpu:0"), (2, 4, args.device)):
            log(f"replicad inference, tf32={tf32}, slots={slots}, chunks={chunks}, "
                f"merge={merge}")
            layout = f"{chunks}, {merge}"
            ms, error = replicad_ms(
                bench, "predict",
                ["--model", path, "--device", args.device, "--slots", str(slots),
                 "--batch", str(args.batch), "--transfer-chunks", str(chunks),
                 "--merge-device", merge] + (["--tf32"] if tf32 else []), args)
            if ms is None:
                rows.append(("replicad Predict", "on" if tf32 else "off", str(slots), layout,
                             f"failed: {error}", "", ""))
                continue
            rows.append(("replicad Predict", "on" if tf32 else "off", str(slots), layout,
                         f"{ms:.1f}", f"{args.batch / ms * 1000:.0f}", f"{ms / peer:.2f}"))
            if best is None or ms < best[0]:
                best = (ms, f"batch {args.batch}, host tensors in and out, {slots} slot(s), "
                            f"{chunks} chunk(s), merge on {merge}")
        cases[tf32] = gpu_summary.case(
            resident, best[0] if best else None, replicad_case=best[1] if best else None,
            pytorch_case=f"batch {args.batch}, input already on the GPU")
    return rows, cases


def train_section(train_bench, train_path, args):
    """resnet50's training step at --train-batch, TF32 off and on: replicad on 1 and 2 slots
    (one slot also with --no-cudnn-deterministic and --no-prefetch) next to PyTorch's SGD
    step. The table's rows and the JSON cases by TF32 (the one-slot step)."""
    rows = [("engine", "TF32", "slots", "median ms per step", "images/s", "replicad/PyTorch")]
    cases = {}
    for tf32 in (False, True):
        log(f"PyTorch training step, tf32={tf32}")
        peer = torch_train_step_ms(args.train_batch, tf32, args)
        rows.append(("PyTorch SGD step", "on" if tf32 else "off", "—", f"{peer:.1f}",
                     f"{args.train_batch / peer * 1000:.0f}", ""))
        for slots in (1, 2):
            log(f"replicad training step, tf32={tf32}, slots={slots}")
            ms, error = replicad_ms(
                train_bench, "train_step",
                ["--model", train_path, "--device", args.device, "--slots", str(slots),
                 "--batch", str(args.train_batch)] + (["--tf32"] if tf32 else []), args)
            if ms is None:
                rows.append(("replicad TrainStep", "on" if tf32 else "off", str(slots),
                             f"failed: {error}", "", ""))
                continue
            rows.append(("replicad TrainStep", "on" if tf32 else "off", str(slots), f"{ms:.1f}",
                         f"{args.train_batch / ms * 1000:.0f}", f"{ms / peer:.2f}"))
            if slots == 1:
                # Beside the default: cuDNN's fastest algorithms, as PyTorch's; and each
                # step uploading its own input (the default posts the next batch, uploaded
                # while a step computes, as TrainSteps does for a streaming client).
                variant_ms = {}
                for flag, label in (("--no-cudnn-deterministic",
                                     "replicad TrainStep, non-deterministic cuDNN"),
                                    ("--no-prefetch",
                                     "replicad TrainStep, input uploaded in the step")):
                    log(f"replicad training step, tf32={tf32}, 1 slot, {flag}")
                    variant, error = replicad_ms(
                        train_bench, "train_step",
                        ["--model", train_path, "--device", args.device, "--slots", "1",
                         "--batch", str(args.train_batch), flag] +
                        (["--tf32"] if tf32 else []), args)
                    variant_ms[flag] = variant
                    rows.append((label, "on" if tf32 else "off", "1",
                                 f"{variant:.1f}" if variant else f"failed: {error}",
                                 f"{args.train_batch / variant * 1000:.0f}" if variant else "",
                                 f"{variant / peer:.2f}" if variant else ""))
                fastest = variant_ms["--no-cudnn-deterministic"]
                unhidden = variant_ms["--no-prefetch"]
                cases[tf32] = gpu_summary.case(
                    peer, ms,
                    replicad_case=f"batch {args.train_batch}, 1 slot, deterministic, next batch "
                                  "uploaded during the step",
                    pytorch_case=f"batch {args.train_batch}, SGD momentum 0.9, cudnn.benchmark",
                    non_deterministic_replicad_ms=round(fastest, 3) if fastest else None,
                    upload_in_step_replicad_ms=round(unhidden, 3) if unhidden else None)
        cases.setdefault(tf32, None)
    return rows, cases


# The sections in the order they run; --sections picks some, so that a lent machine's
# 10-minute calls can take them a few at a time.
SECTIONS = ("predict", "train", "slots", "graphs", "precision", "int8", "fp16_train", "batching")


def figures_of(path):
    """The figures of a gpu_summary document, keyed as main() keeps them."""
    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    predict, train = document.get("predict", {}), document.get("train_step", {})
    return {"predict": {True: predict.get("tf32_on"), False: predict.get("tf32_off")},
            "train": {True: train.get("tf32_on"), False: train.get("tf32_off")},
            "graphs": predict.get("batch1_graphs"),
            "precision": {"fp16": predict.get("fp16"), "bf16": predict.get("bf16")},
            "int8": predict.get("int8"), "fp16_train": train.get("fp16"),
            "gain": document.get("batching_gain")}


def table(rows):
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--train-batch", type=int, default=128)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--output", help="also write the report (markdown) here")
    parser.add_argument("--json", default=os.path.join(ROOT, "benchmarks", "results",
                                                        "gpu-latest.json"),
                        help="the figures as JSON (gpu_summary.py's shape)")
    parser.add_argument("--run-timeout", type=int, default=1200,
                        help="seconds one replicad benchmark run may take before it counts as failed")
    parser.add_argument("--slot-batches", default="1,8,64",
                        help="batches of the slots-per-GPU sweep (1, 2 and 4 slots of one GPU)")
    parser.add_argument("--int8-batch", type=int, default=64,
                        help="batch of the int8 resnet18 comparison")
    parser.add_argument("--batching-window-ms", type=int, default=4000,
                        help="perf_analyzer's window for the batching gain; 0 skips it")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help="which to run, in this order: " + ", ".join(SECTIONS) +
                             ". The report and the JSON are written again after each one, so a "
                             "run cut short keeps what it measured")
    parser.add_argument("--merge", action="store_true",
                        help="keep the figures of the sections not run from the JSON already "
                             "at --json (a run split over several calls)")
    args = parser.parse_args(argv)
    sections = [name for name in args.sections.split(",") if name]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        log(f"compare_gpu: --sections: unknown {', '.join(unknown)}; expected some of "
            f"{', '.join(SECTIONS)}")
        return 2
    if not torch.cuda.is_available():
        log("compare_gpu: PyTorch sees no CUDA device; this benchmark needs a GPU")
        return 2
    bench = os.path.join(args.build_dir, "benchmarks", "model_forward_bench")
    train_bench = os.path.join(args.build_dir, "benchmarks", "train_step_bench")

    workdir = tempfile.mkdtemp(prefix="replicad-gpu-bench-")
    path = os.path.join(workdir, "resnet50.onnx")
    torch.manual_seed(0)
    module = torchvision.models.resnet50(weights=None).eval()
    models.export_onnx(module, [("input", (3, 224, 224))], ["logits"], path)
    module = module.cuda()
    torch.backends.cudnn.benchmark = True
    train_path = os.path.join(workdir, "resnet50_train.onnx")
    if "train" in sections or "fp16_train" in sections:
        export_resnet50_training(train_path)

    header = (f"resnet50 on {torch.cuda.get_device_name(0)}, "
              f"{datetime.date.today().isoformat()}, commit {git_commit()}, "
              f"PyTorch {torch.__version__}; {args.iterations} timed passes after {args.warmup}; "
              f"sections {', '.join(sections)}.")
    blocks = []
    figures = {"predict": {True: None, False: None}, "train": {True: None, False: None},
               "graphs": None, "precision": {}, "int8": None, "fp16_train": None, "gain": None}
    if args.merge and os.path.exists(args.json):
        figures.update(figures_of(args.json))

    def emit():
        """The report and the JSON of every section run so far (the others null)."""
        report = "\n".join([header, ""] + blocks)
        if args.output:
            with open(args.output, "w") as f:
                f.write(report)
        document = gpu_summary.summary(
            datetime.date.today().isoformat(), torch.cuda.get_device_name(0), git_commit(),
            figures["train"], figures["predict"], batch1_graphs=figures["graphs"],
            batching_gain=figures["gain"], reduced_precision=figures["precision"],
            train_fp16=figures["fp16_train"], int8=figures["int8"])
        gpu_summary.write(document, args.json)

    # Each section: what measures it (its table's rows and its figure for the JSON, or None),
    # the figure's key in `figures`, and its title.
    runs = {
        "predict": (lambda: predict_section(bench, path, module, args), "predict",
                    f"Inference, batch {args.batch}:"),
        "train": (lambda: train_section(train_bench, train_path, args), "train",
                  f"Training step, batch {args.train_batch}:"),
        "slots": (lambda: (slots_per_gpu(bench, path, args), None), None,
                  "Slots of one GPU (TF32 off, host tensors in and out):"),
        "graphs": (lambda: batch1_graphs(bench, path, module, args), "graphs",
                   "Batch 1, one slot, TF32 off (CUDA graphs):"),
        "precision": (lambda: reduced_precision(bench, path, module, args), "precision",
                      f"Reduced precision, batch {args.batch}, one slot:"),
        "int8": (lambda: int8_inference(bench, workdir, args), "int8",
                 f"int8, resnet18, batch {args.int8_batch}, one slot, TF32 off:"),
        "fp16_train": (lambda: fp16_train_step(train_bench, train_path, args), "fp16_train",
                       f"fp16 training step, batch {args.train_batch}, TF32 off:"),
        "batching": (lambda: tuple(reversed(batching_gain(path, args, workdir))), "gain",
                     "Dynamic batching, resnet50 on one GPU slot, batch-1 requests over gRPC "
                     "(perf_analyzer, concurrency 16):"),
    }
    print(header)
    for name in sections:
        measure, key, title = runs[name]
        rows, figure = measure()
        if key is not None:
            figures[key] = figure
        block = "\n".join([title, "", table(rows), ""])
        blocks.append(block)
        print(block, flush=True)
        emit()
    log(f"compare_gpu: figures in {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
