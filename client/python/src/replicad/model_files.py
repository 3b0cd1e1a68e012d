"""Models as ONNX files between the client and the server: what load_model sends (a PyTorch
module exported for training, an onnx.ModelProto, bytes or a file), the instance groups of its
configuration, and copying the weights a server trained back into a PyTorch module.

torch and onnx are imported only by the calls that need them: the client works without them.
"""

import inspect
import io
import json
import os
import sys
import warnings

import numpy as np

# The file of an uploaded model in its model directory (VERSION/FILE, Triton's layout).
UPLOAD_FILE = "1/model.onnx"
# metadata_props key of the map {state_dict key: initializer name, or null when the export
# left it out} that export_module writes, so that load_weights_into finds every tensor even
# where the exporter renamed or dropped one (tied weights, unused parameters).
STATE_DICT_MAP = "replicad.state_dict"
OPSET = 17


def _torch_module_type():
    torch = sys.modules.get("torch")  # A module exists only once torch has been imported.
    return torch.nn.Module if torch is not None else None


def _onnx_model_type():
    onnx = sys.modules.get("onnx")
    return onnx.ModelProto if onnx is not None else None


def model_bytes(model, example_inputs=None, input_names=None, output_names=None):
    """The ONNX file load_model sends for `model`: a torch.nn.Module (exported by
    export_module), an onnx.ModelProto, bytes, or the path of an .onnx file."""
    module_type, proto_type = _torch_module_type(), _onnx_model_type()
    if module_type is not None and isinstance(model, module_type):
        return export_module(model, example_inputs, input_names=input_names,
                             output_names=output_names)
    for argument, value in (("example_inputs", example_inputs), ("input_names", input_names),
                            ("output_names", output_names)):
        if value is not None:
            raise ValueError(f"{argument}: only for a torch.nn.Module (model is a "
                             f"{type(model).__name__})")
    if proto_type is not None and isinstance(model, proto_type):
        return model.SerializeToString()
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    if isinstance(model, (str, os.PathLike)):
        try:
            with open(model, "rb") as f:
                return f.read()
        except OSError as e:
            raise FileNotFoundError(f"model {os.fspath(model)}: {e.strerror}") from None
    raise TypeError("model: expected a torch.nn.Module, an onnx.ModelProto, bytes or the path "
                    f"of an .onnx file, received {type(model).__name__}")


def _tensors_of(value):
    """The tensors of a module's output in the order torch.onnx flattens them."""
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors_of(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors_of(item)]
    return [value] if hasattr(value, "shape") else []


