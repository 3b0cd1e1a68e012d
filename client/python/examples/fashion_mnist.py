# %% [markdown]
# # Training replicad's default model on Fashion-MNIST from Python
#
# Start a server first (the embedded default model on every local device, checkpoints allowed
# under /tmp/replicad-checkpoints):
#
#     replicad serve --checkpoint-root /tmp/replicad-checkpoints
#
# then run this file (`python fashion_mnist.py`) or its cells one by one. REPLICAD_ADDRESS
# picks another server than localhost:8500.

# %%
import os

import numpy as np
import torch.utils.data

import replicad
from replicad.datasets import load_idx

client = replicad.Client(os.environ.get("REPLICAD_ADDRESS", "localhost:8500"))
info = client.model("default")
print("inputs:", info.inputs, "\nslots:", [f"{s.name}@{s.device}" for s in info.slots])

# %% The data: uint8 images scaled to [0, 1], as float32 [N, 1, 28, 28]; int64 labels.
x, y = load_idx("/usr/share/datasets/fashion-mnist", "train")
x_test, y_test = load_idx("/usr/share/datasets/fashion-mnist", "t10k")
x = (x.astype(np.float32) / 255)[:, None]
x_test = (x_test.astype(np.float32) / 255)[:, None]

# %% One epoch from numpy arrays, checking against the test split after it.
client.configure_training("default", optimizer="sgd", lr=0.02, momentum=0.9)
history = client.fit("default", x, y, batch_size=64, epochs=1, seed=0,
                     validation_data=(x_test, y_test),
                     callbacks=[replicad.SaveCheckpoint("fashion-epoch{epoch}.onnx")])
print(history.history)

# %% A second epoch from a PyTorch DataLoader (any iterable of (inputs, targets) batches).
loader = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
    batch_size=128, shuffle=True, generator=torch.Generator().manual_seed(1))
client.fit("default", loader, epochs=1, verbose=2)

# %% Evaluate and predict with the trained weights.
print(client.evaluate("default", x_test, y_test, batch_size=256))
probabilities = client.predict("default", x_test[:8], outputs=["probabilities"])["probabilities"]
print("predicted:", probabilities.argmax(axis=1), "labels:", y_test[:8])

# %% Save the model (an ONNX file on the server, under its --checkpoint-root).
print(client.save_checkpoint("default", "fashion.onnx"))
client.close()
