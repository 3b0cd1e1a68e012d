# %% [markdown]
# # Your own PyTorch model, trained data-parallel by replicad
#
# A small CNN defined here in PyTorch goes to the server in one line (`replicad.parallel`),
# trains an epoch of Fashion-MNIST there, split over the server's slots, and comes back into
# the PyTorch module, which then answers locally as the server did.
#
# Start a server that takes models from its clients (uploads written under
# /tmp/replicad-uploads; explicit model control, so that models come and go on request):
#
#     replicad serve --model-upload-root /tmp/replicad-uploads --model-control-mode explicit
#
# then run this file (`python bring_your_own_model.py`) or its cells one by one.
# REPLICAD_ADDRESS picks another server than localhost:8500.

# %%
import os

import numpy as np
import torch
from torch import nn

import replicad
from replicad.datasets import load_idx

ADDRESS = os.environ.get("REPLICAD_ADDRESS", "localhost:8500")

# %% The data: uint8 images scaled to [0, 1], as float32 [N, 1, 28, 28]; int64 labels.
x, y = load_idx("/usr/share/datasets/fashion-mnist", "train")
x_test, y_test = load_idx("/usr/share/datasets/fashion-mnist", "t10k")
x = (x.astype(np.float32) / 255)[:, None]
x_test = (x_test.astype(np.float32) / 255)[:, None]


# %% [markdown]
# The model: any `torch.nn.Module` that `torch.onnx.export` can export. BatchNorm and Dropout
# train on the server as in PyTorch's training mode, and serve as in its eval mode.

# %%
class FashionCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2))
        self.dropout = nn.Dropout(0.25)
        self.classifier = nn.Linear(32 * 7 * 7, 10)

    def forward(self, image):
        return self.classifier(self.dropout(torch.flatten(self.features(image), 1)))


torch.manual_seed(0)
net = FashionCnn()

# %% [markdown]
# `replicad.parallel` uploads the module (exported from the first rows of the first data it
# sees; `example_inputs=` uploads at once), on `devices`: 2 is two slots on each GPU, or two
# CPU slots on a machine without one; `["cuda:0", "cuda:1"]` names them. Each batch of `fit`
# is split over the slots and their gradients averaged, as one step of the whole batch.
# Leaving the `with` block copies the trained weights (BatchNorm's running statistics too)
# into `net` and unloads the model.

# %%
with replicad.parallel(net, devices=2, address=ADDRESS) as pm:
    pm.compile(optimizer="sgd", lr=0.02, momentum=0.9)
    history = pm.fit(x, y, batch_size=64, epochs=1, validation_data=(x_test, y_test))
    print(history.history)
    server = pm.evaluate(x_test, y_test, batch_size=256)
    pm.save("fashion_cnn.onnx")  # The trained ONNX file, here.
print(f"server accuracy: {server['accuracy']:.4f}")

# %% [markdown]
# `net` is an ordinary PyTorch module again, with the weights the server trained.

# %%
net.eval()
with torch.no_grad():
    logits = torch.cat([net(batch) for batch in torch.from_numpy(x_test).split(1000)])
local_accuracy = (logits.argmax(dim=1).numpy() == y_test).mean()
print(f"PyTorch accuracy: {local_accuracy:.4f}")
torch.save(net.state_dict(), "fashion_cnn.pt")
