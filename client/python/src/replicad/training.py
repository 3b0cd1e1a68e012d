"""Keras-style fit and evaluate over replicad's TrainStep (or TrainSteps) and Predict, and the
batch plumbing they share with Client.predict and Client.train_steps."""

import collections
import math
import queue
import threading

import grpc
import numpy as np

from replicad import errors
from replicad.callbacks import Callback
from replicad.epoch_order import epoch_order
from replicad.names import LOSSES, choice
from replicad.progress import EpochProgress
from replicad.tensors import as_array, from_tensor, to_tensor
from replicad.v1 import replicad_pb2 as pb

DEFAULT_BATCH_SIZE = 32  # Keras' default.


class History:
    """What fit returns. `history` maps "loss", "accuracy" (classification losses),
    "val_loss" and "val_accuracy" (with validation data) to one value per epoch, as Keras'
    History does; `epoch` lists the epochs run (from 0); `samples_per_second` and
    `skipped_steps` (steps the server skipped as non-finite) are per epoch too; `step` is the
    server's step count after the last step."""

    def __init__(self):
        self.history = {}
        self.epoch = []
        self.samples_per_second = []
        self.skipped_steps = []
        self.step = None

    def _append(self, epoch, logs, rate, skipped):
        self.epoch.append(epoch)
        for key, value in logs.items():
            self.history.setdefault(key, []).append(value)
        self.samples_per_second.append(rate)
        self.skipped_steps.append(skipped)


class FitRun:
    """The running fit, as callbacks see it (Callback.fit)."""

    def __init__(self, client, model):
        self.client = client
        self.model = model
        self.stop_training = False
        self.step = None  # The server's step count after the latest step.
        self.fit_step = 0  # Steps of this fit applied (resumed ones included).


# ---- Inputs and batches ---------------------------------------------------------------------


def _is_array_like(value):
    return isinstance(value, np.ndarray) or (hasattr(value, "detach") and hasattr(value, "cpu"))


def named_inputs(info, inputs):
    """{input name: array} for `inputs` given to a model described by `info`, each cast as
    as_array casts it for the model's input of that name."""
    names = [spec.name for spec in info.inputs]
    wants = {spec.name: spec.dtype for spec in info.inputs}

    def array(name, value):
        return as_array(value, f"input '{name}'", wants.get(name))

    if isinstance(inputs, dict):
        return {str(k): array(str(k), v) for k, v in inputs.items()}
    if isinstance(inputs, (list, tuple)) and len(names) > 1:
        if len(inputs) != len(names):
            raise ValueError(f"inputs: model '{info.name}' takes {len(names)} inputs "
                             f"({', '.join(names)}), received a list of {len(inputs)}")
        return {n: array(n, v) for n, v in zip(names, inputs)}
    if len(names) != 1:
        raise ValueError(f"inputs: model '{info.name}' takes {len(names)} inputs "
                         f"({', '.join(names)}): pass a dict {{name: array}}")
    return {names[0]: array(names[0], inputs)}


def batch_rows(named, what):
    """The batch size (dim 0) the arrays share."""
    rows = {name: (array.shape[0] if array.ndim else None) for name, array in named.items()}
    if any(r is None for r in rows.values()):
        scalar = [n for n, r in rows.items() if r is None][0]
        raise ValueError(f"{what}: '{scalar}' is a scalar: expected a batch dimension")
    if len(set(rows.values())) > 1:
        listed = ", ".join(f"'{n}' {r}" for n, r in rows.items())
        raise ValueError(f"{what}: the arrays have different numbers of rows ({listed}): "
                         "expected one batch size")
    return next(iter(rows.values()), 0)


def place_rows(merged, array, name, begin, end, rows, requests):
    """Puts rows [begin, end) of output `name` into merged[name] (rows in all)."""
    if requests == 1:
        merged[name] = array
        return
    if array.ndim == 0 or array.shape[0] != end - begin:
        raise ValueError(
            f"output '{name}' has shape {list(array.shape)}, not one row per input row, so a "
            f"batch of {rows} rows cut into {requests} requests cannot be reassembled: pass "
            f"batch_size >= {rows} or leave '{name}' out of outputs")
    if name not in merged:
        merged[name] = np.empty((rows,) + array.shape[1:], dtype=array.dtype)
    merged[name][begin:end] = array


