"""replicad.parallel: a PyTorch module trained data-parallel on a replicad server in one line,
as Keras' multi_gpu_model made a model parallel, with the trained weights coming back into it.

    with replicad.parallel(net, devices=["cpu", "cpu"], address="localhost:8500") as pm:
        pm.compile(optimizer="sgd", lr=0.02, momentum=0.9)
        pm.fit(x, y, batch_size=64, epochs=1)
    # net now holds the weights the server trained; the model is unloaded.
"""

import inspect
import os
import uuid

from replicad import errors, model_files
from replicad.client import Client
from replicad.names import LOSSES, NON_FINITE, OPTIMIZERS, REDUCTIONS, choice
from replicad.types import Checkpoint

_EXAMPLE_ROWS = 2  # BatchNorm1d's training form needs 2 rows.


def parallel(model, devices=None, address="localhost:8500", *, example_inputs=None, name=None,
             config=None, client=None, sync_on_exit=True, keep_upload=False, **client_options):
    """`model` (a torch.nn.Module) uploaded to the server at `address` to train and serve on
    `devices`: a ParallelModel whose fit, evaluate and predict run there, and whose sync()
    copies the trained weights back into `model`.

    devices: load_model's `instances`: an int n (n slots on each GPU, or n CPU slots on a
      machine without one), or a list of "cpu", "cuda:N" (torch.device too), one slot each;
      a single device string is a list of one. None: the daemon's slots (its --devices).
    example_inputs: as load_model's (a tensor or a tuple of them, one per forward argument);
      None: the first rows of the data of the first fit, evaluate or predict (an array or
      tensor, a list of them, or the first batch of an iterable of (inputs, targets)), and
      the upload waits until then.
    name: the model's name on the server (None: "<class name>-<8 hex digits>", new each call);
      as load_model, the upload replaces a model of that name, and close() unloads it.
    config: Triton model configuration fields, as load_model's.
    client: a replicad.Client to use (left open by close()); else one is made from address
      and client_options (tls_ca, token, timeout, ...) and closed by close().
    sync_on_exit: leaving a `with` block without an exception syncs the weights into `model`
      before the model is unloaded.
    keep_upload: close() leaves the model's files under the server's --model-upload-root
      (by default it removes them with the model: UnloadModel's remove_upload).
    The server must have been started with --model-upload-root DIR --model-control-mode
    explicit (FailedPrecondition otherwise); role admin under --auth-tokens.
    """
    if client is not None and client_options:
        raise ValueError(f"{', '.join(sorted(client_options))}: options of a new client; "
                         "client= is given: pass them to that client instead")
    return ParallelModel(model, devices, address, example_inputs=example_inputs, name=name,
                         config=config, client=client, sync_on_exit=sync_on_exit,
                         keep_upload=keep_upload, client_options=client_options)


def _instances(devices):
    """`devices` as load_model's instances, checked now (errors name `devices`)."""
    if devices is None:
        return None
    if isinstance(devices, str) or _is_device(devices):
        devices = [devices]
    if isinstance(devices, (list, tuple)):
        devices = [str(d) if _is_device(d) else d for d in devices]
    try:
        model_files.instance_groups(devices)
    except (TypeError, ValueError) as e:
        raise type(e)("devices" + str(e)[len("instances"):]) from None
    return devices


def _is_device(value):
    return type(value).__name__ == "device" and hasattr(value, "type") and \
        hasattr(value, "index")


