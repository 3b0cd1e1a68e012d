"""`replicad serve` as a training job of two ranks, driven by the Python client.

Two ranks of one CPU slot each, under mpirun and under SLURM's srun (a one-node cluster on this
machine, scripts/slurm-local.sh), train like one daemon with two CPU slots (the same losses,
bit for bit, the same rows per slot, every rank's slots in rank 0's answer, and the same
predictions after training), and a rank killed mid-job fails the
next step with UNAVAILABLE naming it within --rank-timeout-seconds; the job then exits
non-zero and a restart on its last periodic checkpoint resumes the step count.

CTest runs it as mpi_daemon_test, where the build has MPI. Also covered: rank 1 started from a
checkpoint sees the ranks' refusals (other starting weights, another step count) within seconds of a
30 s timeout, the job still up; a rank SIGKILLed while the job checkpoints every step fails the next
step naming it within 10 s of its 3 s timeout, mpirun exits non-zero, and the job restarted on the
newest checkpoint goes on at the next step number; a bad batch is refused at rank 0 and the job goes
on; per-rank shards (--rank-shards) through the daemon and the Python client, and two `replicactl
train --rank` printing the same epoch line as one `replicactl train` of whole batches against two
equal slots.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "testing"))
from replicad_daemon import Daemon  # noqa: E402

import replicad  # noqa: E402
from replicad.datasets import load_idx  # noqa: E402

MPIRUN = ("mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2")
# Keeps rank 0 running when another rank dies, so that it can answer the step in flight
# (mpirun's default kills every rank at once).
KEEP_RANK_0 = ("--mca", "orte_abort_on_non_zero_status", "0")
# Fixed, equal weights: the split must not follow measured speeds.
ONE_PROCESS = ("--devices", "cpu:0,cpu:0", "--slot-weights", "1,1")
ONE_SLOT_A_RANK = ("--devices", "cpu:0", "--slot-weights", "1")


@pytest.fixture(scope="module")
def batches():
    images, labels = load_idx("/usr/share/datasets/fashion-mnist", "train")
    x = (images[:200].astype(np.float32) / np.float32(255))[:, None]
    return x, labels[:200].astype(np.int64)


SCRIPTS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts")


@pytest.fixture(scope="module")
def slurm():
    """srun's launcher prefix on a one-node SLURM cluster started for these tests."""
    directory = tempfile.mkdtemp(prefix="replicad_slurm_")
    started = subprocess.run(["bash", os.path.join(SCRIPTS, "slurm-local.sh"), "start",
                              directory], capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stdout + started.stderr
    os.environ["SLURM_CONF"] = os.path.join(directory, "slurm.conf")
    yield ("srun", "-n", "2", "--mpi=pmix")
    subprocess.run(["bash", os.path.join(SCRIPTS, "slurm-local.sh"), "stop", directory],
                   timeout=60)
    del os.environ["SLURM_CONF"]
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def daemons():
    started = []

    def start(*flags, launcher=()):
        daemon = Daemon(*flags, launcher=launcher)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        if daemon.process.poll() is None:
            daemon.process.send_signal(signal.SIGTERM)
            try:
                daemon.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.process.kill()


def train(client, x, y, sizes, **config):
    """Each step's (loss, accuracy, step), and the rows each rank's slots trained."""
    client.configure_training("default", **config)
    losses, begin = [], 0
    for size in sizes:
        step = client.train_step("default", x[begin:begin + size], y[begin:begin + size])
        losses.append((step.loss, step.accuracy, step.step,
                       sorted((s.begin, s.end) for s in step.slices)))
        begin += size
    return losses


@pytest.mark.parametrize("config", [dict(optimizer="sgd", lr=0.05, momentum=0.9),
                                    dict(optimizer="adam", lr=0.01)])
def test_two_ranks_train_like_one_process_with_two_slots(daemons, batches, config):
    expect_ranks_train_like_slots(daemons, batches, config, MPIRUN)


def test_srun_ranks_train_like_one_process_with_two_slots(daemons, batches, slurm):
    expect_ranks_train_like_slots(daemons, batches, dict(optimizer="sgd", lr=0.05, momentum=0.9),
                                  slurm)


def expect_ranks_train_like_slots(daemons, batches, config, launcher):
    x, y = batches
    job = daemons(*ONE_SLOT_A_RANK, launcher=launcher)
    one = daemons(*ONE_PROCESS)
    sizes = [7, 2, 64, 1, 33]
    with replicad.Client(f"127.0.0.1:{job.port}") as a, \
            replicad.Client(f"127.0.0.1:{one.port}") as b:
        got = train(a, x, y, sizes, seed=3, **config)
        want = train(b, x, y, sizes, seed=3, **config)
        assert got == want  # loss, accuracy and step of each step, bit for bit
        # Predict on rank 0's own slot, with the trained weights: within 1e-6 of the other
        # daemon's (its two slots split the rows differently; a slice's size picks kernels).
        p = a.predict("default", x[:16])
        q = b.predict("default", x[:16])
        for name in q:
            np.testing.assert_allclose(p[name], q[name], rtol=1e-6, atol=1e-6)
        # Rank 0 answers for every rank's slot, naming the rank.
        step = a.train_step("default", x[:8], y[:8])
        assert sorted((s.rank, s.begin, s.end) for s in step.slices) == [(0, 0, 4), (1, 4, 8)]


def test_a_bad_batch_is_refused_at_rank_0_and_the_job_goes_on(daemons, batches):
    """Rank 0 checks the whole batch before any rank is sent its rows: a bad label in rank 1's
    rows is INVALID_ARGUMENT naming it, nothing trains anywhere, and the next step is step 1."""
    x, y = batches
    job = daemons(*ONE_SLOT_A_RANK, launcher=MPIRUN)
    with replicad.Client(f"127.0.0.1:{job.port}") as client:
        client.configure_training("default", optimizer="sgd", lr=0.05, seed=3)
        bad = y[:8].copy()
        bad[7] = 99  # The last row: rank 1's.
        with pytest.raises(replicad.InvalidArgument, match="must be a class in"):
            client.train_step("default", x[:8], bad)
        step = client.train_step("default", x[:8], y[:8])
        assert step.step == 1 and step.samples == 8


def rank_pid(daemon, rank, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for line in list(daemon.output):
            match = re.search(rf"rank {rank} of \d+ \(pid (\d+)\)", line)
            if match:
                return int(match.group(1))
        time.sleep(0.1)
    raise AssertionError("no rank line:\n" + "".join(daemon.output))


def test_a_killed_rank_fails_the_step_naming_it_and_a_restart_resumes(daemons, batches):
    x, y = batches
    root = tempfile.mkdtemp(prefix="replicad_ranks_")
    try:
        os.makedirs(os.path.join(root, "ckpt"))
        flags = (*ONE_SLOT_A_RANK, "--checkpoint-root", root, "--rank-timeout-seconds", "3")
        job = daemons(*flags, launcher=MPIRUN + KEEP_RANK_0)
        with replicad.Client(f"127.0.0.1:{job.port}") as client:
            train(client, x, y, [8, 8, 8], optimizer="sgd", lr=0.05, checkpoint_every_steps=1,
                  checkpoint_dir="ckpt")
            os.kill(rank_pid(job, 1), signal.SIGKILL)
            start = time.time()
            with pytest.raises(replicad.errors.Unavailable) as failed:
                client.train_step("default", x[:8], y[:8])
            took = time.time() - start
        assert "rank 1 of 2" in str(failed.value), failed.value
        assert took < 3 + 10, f"the step took {took:.1f} s to fail; the bound is 3 s"
        # The job ends, non-zero, for its launcher to restart it.
        assert job.process.wait(timeout=60) != 0
        assert any("the training group is broken" in line for line in job.output)

        checkpoints = sorted(os.listdir(os.path.join(root, "ckpt")))
        newest = [c for c in checkpoints if c.endswith(".onnx")][-1]
        assert newest == "default-step000000003.onnx", checkpoints
        again = daemons(*flags, "--model", f"default={os.path.join(root, 'ckpt', newest)}",
                        launcher=MPIRUN)
        with replicad.Client(f"127.0.0.1:{again.port}") as client:
            step = client.train_step("default", x[:8], y[:8])
        assert step.step == 4
        # Resumed with its periodic checkpoints (the configuration the checkpoint carries).
        assert step.checkpoint_path.endswith("default-step000000004.onnx"), step
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_ranks_that_do_not_match_rank_0_fail_the_step_at_once(daemons, batches):
    """Rank 1 started from another model (a checkpoint, with its own training configuration):
    its steps fail on every rank with FAILED_PRECONDITION naming rank 1 and what differs
    (first its configuration, then, configured alike, its weights), long before the ranks'
    timeout, and the job stays up."""
    x, y = batches
    root = tempfile.mkdtemp(prefix="replicad_ranks_")
    try:
        os.makedirs(os.path.join(root, "ckpt"))
        alone = daemons("--checkpoint-root", root)
        with replicad.Client(f"127.0.0.1:{alone.port}") as client:
            train(client, x, y, [8], optimizer="adam", lr=0.01, checkpoint_every_steps=1,
                  checkpoint_dir="ckpt")
        checkpoint = os.path.join(root, "ckpt", "default-step000000001.onnx")
        assert os.path.exists(checkpoint)
        rank_1_from_checkpoint = (
            "bash", "-c",
            f'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exec "$@" --model default={checkpoint}; '
            'else exec "$@"; fi', "_")
        job = daemons(*ONE_SLOT_A_RANK, "--checkpoint-root", root, "--rank-timeout-seconds", "30",
                      launcher=MPIRUN + rank_1_from_checkpoint)
        with replicad.Client(f"127.0.0.1:{job.port}") as client:
            start = time.time()
            with pytest.raises(replicad.errors.FailedPrecondition,
                               match="rank 1 of 2: this rank does not train with rank 0's "
                                     "configuration"):
                client.train_step("default", x[:8], y[:8])
            client.configure_training("default", optimizer="sgd", lr=0.05)
            with pytest.raises(replicad.errors.FailedPrecondition,
                               match="rank 1 of 2 starts from other weights than rank 0"):
                client.train_step("default", x[:8], y[:8])
            assert time.time() - start < 15
        assert job.process.poll() is None
    finally:
        shutil.rmtree(root, ignore_errors=True)


def port_of_rank(daemon, rank, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for line in list(daemon.output):
            match = re.search(rf"rank {rank} of \d+: gRPC listening on port (\d+)", line)
            if match:
                return int(match.group(1))
        time.sleep(0.1)
    raise AssertionError("no listening line of rank %d:\n%s" % (rank, "".join(daemon.output)))


def concurrently(*calls):
    """Runs each call on a thread of its own (a rank's call returns once every rank has been
    sent its shard); their results, or the replicad errors they raised, in call order."""
    results = [None] * len(calls)

    def run(i):
        try:
            results[i] = calls[i]()
        except replicad.errors.ReplicadError as error:
            results[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results


def test_per_rank_shards_train_like_one_process(daemons, batches):
    """--rank-shards: each rank takes its own rows of a step from its own client (a data loader
    per rank); five eighths of every batch to rank 0 and the rest to rank 1 train like one
    daemon whose two slots have weights 5 and 3, bit for bit."""
    x, y = batches
    job = daemons(*ONE_SLOT_A_RANK, "--rank-shards", launcher=MPIRUN)
    one = daemons("--devices", "cpu:0,cpu:0", "--slot-weights", "5,3")
    config = dict(optimizer="sgd", lr=0.05, momentum=0.9, seed=3)
    with replicad.Client(f"127.0.0.1:{job.port}") as r0, \
            replicad.Client(f"127.0.0.1:{port_of_rank(job, 1)}") as r1, \
            replicad.Client(f"127.0.0.1:{one.port}") as b:
        # Every rank is configured by its own client, alike.
        r0.configure_training("default", **config)
        r1.configure_training("default", **config)
        b.configure_training("default", **config)
        begin = 0
        for step, size in enumerate([8, 16, 24, 8], start=1):
            cut = begin + size * 5 // 8
            xs, ys = x[begin:begin + size], y[begin:begin + size]
            first, rest = slice(0, cut - begin), slice(cut - begin, size)
            results = concurrently(
                lambda: r0.train_step("default", xs[first], ys[first], shard=(step, 0, 2)),
                lambda: r1.train_step("default", xs[rest], ys[rest], shard=(step, 1, 2)))
            want = b.train_step("default", xs, ys)
            for rank in (0, 1):
                got = results[rank]
                assert not isinstance(got, Exception), got
                assert (got.loss, got.accuracy, got.step, got.samples) == \
                    (want.loss, want.accuracy, want.step, want.samples), (rank, step)
            begin += size

        # A whole batch is refused by every rank of such a job; a shard naming another rank
        # fails the step on both ranks (naming the field), changes nothing, and the job goes on.
        with pytest.raises(replicad.errors.FailedPrecondition, match="per-rank shards"):
            r0.train_step("default", x[:4], y[:4])
        errors = concurrently(
            lambda: r0.train_step("default", x[:4], y[:4], shard=(5, 0, 2)),
            lambda: r1.train_step("default", x[:4], y[:4], shard=(5, 0, 2)))
        assert isinstance(errors[1], replicad.errors.InvalidArgument), errors
        assert "shard.rank: this is rank 1, received 0" in str(errors[1])
        assert "rank 1 of 2: shard.rank" in str(errors[0]), errors
        ok = concurrently(
            lambda: r0.train_step("default", x[:4], y[:4], shard=(5, 0, 2)),
            lambda: r1.train_step("default", x[:4], y[:4], shard=(5, 1, 2)))
        assert ok[0].step == ok[1].step == 5


def test_a_shard_is_refused_by_a_job_of_whole_batches(daemons, batches):
    x, y = batches
    job = daemons(*ONE_SLOT_A_RANK, launcher=MPIRUN)
    with replicad.Client(f"127.0.0.1:{job.port}") as client:
        with pytest.raises(replicad.errors.FailedPrecondition, match="--rank-shards"):
            client.train_step("default", x[:4], y[:4], shard=(1, 0, 2))
        assert client.train_step("default", x[:4], y[:4]).step == 1


def test_replicactl_feeds_each_rank_its_shards(daemons):
    """`replicactl train --rank R --world-size N`, one per rank, trains like one replicactl
    sending whole batches to a daemon of two equal slots: the same epoch line."""
    job = daemons(*ONE_SLOT_A_RANK, "--rank-shards", launcher=MPIRUN)
    one = daemons(*ONE_PROCESS)
    bin_dir = os.environ.get("REPLICAD_BIN_DIR",
                             os.path.join(os.path.dirname(__file__), "../../../build/bin"))
    common = ["train", "--model", "default", "--data", "/usr/share/datasets/fashion-mnist",
              "--epochs", "1", "--batch-size", "64", "--limit", "640", "--optimizer", "sgd",
              "--lr", "0.05", "--momentum", "0.9"]
    replicactl = os.path.join(bin_dir, "replicactl")
    ranks = [subprocess.Popen([replicactl, "--server", f"127.0.0.1:{port}", *common, "--rank",
                               str(rank), "--world-size", "2"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for rank, port in ((0, job.port), (1, port_of_rank(job, 1)))]
    outputs = [r.communicate(timeout=300)[0] for r in ranks]
    whole = subprocess.run([replicactl, "--server", f"127.0.0.1:{one.port}", *common],
                           capture_output=True, text=True, timeout=300)

    def epoch_line(text):
        match = re.search(r"epoch 1: (train loss .*?), [\d.]+ samples/s", text)
        assert match, text
        return match.group(1)

    assert [r.returncode for r in ranks] == [0, 0], outputs
    assert whole.returncode == 0, whole.stdout + whole.stderr
    want = epoch_line(whole.stdout)
    assert [epoch_line(o) for o in outputs] == [want, want]