class _ArrayBatches:
    """Batches of in-memory arrays, in replicactl's order (shuffle) or in file order."""

    def __init__(self, inputs, targets, batch_size, shuffle, seed):
        self.inputs = inputs
        self.targets = targets
        self.rows = batch_rows({**inputs, "targets": targets}, "x and y")
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.steps = math.ceil(self.rows / batch_size)
        self.samples = self.rows

    def epoch(self, epoch, skip):
        order = epoch_order(self.rows, self.seed, epoch) if self.shuffle else None
        for k in range(skip, self.steps):
            begin, end = k * self.batch_size, min(self.rows, (k + 1) * self.batch_size)
            if order is None:
                pick = slice(begin, end)
            else:
                pick = order[begin:end]
            yield {n: a[pick] for n, a in self.inputs.items()}, self.targets[pick]


class _IterableBatches:
    """Batches from an iterable of (inputs, targets): a torch DataLoader, a list, a dataset."""

    def __init__(self, data, info):
        self.data = data
        self.info = info
        self.steps = len(data) if hasattr(data, "__len__") else None
        dataset = getattr(data, "dataset", None)
        self.samples = len(dataset) if dataset is not None and hasattr(dataset, "__len__") \
            else None

    def epoch(self, epoch, skip):
        for k, item in enumerate(self.data):
            if k < skip:
                continue
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                got = f"{type(item).__name__} of {len(item)}" if isinstance(item, (tuple, list)) \
                    else type(item).__name__
                raise ValueError(f"batch {k}: expected (inputs, targets), received a {got}")
            inputs, targets = item
            yield named_inputs(self.info, inputs), as_array(targets, f"batch {k} targets")


def _batches(client, model, x, y, batch_size, shuffle, seed, what):
    info = client._model_info(model)
    if y is None:
        if isinstance(x, (dict, np.ndarray)) or _is_array_like(x):
            raise ValueError(f"{what}: x is an array but y is None: pass y, or an iterable of "
                             "(inputs, targets) batches as x")
        if iter(x) is x:
            raise ValueError(f"{what}: x is an iterator, which can be read once: pass a "
                             "re-iterable (a DataLoader, a list of batches)")
        if batch_size is not None:
            raise ValueError(f"{what}: x yields its own batches: leave batch_size out")
        return _IterableBatches(x, info)
    batch_size = DEFAULT_BATCH_SIZE if batch_size is None else int(batch_size)
    if batch_size < 1:
        raise ValueError(f"batch_size: expected >= 1, received {batch_size}")
    return _ArrayBatches(named_inputs(info, x), as_array(y, "y"), batch_size, shuffle, seed)


PREDICTS_IN_FLIGHT = 2  # The server batches and splits them over its slots.


def predict_in_order(client, requests, on_response):
    """Sends the Predict requests of `requests` (pairs (request, tag)), PREDICTS_IN_FLIGHT at
    a time, and calls on_response(response, tag) in their order. The first failure cancels
    the requests still in flight and raises its exception."""
    pending = []

    def finish():
        future, tag = pending.pop(0)
        try:
            response = future.result()
        except grpc.RpcError as e:
            for other, _ in pending:
                other.cancel()
            raise errors.from_rpc_error(e, "Predict") from None
        on_response(response, tag)

    for request, tag in requests:
        pending.append((client._future("Predict", request), tag))
        if len(pending) >= PREDICTS_IN_FLIGHT:
            finish()
    while pending:
        finish()


# ---- Losses, as the server computes them ----------------------------------------------------


def _log_softmax(scores):
    scores = scores.astype(np.float64)
    shifted = scores - scores.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


