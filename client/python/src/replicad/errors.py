"""Exceptions for what the server (or the channel) answered: one class per gRPC status code,
each carrying the code and the server's message unchanged."""

import grpc


class ReplicadError(Exception):
    """A call that did not succeed. `code` is the grpc.StatusCode, `message` the server's text,
    `call` the RPC's name ("TrainStep"). `fit` adds `step`: the steps of that fit applied."""

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, message, call=None, step=None):
        super().__init__(message)
        self.message = message
        self.call = call
        self.step = step


class Cancelled(ReplicadError):
    code = grpc.StatusCode.CANCELLED


class Unknown(ReplicadError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(ReplicadError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(ReplicadError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(ReplicadError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(ReplicadError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(ReplicadError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(ReplicadError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(ReplicadError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(ReplicadError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(ReplicadError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(ReplicadError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(ReplicadError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(ReplicadError):
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(ReplicadError):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(ReplicadError):
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE = {cls.code: cls for cls in ReplicadError.__subclasses__()}


def from_rpc_error(error, call):
    """The exception for a grpc.RpcError raised by `call`; the message is the server's."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    return error_for(code, details or f"{call} failed ({code.name})", call)


def error_for(code, message, call=None, step=None):
    return _BY_CODE.get(code, Unknown)(message, call=call, step=step)