def _input_names(module, count):
    """forward's parameter names for `count` inputs ("input_0", ... where it takes *args)."""
    try:
        parameters = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    positional = [p.name for p in parameters
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= count:
        return positional[:count]
    return [f"input_{i}" for i in range(count)]


def export_module(module, example_inputs, *, input_names=None, output_names=None, opset=OPSET):
    """`module` as ONNX bytes that the server can serve and train.

    torch.onnx.export in training mode (TrainingMode.TRAINING, no constant folding, so
    BatchNormalization and Dropout keep their training form and every parameter stays an
    initializer named by its state_dict key), opset 17, with a dynamic batch axis (dim 0,
    "batch") on every input and output. example_inputs: a tensor or array, or a tuple of them,
    one per forward argument (any batch size). Inputs are named after forward's parameters,
    outputs "output" (one) or "output_0", "output_1", ... unless names are given.

    The module is left as it was: exporting runs it once in training mode, which moves
    BatchNorm's running statistics; they are put back, and the file holds the module's own.
    """
    import torch  # pylint: disable=import-outside-toplevel
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import numpy_helper  # pylint: disable=import-outside-toplevel

    if example_inputs is None:
        raise ValueError("example_inputs: required to export a torch.nn.Module (a tensor, or "
                         "a tuple of tensors, one per forward argument, of any batch size)")
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) \
        else (example_inputs,)
    args = tuple(a if isinstance(a, torch.Tensor) else torch.as_tensor(a) for a in args)
    input_names = list(input_names) if input_names is not None \
        else _input_names(module, len(args))
    if len(input_names) != len(args):
        raise ValueError(f"input_names: {len(input_names)} names for {len(args)} inputs")

    state = module.state_dict()
    saved = {key: value.detach().clone() for key, value in state.items()}
    modes = [(m, m.training) for m in module.modules()]  # Each submodule's own mode.
    devices = sorted({t.device.index or 0 for t in saved.values() if t.device.type == "cuda"})
    buffer = io.BytesIO()
    try:
        with torch.random.fork_rng(devices=devices):
            if output_names is None:
                module.eval()
                with torch.no_grad():
                    count = len(_tensors_of(module(*args)))
                output_names = ["output"] if count == 1 else [f"output_{i}" for i in range(count)]
            output_names = list(output_names)
            with warnings.catch_warnings():
                # Expected here, once per BatchNorm: num_batches_tracked is not exported.
                warnings.filterwarnings("ignore", message=".*Removing mutation from node")
                torch.onnx.export(
                    module, args, buffer, export_params=True, opset_version=opset,
                    training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                    input_names=input_names, output_names=output_names,
                    dynamic_axes={name: {0: "batch"} for name in input_names + output_names})
        exported = {key: value.detach().clone() for key, value in module.state_dict().items()}
    finally:
        with torch.no_grad():
            for key, value in module.state_dict().items():
                value.copy_(saved[key])
        for submodule, training in modes:
            submodule.training = training

    model = onnx.load_from_string(buffer.getvalue())
    initializers = {i.name: i for i in model.graph.initializer}
    names = {}
    by_storage = {}
    for key, value in saved.items():
        if value.numel() and key in initializers:
            by_storage.setdefault(_storage(state[key]), key)
    unclaimed = [i for name, i in initializers.items() if name not in saved]
    for key, value in saved.items():
        if key in initializers:
            names[key] = key
            if not torch.equal(exported[key], value):  # Moved by the export's forward pass.
                initializers[key].CopyFrom(numpy_helper.from_array(value.cpu().numpy(), key))
            continue
        alias = by_storage.get(_storage(state[key])) if value.numel() else None
        if alias is not None:  # A tied weight: one initializer for both keys.
            names[key] = alias
            continue
        # A parameter the exporter renamed ("onnx::MatMul_12"): the one initializer of its
        # bytes, shape and type among those named after no key.
        candidates = [i for i in unclaimed
                      if value.numel() and tuple(i.dims) == tuple(value.shape)
                      and _same_values(numpy_helper.to_array(i), exported[key])]
        names[key] = candidates[0].name if len(candidates) == 1 else None
        if names[key] is not None:
            unclaimed.remove(candidates[0])
    entry = model.metadata_props.add()
    entry.key, entry.value = STATE_DICT_MAP, json.dumps(names)
    return model.SerializeToString()


def _storage(tensor):
    """What two state_dict entries of one tied tensor share."""
    return tensor.device, tensor.data_ptr(), tuple(tensor.shape), tensor.dtype


def _same_values(array, tensor):
    try:
        return array.dtype == tensor.cpu().numpy().dtype and \
            (array == tensor.cpu().numpy()).all()
    except TypeError:  # bfloat16 tensors have no numpy type.
        return False


def instance_groups(instances):
    """load_model's `instances` as the instance_group of a Triton model configuration.

    An int n: [{"count": n, "kind": "KIND_AUTO"}], Triton's meaning: n slots on each GPU, or
    n CPU slots on a machine without one. A list: one slot per entry, "cpu" (a CPU slot; the
    server tiles them over the cores), "cuda:N" or "gpu:N" (on GPU N), "cuda" or "gpu" (on
    every GPU), or a dict taken as one instance_group entry as it is; equal entries add up to
    one group's count.
    """
    if isinstance(instances, bool) or not isinstance(instances, (int, list, tuple)):
        raise TypeError(f"instances: expected an int or a list of devices, received "
                        f"{type(instances).__name__}")
    if isinstance(instances, int):
        if instances < 1:
            raise ValueError(f"instances: expected >= 1 slots, received {instances}")
        return [{"count": instances, "kind": "KIND_AUTO"}]
    if not instances:
        raise ValueError("instances: expected at least one device, received an empty list")
    groups = []
    counted = {}  # (kind, gpu) -> its group
    for i, entry in enumerate(instances):
        if isinstance(entry, dict):
            groups.append(dict(entry))
            continue
        if not isinstance(entry, str):
            raise TypeError(f"instances[{i}]: expected a device ('cpu', 'cuda:0') or a dict, "
                            f"received {type(entry).__name__}")
        device = entry.strip().lower()
        kind, _, ordinal = device.partition(":")
        if kind == "cpu" and not ordinal:
            key, group = ("cpu", None), {"kind": "KIND_CPU"}
        elif kind in ("cuda", "gpu") and (not ordinal or ordinal.isdigit()):
            gpus = [int(ordinal)] if ordinal else []
            key, group = ("gpu", gpus[0] if gpus else None), {"kind": "KIND_GPU", "gpus": gpus}
        elif kind == "cpu":
            raise ValueError(f"instances[{i}]: '{entry}': a CPU slot is 'cpu' (instance groups "
                             "place CPU slots over the cores themselves)")
        else:
            raise ValueError(f"instances[{i}]: expected 'cpu', 'cuda', 'cuda:N' or a dict, "
                             f"received '{entry}'")
        if key in counted:
            counted[key]["count"] += 1
        else:
            group = {"count": 1, **group}
            if not group.get("gpus", True):
                del group["gpus"]
            counted[key] = group
            groups.append(group)
    return groups