class ParallelModel:
    """A torch.nn.Module loaded on a replicad server under `name` (see replicad.parallel).

    compile / configure_training set its training (Client.configure_training's arguments);
    fit, evaluate and predict are the Client's for this model; sync() (load_weights_into)
    copies the server's weights into `module`, state_dict() returns them as its state_dict,
    save(path) writes the trained ONNX file here. close() unloads the model; a `with` block
    syncs (sync_on_exit) and closes on leaving it.

    Attributes: module (the torch.nn.Module), name, client, loaded (whether it is on the
    server), training (the Training the server last answered configure_training with).
    """

    def __init__(self, module, devices=None, address="localhost:8500", *, example_inputs=None,
                 name=None, config=None, client=None, sync_on_exit=True, keep_upload=False,
                 client_options=None):
        module_type = _torch_module_type()
        if module_type is None or not isinstance(module, module_type):
            raise TypeError(f"model: expected a torch.nn.Module, received "
                            f"{type(module).__name__} (Client.load_model takes ONNX files)")
        if name is not None and not (isinstance(name, str) and name):
            raise ValueError(f"name: expected a non-empty string or None, received {name!r}")
        self.module = module
        self.name = name or f"{type(module).__name__.lower()}-{uuid.uuid4().hex[:8]}"
        self.sync_on_exit = bool(sync_on_exit)
        self.keep_upload = bool(keep_upload)
        self.training = None
        self.loaded = False
        self._instances = _instances(devices)
        self._config = config
        self._training_options = None  # compile's arguments, until the upload
        self._closed = False
        self._owns_client = client is None
        self.client = client if client is not None else Client(address, **(client_options or {}))
        if example_inputs is not None:
            try:
                self._upload(example_inputs)
            except BaseException:
                if self._owns_client:
                    self.client.close()
                self._closed = True
                raise

    def __repr__(self):
        state = "closed" if self._closed else "loaded" if self.loaded else "not uploaded yet"
        return (f"ParallelModel(name={self.name!r}, module={type(self.module).__name__}, "
                f"address={self.client.address!r}, {state})")

    # ---- On the server ---------------------------------------------------------------------

    def _check_open(self, call):
        if self._closed:
            raise RuntimeError(f"{call}: ParallelModel '{self.name}' is closed (its model was "
                               "unloaded)")

    def _upload(self, example_inputs):
        self.client.load_model(self.name, self.module, example_inputs=example_inputs,
                               config=self._config, instances=self._instances)
        self.loaded = True
        if self._training_options is not None:
            self.training = self.client.configure_training(self.name, **self._training_options)

    def _ensure_loaded(self, call, x):
        self._check_open(call)
        if not self.loaded:
            self._upload(_example_of(self.module, x, call))

    def configure_training(self, **options):
        """Sets the model's training: Client.configure_training's arguments (optimizer, lr,
        momentum, loss, ...). Returns its Training; None before the upload (see
        replicad.parallel's example_inputs), when the options wait for it."""
        self._check_open("configure_training")
        if not self.loaded:
            _check_training_options(options)
            self._training_options = dict(options)
            return None
        self.training = self.client.configure_training(self.name, **options)
        self._training_options = dict(options)
        return self.training

    compile = configure_training

    def fit(self, x, y=None, **options):
        """Trains on the server: Client.fit(name, x, y, ...). Returns a History."""
        self._ensure_loaded("fit", x)
        return self.client.fit(self.name, x, y, **options)

    def evaluate(self, x, y=None, **options):
        """{"loss": ..., "accuracy": ...} through Predict: Client.evaluate(name, x, y, ...)."""
        self._ensure_loaded("evaluate", x)
        return self.client.evaluate(self.name, x, y, **options)

    def predict(self, x, **options):
        """{output name: array} (e.g. "output"): Client.predict(name, x, ...)."""
        self._ensure_loaded("predict", x)
        return self.client.predict(self.name, x, **options)

    # ---- Back here -------------------------------------------------------------------------

    def load_weights_into(self, module=None):
        """Copies the server's current weights (parameters and buffers) into `module` (None:
        the module given to replicad.parallel), in place; returns their training step (0:
        untrained, or not uploaded yet, when nothing is copied). See
        Client.load_weights_into."""
        self._check_open("load_weights_into")
        module = self.module if module is None else module
        if not self.loaded:
            return 0
        return self.client.load_weights_into(self.name, module)

    def sync(self):
        """load_weights_into(module): the module takes the trained weights; returns the step."""
        return self.load_weights_into()

    def state_dict(self):
        """The module's state_dict after sync(): the trained weights, as torch.save takes it."""
        self.sync()
        return self.module.state_dict()

    def save(self, path):
        """Writes the model's ONNX file, with its current weights, to `path` here (not on the
        server: see Client.save_checkpoint). Returns Checkpoint(path, step)."""
        self._check_open("save")
        if not self.loaded:
            raise RuntimeError(
                f"save: model '{self.name}' is not on the server yet: it is uploaded by the "
                "first fit, evaluate or predict, or by replicad.parallel(example_inputs=...)")
        data, step = self.client.download_model(self.name)
        with open(path, "wb") as f:
            f.write(data)
        return Checkpoint(os.fspath(path), step)

    # ---- Closing ---------------------------------------------------------------------------

    def close(self):
        """Unloads the model and removes its files from the server's --model-upload-root
        (unless keep_upload; one unloaded already is no error) and closes the client if
        replicad.parallel made it. Further calls are refused; closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.loaded:
                self.loaded = False
                try:
                    self.client.unload_model(self.name, remove_upload=not self.keep_upload)
                except errors.NotFound:
                    pass  # Unloaded already (by another client, or a restarted server).
        finally:
            if self._owns_client:
                self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, traceback):
        try:
            if exc_type is None and self.sync_on_exit and not self._closed:
                self.sync()
        finally:
            self.close()


def _check_training_options(options):
    """What configure_training would refuse before sending anything: an argument it does not
    take, an unknown optimizer, loss or reduction (checked now when the call waits)."""
    try:
        inspect.signature(Client.configure_training).bind(None, None, **options)
    except TypeError as e:
        raise TypeError(f"configure_training: {e}") from None
    for field, table in (("optimizer", OPTIMIZERS), ("loss", LOSSES),
                         ("reduction", REDUCTIONS), ("non_finite_steps", NON_FINITE)):
        if field in options:
            choice(table, options[field], field)


def _torch_module_type():
    try:
        import torch  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    return torch.nn.Module


def _example_of(module, x, call):
    """Example inputs for the export: the first rows of each input of `x` (an array or tensor,
    a list or tuple of them, or an iterable of (inputs, targets) batches), as tensors on the
    device of the module's first parameter."""
    import torch  # pylint: disable=import-outside-toplevel

    def rows(value):
        if isinstance(value, (list, tuple)):
            return tuple(t for item in value for t in rows(item))
        if isinstance(value, dict):
            raise ValueError(f"{call}: x is a dict of inputs, whose order in forward's arguments "
                             "is not known here: pass example_inputs to replicad.parallel")
        if not hasattr(value, "shape") or not getattr(value, "ndim", 0):
            raise ValueError(f"{call}: cannot take example inputs from a "
                             f"{type(value).__name__}: pass example_inputs to replicad.parallel")
        return (torch.as_tensor(value[:_EXAMPLE_ROWS]),)

    if x is None:
        raise ValueError(f"{call}: x is None")
    if isinstance(x, (list, tuple, dict)) or hasattr(x, "shape"):
        inputs = rows(x)
    else:
        try:
            if iter(x) is x:
                raise ValueError(f"{call}: x is an iterator, which can be read once: pass a "
                                 "re-iterable (a DataLoader, a list of batches)")
            first = next(iter(x))
        except TypeError:
            raise ValueError(f"{call}: cannot take example inputs from a {type(x).__name__}: "
                             "pass example_inputs to replicad.parallel") from None
        except StopIteration:
            raise ValueError(f"{call}: x yields no batch") from None
        if not isinstance(first, (tuple, list)) or len(first) != 2:
            raise ValueError(f"{call}: batch 0: expected (inputs, targets), received a "
                             f"{type(first).__name__}")
        inputs = rows(first[0])
    parameter = next(iter(module.parameters()), None)
    if parameter is not None:
        inputs = tuple(t.to(parameter.device) for t in inputs)
    return inputs
