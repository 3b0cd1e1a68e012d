"""Python client of replicad: predict, and Keras-style fit and evaluate, against a server.

    import replicad
    with replicad.Client("localhost:8500") as client:
        client.configure_training("default", optimizer="sgd", lr=0.02, momentum=0.9)
        history = client.fit("default", x, y, batch_size=64, epochs=5)
        scores = client.predict("default", x_test)["logits"]
"""

from replicad.callbacks import Callback, EarlyStopping, SaveCheckpoint
from replicad.client import Client
from replicad.epoch_order import epoch_order
from replicad.errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded,
                             FailedPrecondition, Internal, InvalidArgument, NotFound, OutOfRange,
                             PermissionDenied, ReplicadError, ResourceExhausted, Unauthenticated,
                             Unavailable, Unimplemented, Unknown)
from replicad.training import History
from replicad.types import (Checkpoint, Device, ModelInfo, ModelSummary, Slot, SliceStep,
                            StepResult, TensorSpec, Training)

__version__ = "0.1.0"

__all__ = [
    "Client", "History", "Callback", "EarlyStopping", "SaveCheckpoint", "epoch_order",
    "ReplicadError", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
    "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted",
    "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
    "Checkpoint", "Device", "ModelInfo", "ModelSummary", "Slot", "SliceStep", "StepResult",
    "TensorSpec", "Training",
]
