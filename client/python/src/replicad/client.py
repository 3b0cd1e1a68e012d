"""replicad.Client: one channel to one replicad server, its calls, and fit/evaluate/predict."""

import inspect
import os
import grpc

from replicad import errors, model_files, training
from replicad.names import LOSSES, NON_FINITE, OPTIMIZERS, REDUCTIONS, choice
from replicad.tensors import as_array, from_tensor, to_tensor
from replicad.types import Checkpoint, Device, ModelInfo, ModelSummary, StepResult, Training
from replicad.v1 import replicad_pb2 as pb
from replicad.v1 import replicad_pb2_grpc as pb_grpc

# predict(batch_size=None) cuts a batch so that each request's inputs stay under this.
_PREDICT_REQUEST_BYTES = 32 << 20


# A registered method skips gRPC's per-call method lookup (grpcio >= 1.63 takes the flag).
_REGISTERED = ({"_registered_method": True}
               if "_registered_method" in inspect.signature(grpc.Channel.unary_unary).parameters
               else {})


def _read(path, what):
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise FileNotFoundError(f"{what} {path}: {e.strerror}") from None


class Client:
    """A client of one replicad server (the replicad.v1.Replicad service).

    address: "host:port" (or any gRPC target, e.g. "unix:///run/replicad.sock").
    tls_ca: PEM file of the CA that signed the server's certificate: connect with TLS
      (tls_cert and tls_key: this client's certificate and key, for mutual TLS).
    token: bearer token for a server run with --auth-tokens (default: $REPLICAD_TOKEN).
    timeout: seconds each call may take (None: no limit); DeadlineExceeded after it. A
      TrainSteps stream (train_steps, fit(stream=True)) has no deadline: an epoch may take
      hours; KeyboardInterrupt or closing it cancels it.
    max_message_bytes: largest request or response (the server's --max-message-bytes too).

    Thread-safe: calls may be made from several threads at once. Use as a context manager,
    or call close().
    """

    def __init__(self, address="localhost:8500", *, tls_ca=None, tls_cert=None, tls_key=None,
                 token=None, timeout=30.0, max_message_bytes=256 << 20):
        if not address:
            raise ValueError("address: expected 'host:port', received an empty string")
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key: pass both (mutual TLS) or neither")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout: expected seconds > 0 or None, received {timeout}")
        options = [("grpc.max_send_message_length", max_message_bytes),
                   ("grpc.max_receive_message_length", max_message_bytes)]
        if tls_ca is not None or tls_cert is not None:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca, "tls_ca"),
                private_key=_read(tls_key, "tls_key"),
                certificate_chain=_read(tls_cert, "tls_cert"))
            self._channel = grpc.secure_channel(address, credentials, options)
        else:
            self._channel = grpc.insecure_channel(address, options)
        self._stub = pb_grpc.ReplicadStub(self._channel)
        # fit's TrainStep takes requests serialized ahead, on its prefetch thread (a request
        # that is bytes already passes through gRPC unserialized).
        self._train_step_serialized = self._channel.unary_unary(
            "/replicad.v1.Replicad/TrainStep",
            response_deserializer=pb.TrainStepResponse.FromString, **_REGISTERED)
        self._train_steps_serialized = self._channel.stream_stream(
            "/replicad.v1.Replicad/TrainSteps",
            response_deserializer=pb.TrainStepResponse.FromString, **_REGISTERED)
        token = token if token is not None else os.environ.get("REPLICAD_TOKEN")
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self.address = address
        self.timeout = timeout
        self._models = {}  # name -> ModelInfo, for input names and batch limits
        self._training_configs = {}  # name -> the TrainingConfig this client configured

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- One call each -------------------------------------------------------------------

    def _invoke(self, name, request):
        """Calls `name` and waits (without the GIL); raises grpc.RpcError."""
        return getattr(self._stub, name)(request, timeout=self.timeout, metadata=self._metadata)

    def _train_step(self, serialized):
        """TrainStep of a serialized TrainStepRequest; raises grpc.RpcError."""
        return self._train_step_serialized(serialized, timeout=self.timeout,
                                           metadata=self._metadata)

    def _train_steps(self, serialized_requests):
        """A TrainSteps call fed from an iterator of serialized TrainStepRequests (gRPC reads it
        on a thread of its own): an iterator of TrainStepResponse that raises grpc.RpcError,
        with cancel(). No deadline: the stream lasts as long as its steps (self.timeout is
        per call, and an epoch's stream may take hours)."""
        return self._train_steps_serialized(iter(serialized_requests), metadata=self._metadata)

    def _call(self, name, request):
        try:
            return self._invoke(name, request)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, name) from None

    def _future(self, name, request):
        """Starts `name`; result() of what it returns gives the response or raises RpcError."""
        return getattr(self._stub, name).future(request, timeout=self.timeout,
                                                metadata=self._metadata)

    def devices(self):
        """The server's devices (list of Device)."""
        return [Device(d.id, d.kind, d.name, int(d.memory_bytes), int(d.slots),
                       d.compute_capability, d.driver_version, d.runtime_version)
                for d in self._call("ListDevices", pb.ListDevicesRequest()).devices]

    def models(self):
        """The loaded models (list of ModelSummary: name, path)."""
        return [ModelSummary(m.name, m.path)
                for m in self._call("ListModels", pb.ListModelsRequest()).models]

    def model(self, name):
        """One model's signature, slots and readiness (ModelInfo); NotFound if none is `name`."""
        info = ModelInfo.of(self._call("GetModel", pb.GetModelRequest(name=name)).model)
        self._models[name] = info
        return info

    def _model_info(self, name):
        return self._models.get(name) or self.model(name)

    # ---- Models: load, unload, download -------------------------------------------------

    def load_model(self, name, model=None, example_inputs=None, config=None, instances=None, *,
                   input_names=None, output_names=None):
        """Loads `model` on the server as `name`, replacing a model of that name (LoadModel;
        the server's --model-upload-root holds the file; role admin under --auth-tokens).

        model: a torch.nn.Module, exported here for training (torch.onnx.export in training
          mode, no constant folding, opset 17, a dynamic batch axis on every input and
          output; the module is left as it was), with `example_inputs` (a tensor or array,
          or a tuple of them, one per forward argument, any batch size); input names are
          forward's parameter names and outputs "output" or "output_0", "output_1", ...
          unless input_names/output_names say otherwise. Or an onnx.ModelProto, the ONNX
          file's bytes, or its path. None: the repository's model `name` (explicit model
          control; one uploaded before and unloaded counts: its files stay on the server).
        config: Triton model configuration fields (inference.ModelConfig as JSON), e.g.
          {"max_batch_size": 64, "dynamic_batching": {}}; None: none (the daemon's flags).
          It goes with the model's file: the server refuses a configuration without one.
        instances: the model's slots, as config's instance_group: an int n (n slots on each
          GPU, or n CPU slots on a machine without one), or a list of "cpu", "cuda:N" (one
          slot each; repeat for more) and instance_group dicts. None: the daemon's slots.
        InvalidArgument names what the server refused (the file, the configuration field);
        ResourceExhausted over its --max-upload-bytes; FailedPrecondition when it was started
        without --model-upload-root.
        """
        request = pb.LoadModelRequest(model=name,
                                      config=model_files.config_json(config, instances))
        if model is not None:
            request.files[model_files.UPLOAD_FILE] = model_files.model_bytes(
                model, example_inputs, input_names=input_names, output_names=output_names)
        elif example_inputs is not None:
            raise ValueError("example_inputs: only with a torch.nn.Module as model")
        self._forget(name)
        self._call("LoadModel", request)

    def unload_model(self, name, *, remove_upload=False):
        """Unloads model `name` (UnloadModel; role admin under --auth-tokens). Requests
        already running finish; new ones get NotFound. An uploaded model's files stay on the
        server (load_model(name) loads them again) unless `remove_upload`, which removes them
        from its --model-upload-root (NotFound when it holds none of that name)."""
        self._forget(name)
        self._call("UnloadModel", pb.UnloadModelRequest(model=name, remove_upload=remove_upload))

    def _forget(self, name):
        """Drops what this client keeps of model `name`: a loaded model may be another."""
        self._models.pop(name, None)
        self._training_configs.pop(name, None)

    def download_model(self, name):
        """Model `name`'s ONNX file with its current weights (those of the last whole training
        step, as save_checkpoint writes them): (bytes, step), step 0 when untrained. Streamed
        in pieces of at most 1 MiB (DownloadModel), so any size passes max_message_bytes;
        DataLoss when the pieces do not add up to the size the server announced."""
        pieces, step, total = [], 0, None
        try:
            for chunk in self._stub.DownloadModel(pb.DownloadModelRequest(model=name),
                                                  timeout=self.timeout, metadata=self._metadata):
                if total is None:
                    step, total = int(chunk.step), int(chunk.total_bytes)
                pieces.append(chunk.data)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, "DownloadModel") from None
        data = b"".join(pieces)
        if total is None or len(data) != total:
            raise errors.error_for(
                grpc.StatusCode.DATA_LOSS,
                f"DownloadModel of model '{name}': received {len(data)} bytes in "
                f"{len(pieces)} pieces, the server announced "
                f"{'none' if total is None else total}", "DownloadModel")
        return data, step

    def get_model(self, name):
        """Model `name` as an onnx.ModelProto with its current (trained) weights (needs the
        onnx package). See download_model."""
        import onnx  # pylint: disable=import-outside-toplevel
        return onnx.load_from_string(self.download_model(name)[0])

    def load_weights_into(self, name, module):
        """Copies model `name`'s current weights into the torch.nn.Module it was made from,
        in place: every state_dict entry (parameters and buffers, e.g. BatchNorm's running
        statistics) from the initializer of its name. Checks first: an entry the model lacks,
        or of another shape or dtype, raises ValueError naming each, and nothing is changed.
        BatchNorm's num_batches_tracked (no ONNX file holds it) and, for modules load_model
        exported, entries the export left out (unused parameters) are kept as they are.
        Returns the training step the weights come from (0: untrained)."""
        data, step = self.download_model(name)
        import onnx  # pylint: disable=import-outside-toplevel
        model_files.load_state_into(onnx.load_from_string(data), module, f"model '{name}'")
        return step

    # ---- Inference -----------------------------------------------------------------------

    def predict(self, model, inputs, *, outputs=None, batch_size=None):
        """Runs `model` on `inputs` and returns {output name: numpy array}.

        inputs: an array (a model with one input), a dict {input name: array}, or a list of
          arrays in the model's input order; numpy arrays, PyTorch tensors or lists.
        outputs: names of the outputs to return (None: all).
        batch_size: rows per Predict request; None: as many as fit 32 MiB of inputs and the
          model's max_batch_size. The server splits each request across its slots; larger
          arrays are cut into requests (two in flight) and the outputs reassembled in order.
        """
        named = training.named_inputs(self._model_info(model), inputs)
        rows = training.batch_rows(named, "inputs")
        rows_per_request = self._rows_per_request(model, named, rows, batch_size)
        wanted = list(outputs) if outputs is not None else []
        cuts = [(b, min(rows, b + rows_per_request)) for b in range(0, rows, rows_per_request)]
        if not cuts:
            cuts = [(0, 0)]
        merged = {}

        def requests():
            for begin, end in cuts:
                yield pb.PredictRequest(
                    model=model, output_names=wanted,
                    inputs=[to_tensor(name, array[begin:end]) for name, array in named.items()]
                ), (begin, end)

        def place(response, rows_of_request):
            begin, end = rows_of_request
            for tensor in response.outputs:
                training.place_rows(merged, from_tensor(tensor), tensor.name, begin, end, rows,
                                    len(cuts))

        training.predict_in_order(self, requests(), place)
        return merged

    def _rows_per_request(self, model, named, rows, batch_size):
        if batch_size is not None:
            if int(batch_size) < 1:
                raise ValueError(f"batch_size: expected >= 1 or None, received {batch_size}")
            return int(batch_size)
        row_bytes = sum(a[:1].nbytes for a in named.values()) or 1
        limit = max(1, _PREDICT_REQUEST_BYTES // row_bytes)
        max_batch = self._model_info(model).max_batch_size
        if max_batch:
            limit = min(limit, max_batch)
        return max(1, min(rows, limit))

    # ---- Training ------------------------------------------------------------------------

    def configure_training(self, model, *, optimizer="sgd", lr=None, momentum=None,
                           nesterov=False, weight_decay=None, beta1=None, beta2=None,
                           epsilon=None, alpha=None, loss="softmax_cross_entropy", output=None,
                           reduction="allreduce", ps_device=None, sync_batch_norm=None, seed=0,
                           checkpoint_every_steps=0, checkpoint_dir=None,
                           non_finite_steps="refuse", precision="fp32",
                           initial_loss_scale=None, loss_scale_growth_interval=None):
        """Sets `model`'s training configuration (replacing the whole previous one).

        optimizer: "sgd", "adam" or "rmsprop" with PyTorch's semantics and defaults (lr 0.01).
        loss: "softmax_cross_entropy" (int64 labels [N] or float probabilities [N, C]) or
          "mean_squared_error"; output: the output it applies to (None: the first).
        reduction: "allreduce" or "ps" (through ps_device). non_finite_steps: "refuse" or
          "skip". checkpoint_every_steps/checkpoint_dir: periodic checkpoints on the server.
        precision: "fp32", "bf16" (the forward pass's convolutions and weight products read
          bfloat16 inputs and weights, with float32 sums, gradients and master weights, as
          torch.autocast(dtype=torch.bfloat16) computes) or "fp16" (those products and their
          gradients' read and write float16 values, with dynamic loss scaling as
          torch.cuda.amp.GradScaler: an overflowing step comes back skipped and halves the
          scale; initial_loss_scale (65536) and loss_scale_growth_interval (2000 finite steps
          double it) set it up) or "tf32" (every convolution and matrix product may use TF32
          tensor cores on CUDA slots; CPU slots compute float32).
        Returns Training(config as applied with defaults filled in, step).
        """
        opt = pb.OptimizerConfig(kind=choice(OPTIMIZERS, optimizer, "optimizer"),
                                 nesterov=bool(nesterov))
        for field, value in (("learning_rate", lr), ("momentum", momentum),
                             ("weight_decay", weight_decay), ("beta1", beta1), ("beta2", beta2),
                             ("epsilon", epsilon), ("alpha", alpha)):
            if value is not None:
                setattr(opt, field, float(value))
        config = pb.TrainingConfig(
            loss=choice(LOSSES, loss, "loss"), output=output or "", optimizer=opt,
            reduction=choice(REDUCTIONS, reduction, "reduction"), ps_device=ps_device or "",
            seed=int(seed), checkpoint_every_steps=int(checkpoint_every_steps),
            checkpoint_dir=checkpoint_dir or "",
            non_finite_steps=choice(NON_FINITE, non_finite_steps, "non_finite_steps"),
            precision=str(precision))
        if ps_device and reduction == "allreduce":
            config.reduction = pb.GRADIENT_REDUCTION_PS
        if sync_batch_norm is not None:
            config.sync_batch_norm = bool(sync_batch_norm)
        if initial_loss_scale is not None:
            config.initial_loss_scale = float(initial_loss_scale)
        if loss_scale_growth_interval is not None:
            config.loss_scale_growth_interval = int(loss_scale_growth_interval)
        response = self._call("ConfigureTraining",
                              pb.ConfigureTrainingRequest(model=model, config=config))
        self._training_configs[model] = response.config
        return Training(response.config, int(response.step))

    def train_step(self, model, x, y, *, shard=None):
        """One data-parallel step on the batch (x, y); returns StepResult. `x` as predict's
        inputs; `y`: int64 class labels [N], or float targets shaped like the loss's output.
        shard: (step, rank, world_size) when (x, y) are this rank's rows of the job's step
        `step` (a job started with --rank-shards, one client per rank; every rank must be sent
        its shard of the same step, so the call returns once all of them have been)."""
        return StepResult.of(self._call("TrainStep", self.train_request(model, x, y, shard=shard)))

    def train_steps(self, model, batches):
        """A train_step of each (x, y) of `batches` (any iterable, read on a thread of its own
        and converted there while steps run), over one TrainSteps stream; yields a StepResult
        per batch, in order, each step applied once the one before it was. The server holds
        the step running and the next one sent (a GPU slot uploads its rows meanwhile:
        SliceStep.input_prefetched), so at most one batch is sent ahead of the answer awaited.
        The first step that fails raises its error (InvalidArgument, ...; `call` "TrainSteps")
        after the steps before it were yielded: no batch after it ran. An exception of
        `batches` is raised after the steps sent before it were answered and yielded. The
        client's timeout does not apply (no deadline). Leaving the loop early (break, close())
        cancels the stream: the one batch sent ahead may or may not have been applied (the
        next step's `step` tells)."""
        def requests():
            for x, y in batches:
                yield self.train_request(model, x, y).SerializeToString(), None

        items = training.Prefetch(requests())
        steps = training.stream_steps(self, items)
        try:
            for response, _ in steps:
                yield StepResult.of(response)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, "TrainSteps") from None
        finally:
            steps.close()
            items.close()

    def train_request(self, model, x, y, *, shard=None):
        """The TrainStep request for (x, y), converted as train_step and fit send it."""
        named = training.named_inputs(self._model_info(model), x)
        request = pb.TrainStepRequest(
            model=model, inputs=[to_tensor(name, array) for name, array in named.items()],
            targets=to_tensor("targets", as_array(y, "targets")))
        if shard is not None:
            step, rank, world_size = shard
            request.shard.step, request.shard.rank = int(step), int(rank)
            request.shard.world_size = int(world_size)
        return request

    def save_checkpoint(self, model, path=""):
        """Writes the trained model (ONNX, its optimizer state beside it) to `path` on the
        server (under its --checkpoint-root; empty: a numbered file in the configured
        checkpoint_dir). Returns Checkpoint(path, step)."""
        response = self._call("SaveCheckpoint", pb.SaveCheckpointRequest(model=model, path=path))
        return Checkpoint(response.path, int(response.step))

    def fit(self, model, x, y=None, *, batch_size=None, epochs=1, validation_data=None,
            shuffle=True, seed=0, callbacks=None, verbose=1, initial_epoch=0, initial_step=0,
            validation_batch_size=None, stream=None):
        """Trains `model` as Keras' Model.fit does; returns a History. See training.fit."""
        return training.fit(self, model, x, y, batch_size=batch_size, epochs=epochs,
                            validation_data=validation_data, shuffle=shuffle, seed=seed,
                            callbacks=callbacks, verbose=verbose, initial_epoch=initial_epoch,
                            initial_step=initial_step,
                            validation_batch_size=validation_batch_size, stream=stream)

    def evaluate(self, model, x, y=None, *, batch_size=None, loss=None, output=None, verbose=0):
        """{"loss": ..., "accuracy": ...} of `model` on (x, y), through Predict. See
        training.evaluate."""
        return training.evaluate(self, model, x, y, batch_size=batch_size, loss=loss,
                                 output=output, verbose=verbose)

    def training_config(self, model):
        """The TrainingConfig this client last set for `model` (None: none yet)."""
        return self._training_configs.get(model)
