"""Python client of replicad: predict, and Keras-style fit and evaluate, against a server.

    import replicad
    with replicad.Client("localhost:8500") as client:
        client.configure_training("default", optimizer="sgd", lr=0.02, momentum=0.9)
        history = client.fit("default", x, y, batch_size=64, epochs=5)
        scores = client.predict("default", x_test)["logits"]

    # A PyTorch module of your own, trained data-parallel on the server's devices:
    with replicad.parallel(net, devices=["cpu", "cpu"], address="localhost:8500") as pm:
        pm.compile(optimizer="sgd", lr=0.02, momentum=0.9)
        pm.fit(x, y, batch_size=64, epochs=1)
    # net holds the trained weights.
"""

from replicad.callbacks import Callback, EarlyStopping, SaveCheckpoint
from replicad.client import Client
from replicad.epoch_order import epoch_order
from replicad.errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded,
                             FailedPrecondition, Internal, InvalidArgument, NotFound, OutOfRange,
                             PermissionDenied, ReplicadError, ResourceExhausted, Unauthenticated,
                             Unavailable, Unimplemented, Unknown)
from replicad.parallel import ParallelModel, parallel
from replicad.training import History
from replicad.types import (Checkpoint, Device, ModelInfo, ModelSummary, Slot, SliceStep,
                            StepResult, TensorSpec, Training)

__version__ = "0.1.0"

__all__ = [
    "Client", "parallel", "ParallelModel", "History", "Callback", "EarlyStopping", "SaveCheckpoint", "epoch_order",
    "ReplicadError", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
    "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted",
    "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
    "Checkpoint", "Device", "ModelInfo", "ModelSummary", "Slot", "SliceStep", "StepResult",
    "TensorSpec", "Training",
]
