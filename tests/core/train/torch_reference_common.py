"""What the PyTorch reference scripts of tests/core/train share: their command line (one output
path) and the imports whose absence must fail the C++ test loudly, not skip it."""

import sys


def output_path_and_torch(doc):
    """(OUT, numpy, torch) from `script OUT`; exits 2 with `doc` on a bad command line, and 1
    naming the interpreter when numpy or torch cannot be imported."""
    if len(sys.argv) != 2:
        sys.stderr.write(doc)
        sys.exit(2)
    try:
        import numpy
        import torch
    except ImportError as e:
        sys.stderr.write("%s cannot import torch and numpy (scripts/install-deps.sh installs "
                         "python3-torch): %s\n" % (sys.executable, e))
        sys.exit(1)
    return sys.argv[1], numpy, torch
