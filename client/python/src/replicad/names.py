"""The names the client accepts for the training configuration's enums."""

from replicad.v1 import replicad_pb2 as pb

OPTIMIZERS = {"sgd": pb.OPTIMIZER_SGD, "adam": pb.OPTIMIZER_ADAM, "rmsprop": pb.OPTIMIZER_RMSPROP}
LOSSES = {"softmax_cross_entropy": pb.LOSS_SOFTMAX_CROSS_ENTROPY,
          "sparse_categorical_crossentropy": pb.LOSS_SOFTMAX_CROSS_ENTROPY,
          "categorical_crossentropy": pb.LOSS_SOFTMAX_CROSS_ENTROPY,
          "mean_squared_error": pb.LOSS_MEAN_SQUARED_ERROR, "mse": pb.LOSS_MEAN_SQUARED_ERROR}
REDUCTIONS = {"allreduce": pb.GRADIENT_REDUCTION_ALLREDUCE, "ps": pb.GRADIENT_REDUCTION_PS}
NON_FINITE = {"refuse": pb.NON_FINITE_STEPS_REFUSE, "skip": pb.NON_FINITE_STEPS_SKIP}


def choice(table, value, field):
    try:
        return table[value.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"{field}: expected one of {', '.join(sorted(table))}, "
                         f"received {value!r}") from None