class _Metrics:
    """Sums of one loss over batches: its mean over samples (elements for MSE) and accuracy."""

    def __init__(self, loss):
        self.loss = loss
        self.loss_sum = 0.0
        self.loss_count = 0
        self.correct = 0
        self.rows = 0

    def add(self, scores, targets, output):
        rows = scores.shape[0] if scores.ndim else 0
        if self.loss == pb.LOSS_MEAN_SQUARED_ERROR:
            if targets.shape != scores.shape:
                raise ValueError(f"targets: expected shape {list(scores.shape)} (output "
                                 f"'{output}'), received {list(targets.shape)}")
            self.loss_sum += float(((scores.astype(np.float64) - targets) ** 2).sum())
            self.loss_count += scores.size
            return
        if scores.ndim != 2:
            raise ValueError(f"output '{output}': expected [N, classes] scores, received shape "
                             f"{list(scores.shape)}")
        log_p = _log_softmax(scores)
        classes = scores.shape[1]
        if targets.dtype == np.int64:
            if targets.shape != (rows,):
                raise ValueError(f"targets: expected int64 labels [{rows}], received shape "
                                 f"{list(targets.shape)}")
            if rows and (targets.min() < 0 or targets.max() >= classes):
                bad = targets[(targets < 0) | (targets >= classes)][0]
                raise ValueError(f"targets: expected labels in [0, {classes}), received {bad}")
            self.loss_sum -= float(log_p[np.arange(rows), targets].sum())
            labels = targets
        else:
            if targets.shape != scores.shape:
                raise ValueError(f"targets: expected float32 [{rows}, {classes}] probabilities "
                                 f"or int64 labels [{rows}], received {list(targets.shape)}")
            self.loss_sum -= float((targets * log_p).sum())
            labels = targets.argmax(axis=1)
        self.loss_count += rows
        self.correct += int((scores.argmax(axis=1) == labels).sum())
        self.rows += rows

    def results(self):
        loss = self.loss_sum / self.loss_count if self.loss_count else float("nan")
        if self.loss == pb.LOSS_MEAN_SQUARED_ERROR:
            return {"loss": loss}
        return {"loss": loss, "accuracy": self.correct / self.rows if self.rows else float("nan")}


def _evaluation_target(client, model, loss, output):
    """(loss enum, output name) evaluate uses: the arguments, else this client's training
    configuration of `model`, else softmax cross-entropy on the first output."""
    config = client.training_config(model)
    if loss is not None:
        loss = choice(LOSSES, loss, "loss")
    elif config is not None and config.loss:
        loss = config.loss
    else:
        loss = pb.LOSS_SOFTMAX_CROSS_ENTROPY
    if output is None:
        output = (config.output if config is not None and config.output
                  else client._model_info(model).outputs[0].name)
    return loss, output


def evaluate(client, model, x, y=None, *, batch_size=None, loss=None, output=None, verbose=0):
    """The loss (and accuracy, for softmax cross-entropy) of `model` on (x, y) through Predict,
    computed here as the server's TrainStep computes it: mean softmax cross-entropy over the
    samples (argmax accuracy; float targets are probabilities) or mean squared error over the
    elements. `loss`/`output` default to the training configuration this client set for the
    model, else softmax cross-entropy on the first output. x, y, batch_size: as fit's.
    Two Predict requests are kept in flight. Returns {"loss": ..., "accuracy": ...}."""
    loss, output = _evaluation_target(client, model, loss, output)
    source = _batches(client, model, x, y, batch_size, False, 0, "evaluate")
    metrics = _Metrics(loss)
    progress = EpochProgress(1, 1, source.samples, verbose)

    def requests():
        for inputs, targets in source.epoch(0, 0):
            yield pb.PredictRequest(model=model, output_names=[output],
                                    inputs=[to_tensor(n, a) for n, a in inputs.items()]), targets

    def add(response, targets):
        scores = [t for t in response.outputs if t.name == output]
        if not scores:
            raise errors.FailedPrecondition(f"Predict of model '{model}' returned no output "
                                            f"'{output}'", call="Predict")
        metrics.add(from_tensor(scores[0]), targets, output)
        progress.update(len(targets), metrics.results())

    predict_in_order(client, requests(), add)
    results = metrics.results()
    progress.close(results)
    return results


