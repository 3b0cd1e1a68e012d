"""Keras-shaped callbacks for `Client.fit`.

Each hook gets `logs`, a dict of the figures so far ("loss", "accuracy", and after an epoch
with validation data "val_loss", "val_accuracy"). Setting `client_fit.stop_training = True`
(the `fit` attribute of a callback, see Callback.fit) ends training after the current step.
"""


class Callback:
    """Override any of the hooks; `self.fit` is the running fit (its `stop_training`,
    `client`, `model` and `step`), set before on_train_begin."""

    fit = None

    def on_train_begin(self, logs=None):
        pass

    def on_train_end(self, logs=None):
        pass

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_train_batch_begin(self, batch, logs=None):
        pass

    def on_train_batch_end(self, batch, logs=None):
        pass


class SaveCheckpoint(Callback):
    """Saves the model on the server after every `every_epochs` epochs.

    `path` is a path on the server (under its --checkpoint-root), formatted with `epoch`
    (from 1) and `step`, e.g. "runs/fmnist-{epoch:03d}.onnx"; empty: the server's configured
    checkpoint_dir. The paths written are kept in `paths`.
    """

    def __init__(self, path="", every_epochs=1):
        if every_epochs < 1:
            raise ValueError(f"every_epochs: expected >= 1, received {every_epochs}")
        self.path = path
        self.every_epochs = every_epochs
        self.paths = []

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every_epochs == 0:
            path = self.path.format(epoch=epoch + 1, step=self.fit.step)
            self.paths.append(self.fit.client.save_checkpoint(self.fit.model, path).path)


class EarlyStopping(Callback):
    """Stops when `monitor` ("val_loss" by default) has not improved by more than `min_delta`
    for `patience` epochs. replicad keeps the weights of the last step (there is no
    restore_best_weights: save checkpoints to keep earlier ones)."""

    def __init__(self, monitor="val_loss", min_delta=0.0, patience=0, mode="auto"):
        if mode not in ("auto", "min", "max"):
            raise ValueError(f"mode: expected 'auto', 'min' or 'max', received {mode!r}")
        self.monitor = monitor
        self.min_delta = abs(min_delta)
        self.patience = patience
        self.higher_is_better = mode == "max" or (mode == "auto" and "acc" in monitor)
        self.best = None
        self.wait = 0
        self.stopped_epoch = None

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None:
            raise KeyError(f"EarlyStopping: no '{self.monitor}' in the epoch's figures "
                           f"({', '.join(sorted(logs or {}))}); pass validation_data to fit")
        improved = self.best is None or (
            value > self.best + self.min_delta if self.higher_is_better
            else value < self.best - self.min_delta)
        if improved:
            self.best = value
            self.wait = 0
            return
        self.wait += 1
        if self.wait > self.patience:
            self.stopped_epoch = epoch
            self.fit.stop_training = True
