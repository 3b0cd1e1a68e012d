"""What the client returns: plain, immutable records of the server's answers."""

from dataclasses import dataclass
from typing import Optional, Tuple

from replicad.tensors import dtype_name


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # "float32", "int64", "int32", "int8", "uint8" or "bool"
    shape: Tuple[Optional[int], ...]  # None: not fixed (the batch dimension)

    @staticmethod
    def of(spec):
        return TensorSpec(spec.name, dtype_name(spec.dtype),
                          tuple(None if d < 0 else int(d) for d in spec.shape))


@dataclass(frozen=True)
class Slot:
    name: str  # "r0"
    device: str  # "cpu:0", "cuda:1"
    weight: float  # Its relative share of each batch.
    healthy: bool
    fault: str  # Why it is not healthy.


@dataclass(frozen=True)
class ModelInfo:
    name: str
    path: str  # "<embedded>" for the default model.
    opset: int
    inputs: Tuple[TensorSpec, ...]
    outputs: Tuple[TensorSpec, ...]
    slots: Tuple[Slot, ...]
    merge_device: str
    max_batch_size: Optional[int]  # None: no limit.
    ready: bool  # At least one slot can serve it.
    precision: str = "fp32"  # What its products compute in: "fp32", "bf16" or "tf32" (--precision).

    @staticmethod
    def of(info):
        return ModelInfo(
            info.name, info.path, int(info.opset),
            tuple(TensorSpec.of(s) for s in info.inputs),
            tuple(TensorSpec.of(s) for s in info.outputs),
            tuple(Slot(r.slot, r.device, r.weight, r.healthy, r.fault) for r in info.replicas),
            info.merge_device, int(info.max_batch_size) or None, info.ready,
            info.precision or "fp32")


@dataclass(frozen=True)
class ModelSummary:
    name: str
    path: str


@dataclass(frozen=True)
class Device:
    id: str  # "cpu:0", "cuda:1"
    kind: str  # "cpu" or "cuda"
    name: str
    memory_bytes: int
    slots: int  # Replica slots placed on it.
    compute_capability: str  # CUDA only.
    driver_version: str  # CUDA only.
    runtime_version: str  # CUDA only.


@dataclass(frozen=True)
class SliceStep:
    slot: str
    device: str
    begin: int  # First row of the batch it trained.
    end: int  # One past its last.
    compute_seconds: float
    rank: int = 0  # The training job's rank whose slot this is (0 when the daemon trains alone).
    # Its rows were uploaded to the slot's GPU while the step before computed (a TrainSteps
    # stream's next step: train_steps, fit(stream=True)); CPU slots read in place: False.
    input_prefetched: bool = False


@dataclass(frozen=True)
class StepResult:
    loss: float  # Sample-weighted mean over the batch.
    accuracy: Optional[float]  # Classification losses only.
    step: int  # Steps the server has applied, this one included.
    samples: int
    skipped: Optional[str]  # Why the step was skipped (non_finite_steps="skip"); None: applied.
    checkpoint_path: Optional[str]  # A periodic checkpoint this step wrote.
    checkpoint_error: Optional[str]  # Why writing it failed (the step was applied).
    slices: Tuple[SliceStep, ...]
    # precision="fp16": the loss scale this step's gradients were computed with; None otherwise.
    loss_scale: Optional[float] = None

    @staticmethod
    def of(r):
        return StepResult(r.loss, r.accuracy if r.has_accuracy else None, int(r.step),
                          int(r.samples), r.skipped or None, r.checkpoint_path or None,
                          r.checkpoint_error or None,
                          tuple(SliceStep(s.slot, s.device, int(s.begin), int(s.end),
                                          s.compute_seconds, int(s.rank), bool(s.input_prefetched))
                                for s in r.replicas),
                          r.loss_scale or None)


@dataclass(frozen=True)
class Training:
    config: object  # replicad.v1.TrainingConfig as the server applied it, defaults filled in.
    step: int  # Steps applied so far.


@dataclass(frozen=True)
class Checkpoint:
    path: str  # Where the server wrote it.
    step: int