def config_json(config, instances):
    """LoadModelRequest.config: `config` (a dict of inference.ModelConfig's JSON fields, its
    JSON text, or None) with `instances` as its instance_group; "" when there is neither."""
    if isinstance(config, str):
        try:
            config = json.loads(config) if config.strip() else None
        except ValueError as e:
            raise ValueError(f"config: not JSON: {e}") from None
    if config is not None and not isinstance(config, dict):
        raise TypeError(f"config: expected a dict of ModelConfig fields (or its JSON), "
                        f"received {type(config).__name__}")
    if instances is not None:
        config = dict(config or {})
        if "instance_group" in config or "instanceGroup" in config:
            raise ValueError("instances: config sets instance_group already; pass one of them")
        config["instance_group"] = instance_groups(instances)
    return json.dumps(config) if config else ""


def load_state_into(model, module, name="the model"):
    """Copies `model`'s (an onnx.ModelProto) initializers into `module`'s state_dict entries
    of the same names (through the map export_module wrote, when the file has it), in place.
    Checks everything first: a key with no initializer, or another shape or dtype, raises
    ValueError naming each, and changes nothing. BatchNorm's num_batches_tracked (which no
    exported file holds), weights tied to another key, and keys the export left out are kept
    as they are. Returns the keys copied."""
    import torch  # pylint: disable=import-outside-toplevel
    from onnx import numpy_helper  # pylint: disable=import-outside-toplevel

    initializers = {i.name: i for i in model.graph.initializer}
    names = {}
    for entry in model.metadata_props:
        if entry.key == STATE_DICT_MAP:
            try:
                names = json.loads(entry.value)
            except ValueError:
                names = {}
    state = module.state_dict()
    found = {}  # key -> the initializer's array
    problems = []
    pending = []  # Keys with no initializer of their own: tied weights, or refused.
    for key, target in state.items():
        if key in names and names[key] is None:
            continue  # The export left it out: nothing in the model computes with it.
        initializer = initializers.get(names.get(key, key))
        if initializer is None:
            pending.append(key)
            continue
        array = numpy_helper.to_array(initializer)
        try:
            dtype = torch.from_numpy(np.empty(0, array.dtype)).dtype
        except TypeError:
            dtype = None
        if tuple(array.shape) != tuple(target.shape) or dtype != target.dtype:
            problems.append(f"'{key}': {_describe(target.dtype, target.shape)} in the module, "
                            f"{_describe(dtype or array.dtype, array.shape)} in {name} "
                            f"(initializer '{initializer.name}')")
            continue
        found[key] = array
    storage = {_storage(state[k]) for k in found if state[k].numel()}
    for key in pending:
        target = state[key]
        if key.endswith("num_batches_tracked"):
            continue
        if target.numel() and _storage(target) in storage:
            continue  # Tied to a key that is copied.
        problems.append(f"'{key}': not an initializer of {name}")
    if problems:
        shown = "; ".join(problems[:10])
        more = f"; and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise ValueError(f"load_weights_into: the module does not match {name}: {shown}{more} "
                         "(nothing was changed)")
    with torch.no_grad():
        for key, array in found.items():
            state[key].copy_(torch.from_numpy(array.copy()))
    return list(found)


def _describe(dtype, shape):
    return f"{str(dtype).replace('torch.', '')}{list(shape)}"
