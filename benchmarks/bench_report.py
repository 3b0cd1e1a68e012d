"""What every benchmark report states about where it ran (the machine and the commit), and how
its passes are timed."""

import os
import platform
import re
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def machine_line():
    """'AMD EPYC, 2 vCPUs, 24 GiB' from /proc/cpuinfo and sysconf."""
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            names = re.findall(r"^model name\s*:\s*(.*)$", f.read(), re.M)
        if names:
            cpu = names[0]
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {os.cpu_count()} vCPUs, {mem:.0f} GiB"


def git_commit():
    """The short HEAD commit, noting uncommitted changes to tracked files."""
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return (head or "unknown") + (" + uncommitted changes" if dirty else "")
    except OSError:
        return "unknown"


def publish(report, output):
    """Prints the report and, when `output` is set, writes it there too."""
    print(report)
    if output:
        with open(output, "w") as f:
            f.write(report)


def time_passes(run, warmup, iterations):
    """Calls run() `warmup` times untimed, then `iterations` times: median, mean and min in ms."""
    for _ in range(warmup):
        run()
    ms = []
    for _ in range(iterations):
        start = time.perf_counter()
        run()
        ms.append((time.perf_counter() - start) * 1000.0)
    return {"median_ms": statistics.median(ms), "mean_ms": statistics.fmean(ms), "min_ms": min(ms)}
