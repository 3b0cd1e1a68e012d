"""The per-epoch progress display of `fit`: on a terminal, tqdm's bar when tqdm is installed,
else a line of its own rewritten in place; elsewhere (logs) one line per epoch."""

import sys
import time

try:
    import tqdm as _tqdm
except ImportError:  # tqdm is optional
    _tqdm = None


def _figures(logs):
    return " - ".join(f"{key}: {value:.4f}" for key, value in logs.items() if value is not None)


class EpochProgress:
    """Shows epoch `epoch` (from 1) of `epochs`, `total` samples (None: unknown).

    verbose 0: nothing; 1: a live bar and the epoch's line; 2: only the epoch's line.
    """

    def __init__(self, epoch, epochs, total, verbose, stream=None, use_tqdm=None):
        self.stream = stream if stream is not None else sys.stderr
        self.verbose = verbose
        self.total = total
        self.done = 0
        self.start = time.monotonic()
        self.title = f"Epoch {epoch}/{epochs}"
        self.last_draw = 0.0
        self.live = verbose == 1 and hasattr(self.stream, "isatty") and self.stream.isatty()
        # tqdm's bar on a terminal; in a log, its redraws would be noise.
        use_tqdm = (_tqdm is not None and self.live) if use_tqdm is None else use_tqdm
        self.bar = None
        if verbose == 1 and use_tqdm and _tqdm is not None:
            self.bar = _tqdm.tqdm(total=total, desc=self.title, unit="samples", unit_scale=False,
                                  file=self.stream, leave=True, dynamic_ncols=True)

    def seconds(self):
        return time.monotonic() - self.start

    def rate(self):
        seconds = self.seconds()
        return self.done / seconds if seconds > 0 else 0.0

    def update(self, samples, logs):
        self.done += samples
        if self.bar is not None:
            self.bar.update(samples)
            self.bar.set_postfix({k: f"{v:.4f}" for k, v in logs.items() if v is not None},
                                 refresh=False)
        elif self.live and time.monotonic() - self.last_draw >= 0.1:
            self.last_draw = time.monotonic()
            self.stream.write("\r" + self._line(logs) + "\033[K")
            self.stream.flush()

    def close(self, logs):
        """Ends the epoch with its figures (validation ones included)."""
        if self.verbose == 0:
            return
        if self.bar is not None:
            self.bar.set_postfix({k: f"{v:.4f}" for k, v in logs.items() if v is not None})
            self.bar.close()
            return
        self.stream.write(("\r" if self.live else "") + self._line(logs) +
                          ("\033[K" if self.live else "") + "\n")
        self.stream.flush()

    def _line(self, logs):
        if self.total:
            width = 30
            filled = min(width, int(width * self.done / self.total))
            arrow = ">" if filled < width else ""
            bar = "[" + "=" * filled + arrow + "." * (width - filled - len(arrow)) + "]"
            count = f"{self.done}/{self.total} {bar}"
        else:
            count = f"{self.done}"
        figures = _figures(logs)
        return (f"{self.title} {count} {self.seconds():.0f}s - {self.rate():.0f} samples/s" +
                (f" - {figures}" if figures else ""))
