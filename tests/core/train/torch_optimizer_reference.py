#!/usr/bin/python3
"""Runs torch.optim on fixed parameters and gradients, for optimizer_test to compare with.

Usage (Debian's interpreter, which has python3-torch):
    /usr/bin/python3 tests/core/train/torch_optimizer_reference.py OUT_FILE

For every case below it takes two parameters (12 and 7 float32 elements), feeds STEPS
seeded gradients of varying scale through torch.optim.{SGD,Adam,RMSprop} (foreach=False,
one thread) and writes a text file, one record per line, floats as %.9g (exact for float32):
    case NAME
    config kind=K lr=X momentum=X nesterov=0|1 weight_decay=X beta1=X beta2=X epsilon=X alpha=X
    sizes N0 N1
    init I v...              parameter I before the first step
    grad S I v...            the gradient of parameter I at step S (1-based)
    param S I v...           parameter I after step S
    state NAME v...          torch's optimizer state after the last step, named as
                             replicad names it: param<I>.<key> (step and None omitted)
    end
Hyperparameters are float32 values (what OptimizerConfig holds), passed to torch as the
Python floats equal to them, so both sides start from the same numbers.
Exit status 0 on success; 1 (with the reason on stderr) when torch cannot be imported.
"""

import sys

from torch_reference_common import output_path_and_torch

STEPS = 5
SIZES = [(3, 4), (7,)]

# name, kind, hyperparameters (the rest keep OptimizerConfig's defaults).
CASES = [
    ("sgd_plain", "sgd", dict(lr=0.1)),
    ("sgd_momentum", "sgd", dict(lr=0.05, momentum=0.9)),
    ("sgd_nesterov_weight_decay", "sgd",
     dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01)),
    ("adam", "adam", dict(lr=0.01)),
    ("adam_weight_decay", "adam", dict(lr=0.003, weight_decay=0.05)),
    ("adam_betas_epsilon", "adam", dict(lr=0.05, beta1=0.8, beta2=0.95, epsilon=1e-3)),
    ("rmsprop", "rmsprop", dict(lr=0.01)),
    ("rmsprop_momentum", "rmsprop", dict(lr=0.01, momentum=0.9)),
    ("rmsprop_momentum_weight_decay_alpha", "rmsprop",
     dict(lr=0.02, momentum=0.5, weight_decay=0.1, alpha=0.9, epsilon=1e-6)),
]

DEFAULTS = dict(lr=0.01, momentum=0.0, nesterov=False, weight_decay=0.0, beta1=0.9,
                beta2=0.999, epsilon=1e-8, alpha=0.99)

# Gradient scale per step: large, small and mixed magnitudes exercise eps and the moments.
GRAD_SCALES = [1.0, 0.01, 3.0, 0.2, 1e-4]


def f32(x):
    """The Python float equal to the float32 nearest x (what the C++ config holds)."""
    import numpy as np
    return float(np.float32(x))


def fmt(values):
    return " ".join("%.9g" % v for v in values)


def make_optimizer(torch, kind, params, h):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=h["lr"], momentum=h["momentum"],
                               nesterov=h["nesterov"], weight_decay=h["weight_decay"],
                               foreach=False)
    if kind == "adam":
        return torch.optim.Adam(params, lr=h["lr"], betas=(h["beta1"], h["beta2"]),
                                eps=h["epsilon"], weight_decay=h["weight_decay"],
                                foreach=False)
    return torch.optim.RMSprop(params, lr=h["lr"], alpha=h["alpha"], eps=h["epsilon"],
                               weight_decay=h["weight_decay"], momentum=h["momentum"],
                               foreach=False)


def run_case(torch, out, name, kind, overrides):
    h = dict(DEFAULTS, **overrides)
    for key in h:
        if key != "nesterov":
            h[key] = f32(h[key])
    out.write("case %s\n" % name)
    out.write("config kind=%s lr=%.9g momentum=%.9g nesterov=%d weight_decay=%.9g "
              "beta1=%.9g beta2=%.9g epsilon=%.9g alpha=%.9g\n" %
              (kind, h["lr"], h["momentum"], int(h["nesterov"]), h["weight_decay"],
               h["beta1"], h["beta2"], h["epsilon"], h["alpha"]))
    gen = torch.Generator().manual_seed(1234)
    params = [torch.randn(shape, generator=gen, dtype=torch.float32).requires_grad_()
              for shape in SIZES]
    out.write("sizes %s\n" % " ".join(str(p.numel()) for p in params))
    for i, p in enumerate(params):
        out.write("init %d %s\n" % (i, fmt(p.detach().flatten().tolist())))
    optimizer = make_optimizer(torch, kind, params, h)
    for step in range(1, STEPS + 1):
        for i, p in enumerate(params):
            g = torch.randn(p.shape, generator=gen, dtype=torch.float32) * GRAD_SCALES[step - 1]
            p.grad = g
            out.write("grad %d %d %s\n" % (step, i, fmt(g.flatten().tolist())))
        optimizer.step()
        for i, p in enumerate(params):
            out.write("param %d %d %s\n" % (step, i, fmt(p.detach().flatten().tolist())))
    for i, p in enumerate(params):
        for key, value in sorted(optimizer.state[p].items()):
            if key == "step" or value is None:
                continue
            out.write("state param%d.%s %s\n" % (i, key, fmt(value.flatten().tolist())))
    out.write("end\n")


def main():
    out_path, _, torch = output_path_and_torch(__doc__)
    torch.set_num_threads(1)
    with open(out_path, "w") as out:
        out.write("# torch %s\n" % torch.__version__)
        for name, kind, overrides in CASES:
            run_case(torch, out, name, kind, overrides)
    return 0


if __name__ == "__main__":
    sys.exit(main())