class Prefetch:
    """Iterates `items` on a thread of its own, up to `depth` items ahead of the consumer, so
    that the next batch is cut and converted (and a DataLoader's next batch collated) while
    the current step runs on the server; the gRPC call waits without the GIL. An exception
    of `items` is raised by the consumer's next() that reaches it, after the steps before it
    were answered. close() stops the thread."""

    _END = object()

    def __init__(self, items, depth=2):
        self._queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, args=(items,), daemon=True,
                                        name="replicad-prefetch")
        self._thread.start()

    def _offer(self, entry):
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self, items):
        try:
            for item in items:
                if not self._offer((item, None)):
                    return
            self._offer((self._END, None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            self._offer((None, e))

    def __iter__(self):
        return self

    def __next__(self):
        item, error = self._queue.get()
        if error is not None:
            raise error
        if item is self._END:
            raise StopIteration
        return item

    def close(self):
        self._stop.set()
        self._thread.join()


class _Feed:
    """The request iterator of a TrainSteps call, which gRPC reads on a thread of its own:
    the items put(), then the end of the stream (half-close) once end() is called."""

    _END = object()

    def __init__(self):
        self._queue = queue.Queue()
        self._ended = False

    def put(self, item):
        self._queue.put(item)

    def end(self):
        if not self._ended:
            self._ended = True
            self._queue.put(self._END)

    def __iter__(self):
        return self

    def __next__(self):
        item = self._queue.get()
        if item is self._END:
            self._queue.put(self._END)  # A later next() ends too.
            raise StopIteration
        return item


# TrainSteps: steps sent and not yet answered. The server holds one running and the next (whose
# rows it uploads to the GPUs meanwhile), so more would only wait in gRPC's buffers, and would
# lengthen the lag of a stop.
STEPS_AHEAD = 2


def stream_steps(client, items, on_send=None, more=None):
    """Runs the serialized TrainStepRequests of `items` (an iterator of pairs (request, tag))
    over one TrainSteps call, STEPS_AHEAD of them sent and unanswered at most, and yields
    (response, tag) in their order. on_send(tag) is called on this thread as each is handed to
    the stream. After each answer, once more() is false, nothing more is sent: the stream is
    half-closed, and the steps already sent (one) still run and are yielded. An exception of
    `items` ends the stream the same way and is raised after them. A step that fails raises
    its grpc.RpcError (nothing sent after it ran). Closing the generator early, or an exception
    while it waits (KeyboardInterrupt), cancels the call. No deadline (see
    Client._train_steps)."""
    feed = _Feed()
    call = client._train_steps(feed)
    tags = collections.deque()
    sending, error = True, None
    try:
        while True:
            while sending and len(tags) < STEPS_AHEAD:
                try:
                    request, tag = next(items)
                except StopIteration:
                    sending = False
                except Exception as e:  # noqa: BLE001 - raised once the steps sent are answered
                    sending, error = False, e
                else:
                    if on_send is not None:
                        on_send(tag)
                    feed.put(request)
                    tags.append(tag)
            if not sending:
                feed.end()
            if not tags:
                break
            try:
                response = next(call)
            except StopIteration:
                raise errors.error_for(
                    grpc.StatusCode.INTERNAL, f"TrainSteps ended OK with {len(tags)} step(s) "
                    "sent and not answered", call="TrainSteps") from None
            yield response, tags.popleft()
            sending = sending and (more is None or more())
        for _ in call:  # Its end: OK, or the error that came after the last answer.
            raise errors.error_for(grpc.StatusCode.INTERNAL, "TrainSteps answered more steps "
                                   "than were sent", call="TrainSteps")
        if error is not None:
            raise error
    finally:
        call.cancel()  # Nothing, once it ended.
        feed.end()  # Lets gRPC's thread, waiting for a request, finish.


def _one_step_each(client, items, on_send, more):
    """As stream_steps, one TrainStep call per step (the client's timeout each)."""
    for request, tag in items:
        on_send(tag)
        yield client._train_step(request), tag
        if not more():
            return


# ---- fit ------------------------------------------------------------------------------------


def _fit_error(error, run, epoch, epochs, batch, steps, call):
    where = f"epoch {epoch + 1}/{epochs}, batch {batch + 1}/{steps if steps else '?'}"
    message = (f"{call} of fit step {run.fit_step + 1} ({where}) failed: "
               f"{error.details() or error.code().name}. {run.fit_step} batches of this fit are done"
               + (f" (the server's count after the last: {run.step})" if run.step else "") +
               f"; fit(..., initial_step={run.fit_step}) resumes after them with the same data, "
               "batch size and seed (if the server restarted from a checkpoint, from the step "
               "that checkpoint holds)")
    return errors.error_for(error.code(), message, call=call, step=run.fit_step)


def fit(client, model, x, y=None, *, batch_size=None, epochs=1, validation_data=None,
        shuffle=True, seed=0, callbacks=None, verbose=1, initial_epoch=0, initial_step=0,
        validation_batch_size=None, stream=None):
    """Trains `model` on the server, one TrainStep per batch, as Keras' Model.fit.

    x, y: arrays (numpy, PyTorch; x a dict or list for several inputs) cut into batches of
      batch_size (default 32), visited in `replicactl train --seed`'s order when shuffle
      (see epoch_order), else in order; or x an iterable of (inputs, targets) batches (a
      torch.utils.data.DataLoader), y None and batch_size left out.
    validation_data: a tuple (x_val, y_val), or an iterable of batches, evaluated after each
      epoch (validation_batch_size, default batch_size) with the training loss and output.
    callbacks: replicad.callbacks.Callback instances. verbose: 0 quiet, 1 a progress bar per
      epoch, 2 one line per epoch.
    initial_epoch: epochs (from 0) to skip; initial_step: batches of this fit's schedule
      already done (as the error of a failed fit reports), to resume after them.
    The next batch is converted while the current step runs on the server. Returns a History.
    stream: None (the default) streams when the server has a GPU (ListDevices), where uploading
      the next batch ahead pays, and sends one TrainStep per batch otherwise; True or False
      chooses. Streamed, each epoch's batches go over one TrainSteps call instead of one each
      (no per-call round trip between steps, and GPU slots upload a step's rows while the step
      before runs; the client's timeout does not apply: no deadline). The batch after the one
      being answered is sent ahead, so on_train_batch_begin(k + 1) comes before
      on_train_batch_end(k), and, as with Keras' steps_per_execution, stop_training set after
      batch k takes effect after batch k + 1, already sent: it runs and is counted (History,
      its callbacks, initial_step to resume). A failing step raises as without stream (its
      error's `call` is "TrainSteps"): the batches before it are done, none after it ran.
      Needs a server with TrainSteps (older ones: Unimplemented).
    """
    if epochs < 1 or initial_epoch < 0 or initial_step < 0:
        raise ValueError(f"epochs {epochs}, initial_epoch {initial_epoch}, initial_step "
                         f"{initial_step}: expected epochs >= 1 and the others >= 0")
    if verbose not in (0, 1, 2):
        raise ValueError(f"verbose: expected 0, 1 or 2, received {verbose}")
    source = _batches(client, model, x, y, batch_size, shuffle, seed, "fit")
    if stream is None:
        stream = any(device.kind == "cuda" for device in client.devices())
    start_epoch, skip = initial_epoch, 0
    if initial_step:
        if not source.steps:
            raise ValueError("initial_step: needs data whose number of batches is known "
                             "(arrays, or an iterable with len())")
        start_epoch, skip = divmod(initial_step, source.steps)
    validate = None
    if validation_data is not None:
        if isinstance(validation_data, tuple):
            if len(validation_data) != 2:
                raise ValueError(f"validation_data: expected (x_val, y_val), received a tuple "
                                 f"of {len(validation_data)}")
            val_x, val_y = validation_data
        else:
            val_x, val_y = validation_data, None
        val_batch = validation_batch_size or (batch_size if val_y is not None else None)

        def validate():
            return evaluate(client, model, val_x, val_y, batch_size=val_batch)
    callbacks = list(callbacks or [])
    for cb in callbacks:
        if not isinstance(cb, Callback):
            raise TypeError(f"callbacks: expected replicad.callbacks.Callback instances, "
                            f"received {type(cb).__name__}")
    run = FitRun(client, model)
    run.fit_step = start_epoch * (source.steps or 0) + skip
    history = History()
    for cb in callbacks:
        cb.fit = run
        cb.on_train_begin({})
    logs = {}
    for epoch in range(start_epoch, epochs):
        for cb in callbacks:
            cb.on_epoch_begin(epoch, {})
        logs, progress, skipped = _fit_epoch(client, model, source, run, epoch, epochs, skip,
                                             verbose, callbacks, stream)
        skip = 0
        rate = progress.rate()
        if validate is not None:
            logs.update({f"val_{k}": v for k, v in validate().items()})
        progress.close(logs)
        history._append(epoch, logs, rate, skipped)
        for cb in callbacks:
            cb.on_epoch_end(epoch, logs)
        if run.stop_training:
            break
    for cb in callbacks:
        cb.on_train_end(logs)
    history.step = run.step
    return history


def _train_requests(model, source, epoch, skip):
    for batch, (inputs, targets) in enumerate(source.epoch(epoch, skip), skip):
        request = pb.TrainStepRequest(
            model=model, inputs=[to_tensor(n, a) for n, a in inputs.items()],
            targets=to_tensor("targets", targets))
        yield request.SerializeToString(), (batch, len(targets))


class _EpochSteps:
    """One epoch's answered steps: its figures, progress display and callbacks."""

    def __init__(self, run, progress, callbacks):
        self.run, self.progress, self.callbacks = run, progress, callbacks
        self.loss_sum = self.accuracy_sum = 0.0
        self.loss_samples = self.accuracy_samples = self.skipped = 0
        self.logs = {}

    def sent(self, tag):
        for cb in self.callbacks:
            cb.on_train_batch_begin(tag[0], self.logs)

    def answered(self, response, tag):
        batch, samples = tag
        self.run.step = int(response.step)
        self.run.fit_step += 1
        served = int(response.samples) or samples
        if response.skipped:
            self.skipped += 1  # Its loss is not finite: it stays out of the epoch's figures.
        else:
            self.loss_sum += response.loss * served
            self.loss_samples += served
            if response.has_accuracy:
                self.accuracy_sum += response.accuracy * served
                self.accuracy_samples += served
        self.logs = {"loss": self.loss_sum / self.loss_samples if self.loss_samples
                     else float("nan")}
        if self.accuracy_samples:
            self.logs["accuracy"] = self.accuracy_sum / self.accuracy_samples
        self.progress.update(samples, self.logs)
        for cb in self.callbacks:
            cb.on_train_batch_end(batch, self.logs)


def _fit_epoch(client, model, source, run, epoch, epochs, skip, verbose, callbacks, stream):
    """One epoch's steps, one TrainStep each or over one TrainSteps stream; returns (its logs,
    its progress display, still open, and the number of steps the server skipped as
    non-finite)."""
    total = source.samples
    if total is not None and skip:
        total = max(0, total - skip * getattr(source, "batch_size", 0)) or None
    progress = EpochProgress(epoch + 1, epochs, total, verbose)
    state = _EpochSteps(run, progress, callbacks)
    batches = Prefetch(_train_requests(model, source, epoch, skip))
    steps = (stream_steps if stream else _one_step_each)(
        client, batches, state.sent, lambda: not run.stop_training)
    batch = skip  # The next batch to be answered.
    try:
        while True:
            try:
                response, tag = next(steps)
            except StopIteration:
                break
            except grpc.RpcError as e:
                raise _fit_error(e, run, epoch, epochs, batch, source.steps,
                                 "TrainSteps" if stream else "TrainStep") from None
            state.answered(response, tag)
            batch += 1
    finally:
        steps.close()
        batches.close()
    return dict(state.logs), progress, state.skipped
