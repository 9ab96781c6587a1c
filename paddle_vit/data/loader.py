"""A resumable, shardable DataLoader: paddle.io.DataLoader driven by a keyed batch sampler.

Order of an epoch (the same on every rank):
    order = permutation of range(N) from shuffle_rng(seed, epoch)   (range(N) without shuffle)
    padded to total_size = num_replicas * ceil(N / num_replicas) by wrapping around:
        order + order[:total_size - N]   (repeated if N < num_replicas)
Rank r reads the contiguous block order[r * per_rank : (r + 1) * per_rank], in batches of
batch_size (the last one short unless drop_last). Every rank therefore has the same number of
samples and batches.

Training uses `by_step=True` instead (with drop_last): rank r's batch k is the r-th slice of
step k, order[(k * R + r) * B : (k * R + r + 1) * B] for R ranks of batch B, so the images of
step k are order[k * R * B : (k + 1) * R * B] whatever R is. A run on R ranks of batch B then
sees, step by step, the batches a single process of batch R * B sees, and a checkpoint resumes
on another number of processes at the same image (position k * R * B). Positions >= N of the padded order are the padding duplicates: they sit
at the end of the last rank(s). To trim them in evaluation either
    - drop them locally: `loader.padding_mask()` is True for each padded sample this rank
      reads, in reading order (batch b covers mask[b * batch_size : (b + 1) * batch_size]); or
    - gather per-sample results of all ranks (each rank has per_rank of them), concatenate in
      rank order and keep the first `loader.num_samples`: that is the data set in order.

Exact resume: `loader.set_epoch(epoch, start_batch=k)` makes the next iteration yield batches
k, k+1, ... of that epoch, the same samples with the same augmentations as without the break,
because the order comes from (seed, epoch) and each sample's augmentations from (seed, epoch,
index). `len(loader)` is always the batches of a whole epoch. Call `set_epoch` every epoch;
without it every iteration repeats the same epoch.

Repeated augmentation (`repeats` = n > 1, data.repeated_augmentation; DeiT's RASampler): the
permutation above is expanded to each index n times in a row,
    repeated = [p0, p0, ..., p0, p1, p1, ..., p1, ...]   (n copies each, n * N entries)
with copy c of image i read as the tagged index c * N + i (rng.py's `tag_copy`), so that the
dataset keys its augmentations by (seed, epoch, i, c) and the copies differ. The epoch keeps its
length: its positions are the first total_size entries of `repeated` (wrapped around only when
n * N < total_size), so an epoch sees about N / n distinct images, each n times. Rank r reads
every R-th position, r, r + R, r + 2R, ... (batch k: positions (k * B + j) * R + r, j < B), so
the n copies of an image, which sit next to each other, go to n different ranks when n <= R.
With by_step this is the same set of positions per step as without repetition: step k reads
positions k * R * B to (k + 1) * R * B - 1 whatever R, so the same images, copies and therefore
augmentations; but which rank reads which copy depends on R, and with one process the n copies
of an image are neighbours in one batch (as DeiT on one GPU). A checkpoint carries the position
in images, so a resume on another number of processes continues at the same entry of the same
`repeated` list. `repeats` = 1 is the order above exactly.
"""
import ctypes
import logging
import math
import multiprocessing
import numbers
import os
import signal
import threading

import numpy as np
import paddle
from paddle.io.dataloader.collate import default_collate_fn

from ..errors import DataError
from ..paddle_versions import DATALOADER_ITERATOR, SHARED_MEMORY_BATCHES, applies
from .rng import shuffle_rng, tag_copy

logger = logging.getLogger("paddle_vit")


class ResumableBatchSampler(paddle.io.Sampler):
    """Batches of dataset indices for one rank, keyed by (seed, epoch), resumable at any batch."""

    def __init__(self, num_samples, batch_size, *, shuffle=False, drop_last=False, seed=0,
                 num_replicas=1, rank=0, by_step=False, repeats=1):
        super().__init__()
        if num_samples <= 0:
            raise DataError("cannot load batches from an empty data set")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if isinstance(repeats, bool) or not isinstance(repeats, numbers.Integral) or repeats < 1:
            raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
        self.repeats = int(repeats)
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, {num_replicas}), got {rank}")
        self.num_samples, self.batch_size = int(num_samples), int(batch_size)
        self.shuffle, self.drop_last, self.seed = bool(shuffle), bool(drop_last), int(seed)
        self.num_replicas, self.rank = int(num_replicas), int(rank)
        if by_step and not drop_last:
            raise ValueError("by_step needs drop_last: every step must have a whole batch on every rank")
        self.by_step = bool(by_step)
        self.per_rank = math.ceil(self.num_samples / self.num_replicas)
        self.total_size = self.per_rank * self.num_replicas
        self.epoch, self.start_batch = 0, 0
        if len(self) == 0:
            logger.warning("%d samples per rank make no batch of %d with drop_last: the epoch is empty",
                           self.per_rank, self.batch_size)

    def set_epoch(self, epoch, start_batch=0):
        if not 0 <= start_batch <= len(self):
            raise ValueError(f"start_batch must be in [0, {len(self)}], got {start_batch}")
        self.epoch, self.start_batch = int(epoch), int(start_batch)

    def global_order(self, epoch=None):
        """Dataset indices of the padded epoch order, total_size of them (all ranks); with
        repeats n each index of the permutation n times in a row."""
        epoch = self.epoch if epoch is None else epoch
        if self.shuffle:
            order = shuffle_rng(self.seed, epoch).permutation(self.num_samples)
        else:
            order = np.arange(self.num_samples)
        # np.resize repeats the array: wrap-around padding (and the cut to the epoch's length)
        return np.resize(np.repeat(order, self.repeats), self.total_size)

    def global_copies(self):
        """The copy number (0 .. repeats - 1) of each position of `global_order`."""
        return np.resize(np.tile(np.arange(self.repeats), self.num_samples), self.total_size)

    def local_positions(self):
        """Positions in the padded global order that this rank reads, in reading order."""
        if self.repeats > 1:  # every R-th position from `rank`: an image's copies go to different ranks
            count = len(self) * self.batch_size if self.drop_last else self.per_rank
            return self.rank + self.num_replicas * np.arange(count)
        if self.by_step:  # batch k: slice `rank` of step k
            first = (np.arange(len(self)) * self.num_replicas + self.rank) * self.batch_size
            return (first[:, None] + np.arange(self.batch_size)[None, :]).reshape(-1)
        return np.arange(self.rank * self.per_rank, (self.rank + 1) * self.per_rank)

    def local_indices(self, epoch=None):
        """Dataset indices this rank reads in `epoch`, in reading order (padding included)."""
        return self.global_order(epoch)[self.local_positions()]

    def local_samples(self, epoch=None):
        """What this rank hands the dataset in `epoch`, in reading order: the dataset indices,
        tagged with their copy number when repeated (copy * num_samples + index)."""
        positions = self.local_positions()
        copies = self.global_copies()[positions]
        return tag_copy(self.global_order(epoch)[positions], copies, self.num_samples)

    def padding_mask(self):
        """True for each sample this rank reads that is a padding duplicate."""
        return self.local_positions() >= self.num_samples * self.repeats

    def __len__(self):
        if self.drop_last:
            return self.per_rank // self.batch_size
        return math.ceil(self.per_rank / self.batch_size)

    def __iter__(self):
        start, self.start_batch = self.start_batch, 0  # a resume applies to one iteration only
        indices = self.local_samples()
        for batch in range(start, len(self)):
            yield indices[batch * self.batch_size:(batch + 1) * self.batch_size].tolist()


class ResumableDataLoader:
    """Iterates `(images float32 [B, 3, H, W], labels int64 [B])` paddle tensors.

    Attributes: `dataset`, `batch_sampler`, `batch_size`, `num_samples` (the true sample count,
    padding excluded), `epoch`. See the module docstring for the order, padding and resume.
    """

    def __init__(self, dataset, batch_sampler, num_workers=0):
        self.dataset, self.batch_sampler = dataset, batch_sampler
        self.num_workers = int(num_workers)
        # workers are started per iteration (never persistent), so each sees the epoch set last
        self._loader = paddle.io.DataLoader(dataset, batch_sampler=batch_sampler, num_workers=self.num_workers,
                                            return_list=True, persistent_workers=False,
                                            collate_fn=collate_in_shared_memory,
                                            worker_init_fn=prepare_worker)

    @property
    def batch_size(self):
        return self.batch_sampler.batch_size

    @property
    def num_samples(self):
        return self.batch_sampler.num_samples

    @property
    def epoch(self):
        return self.batch_sampler.epoch

    def set_epoch(self, epoch, start_batch=0):
        """Select `epoch`; the next iteration starts at batch `start_batch` of it."""
        self.batch_sampler.set_epoch(epoch, start_batch)

    def padding_mask(self):
        """Bool per sample this rank reads (reading order): True = padding duplicate, drop it."""
        return self.batch_sampler.padding_mask()

    def __len__(self):
        return len(self.batch_sampler)

    def _raise_worker_error(self):
        take = getattr(self.dataset, "take_worker_error", None)
        error = take() if take is not None else None
        if error is not None:
            raise error

    def __iter__(self):
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(self.batch_sampler.epoch)
        if hasattr(self.dataset, "begin_iteration"):
            self.dataset.begin_iteration()  # reports an abandoned iteration's workers still write are ignored
        batches = len(self.batch_sampler) - self.batch_sampler.start_batch  # read before the sampler resets it
        iterator = iter(self._loader)
        try:
            for number, (images, labels) in enumerate(iterator, 1):
                # a worker's error arrives through shared memory (see AugmentedDataset)
                self._raise_worker_error()
                yield images, labels
                if number == batches:  # the last: the iterator ended by end_iteration, not by Paddle's own end
                    break
        except DataError:
            raise
        except Exception:
            self._raise_worker_error()
            raise
        finally:  # also when the caller stops early (a break closes this generator)
            end_iteration(iterator)
        self._raise_worker_error()


READER_JOIN_SECONDS = 30.0


def end_iteration(iterator):
    """End a paddle.io.DataLoader iterator now: its reader thread ended and its worker processes
    shut down before this returns. The loader's every loop ends through here, after its last
    batch as after a `break` or an error.

    Why: Paddle 3.3 leaves both running after a loop that stops early, for the process's life
    (the reader thread holds the iterator, so the iterator's `__del__` never runs): two more
    workers and a thread per `break`, each later logging "DataLoader 2 workers exit
    unexpectedly". And at its own end of a loop Paddle leaves the reader thread to finish by
    itself, freeing its last batch's tensors, up to 5 s later. A thread that frees or allocates
    Paddle memory at the moment the next loop forks its workers can hold Paddle's host-memory
    statistics lock (taken at every allocation and free), which then stays held in the child for
    ever: the worker hangs at its first free, and the loop with it (seen twice in the test
    suite's runs, once after a loop stopped early, once after one that ran to its end). So the
    reader is woken where it waits for the workers' next batch (a message on their queue;
    otherwise it would notice its stop flag within 5 s) and joined, before the workers are.

    The iterator is then garbage in reference cycles, left to Python's collector, which may run in
    a worker after the next fork: its reader and queue, whose threads wait on condition variables,
    are released here, in this process, since a worker that destroyed them would wait for ever in
    pthread_cond_destroy for threads that exist only in the parent (seen 1 run in 3 of this
    module's test without it)."""
    if not applies(DATALOADER_ITERATOR) or iterator._shutdown:
        return
    iterator._exit_thread_expectedly()  # the reader's stop flag set, its queue to the loop closed
    with_workers = hasattr(iterator, "_workers")
    if with_workers:  # wake the reader where it waits for the workers' next batch (5 s at most)
        from paddle.io.dataloader.worker import _ResumeIteration
        iterator._data_queue.put((_ResumeIteration(), None, None))
    iterator._thread.join(READER_JOIN_SECONDS)
    if iterator._thread.is_alive():
        logger.warning("a DataLoader reader thread did not end within %.0f s of its loop", READER_JOIN_SECONDS)
    iterator._reader.shutdown()  # its read-ahead threads stopped, as at Paddle's own end
    if with_workers:
        iterator._try_shutdown_all()  # each worker told to stop, then joined
    iterator._reader = iterator._blocking_queue = None  # freed now, here (the docstring's last paragraph)


def collate_in_shared_memory(samples):
    """Paddle's default collation (a list of stacked arrays, one per field); in a DataLoader
    worker each array then becomes a CPU tensor in shared memory here, in the worker's main thread.

    Why: Paddle 3.3 moves a worker's batch into shared memory as its result queue pickles it, in
    the queue's own thread, and frees the batch's first copy there. That thread is new in the
    worker, and a thread's first allocation or free registers it in Paddle's host-memory
    statistics under a write lock; a lock some thread of the main process held at the instant the
    worker was forked stays held in the worker for ever, so the worker hung on it, and the loop
    with it (seen twice in the test suite's runs: the queue's thread waiting in Stat::Update from
    StatAllocator::FreeImpl). Moved here, the batch is found already shared when the queue pickles
    it: under a debugger a worker takes that write lock twice per loop before (both times in the
    queue's thread) and never after. A worker's main thread is the forking thread's copy, already
    registered. Same arrays, as many copies.

    Made here, a batch's shared-memory file is also among those the worker removes as its loop
    ends; made in the queue's thread, it could come after that cleanup and stay in /dev/shm (a
    loop stopped early, 5 runs of 6 of 40 such loops).

    Paddle's worker hands its queue `tensor.get_tensor()`, which does not keep the tensor alive,
    so each batch is kept here until the queue has pickled it (`_SentBatches`)."""
    batch = default_collate_fn(samples)
    if paddle.io.get_worker_info() is None or not applies(SHARED_MEMORY_BATCHES):
        return batch
    sent = _SentBatches.in_this_worker()
    sent.release()
    names = []
    batch = _in_shared_memory(batch, names)
    sent.keep(batch, names)
    return batch


def _in_shared_memory(batch, names):
    """`batch` with each non-empty array a CPU tensor in shared memory (its file's name appended to
    `names`), the rest as it is."""
    if isinstance(batch, np.ndarray) and batch.size:
        tensor = paddle.to_tensor(batch, place=paddle.CPUPlace())
        by_descriptor = paddle.base.core.globals()["FLAGS_dataloader_use_file_descriptor"]
        names.append(tensor.get_tensor()._share_filename(by_descriptor)[0])
        return tensor
    if isinstance(batch, list):
        return [_in_shared_memory(field, names) for field in batch]
    if isinstance(batch, tuple):
        return tuple(_in_shared_memory(field, names) for field in batch)
    if isinstance(batch, dict):
        return {key: _in_shared_memory(field, names) for key, field in batch.items()}
    return batch


class _SentBatches:
    """A worker's batches kept alive until its result queue has pickled them: the pickling of a
    DenseTensor is wrapped (in this worker process only) to note the shared-memory file it names."""

    _instance = None  # this worker's; never made in the main process

    def __init__(self):
        from multiprocessing.reduction import ForkingPickler
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.pickled = set()  # file names the queue's thread has pickled, not yet released
        self.kept = []  # (batch, its file names), oldest first
        dense_tensor = paddle.base.core.DenseTensor
        paddles_reduce = ForkingPickler._extra_reducers[dense_tensor]

        def reduce_and_note(tensor):  # in the queue's thread
            reduced = paddles_reduce(tensor)
            if len(reduced[1]) > 1:  # (cls, ipc_name, ...); an empty tensor has no file
                with self.lock:
                    self.pickled.add(reduced[1][1])
            return reduced

        ForkingPickler.register(dense_tensor, reduce_and_note)

    @classmethod
    def in_this_worker(cls):
        if cls._instance is None or cls._instance.pid != os.getpid():
            cls._instance = cls()
        return cls._instance

    def keep(self, batch, names):
        self.kept.append((batch, set(names)))

    def release(self):
        """Drop every kept batch whose files have all been pickled (their last user is then the
        main process's copy)."""
        with self.lock:
            self.kept = [(batch, names) for batch, names in self.kept if not names <= self.pickled]
            self.pickled &= set().union(*(names for _, names in self.kept))


def prepare_worker(worker_id):
    """Every loader's `worker_init_fn`, in each DataLoader worker as it starts."""
    leave_stop_signals_to_the_main_process(worker_id)
    end_with_the_main_process()


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def end_with_the_main_process():
    """In a DataLoader worker: have the kernel send it SIGTERM when the main process ends, however
    it ends. Why: Paddle 3.3's worker looks for its parent only between reads of its index queue,
    and reads it with `get(5)`, whose 5 is `block`, not a timeout; a worker whose main process was
    killed (SIGKILL, the out-of-memory killer) therefore waited for indices for ever, outside the
    process group (`leave_stop_signals_to_the_main_process`), holding the lock on the run folder
    it inherited, so that `train.resume=auto` refused the folder as in use by the dead run
    (2026-12-05; Paddle's own loader leaves its workers the same way). The signal comes when the
    thread that started the workers ends: a loop's thread, as the workers end with the loop. Linux
    only (prctl); elsewhere the workers are left as Paddle leaves them."""
    try:
        set_signal_at_parent_death = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # no prctl in this C library
        return
    signal.signal(signal.SIGTERM, leave_through_the_cleanup)
    if set_signal_at_parent_death(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:  # the main process ended before the line above
        os._exit(128 + signal.SIGTERM)  # nothing of this worker's to clean up yet


def leave_through_the_cleanup(signum, frame):
    """A worker's SIGTERM: end through the worker loop's `finally`, where Paddle removes the
    shared-memory files of the worker's batches (a killed worker left them in /dev/shm)."""
    raise SystemExit(128 + signum)


def leave_stop_signals_to_the_main_process(worker_id):
    """In a DataLoader worker: leave the process group. A terminal's Ctrl-C and a scheduler's
    ``kill -- -PGID`` reach every process of the group; a worker they reach either dies of
    Paddle's own SIGTERM handler, so that the main process ends with "DataLoader workers exit
    unexpectedly" instead of the clean stop it makes, or runs the trainer's handler it inherited
    through fork and logs "received SIGINT" once more. The main process shuts its workers down
    itself, and a worker ends when its parent does (`end_with_the_main_process`). The signals
    Paddle sends a worker directly still act as before."""
    try:
        os.setpgid(0, 0)
    except OSError:  # not allowed here (a session leader): the group signals still reach it
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def build_dataloader(dataset, batch_size, *, shuffle, drop_last, num_workers=0, seed=0, distributed=None,
                     by_step=False, repeats=1):
    """A `ResumableDataLoader` over `dataset`.

    distributed: None shards when Paddle's world size is > 1; True shards over the world
    (also of size 1); False never shards. `seed` keys the shuffle order with the epoch.
    by_step: shard each step rather than the epoch (training; see the module docstring).
    repeats: repeated augmentation, each image `repeats` times in a row with its own
    augmentations, the epoch length kept (the module docstring); `dataset` must take tagged
    indices, as `AugmentedDataset` does.
    """
    world_size, rank = 1, 0
    if distributed is None or distributed:
        world_size = paddle.distributed.get_world_size()
        if distributed or world_size > 1:
            rank = paddle.distributed.get_rank()
        else:
            world_size = 1
    sampler = ResumableBatchSampler(len(dataset), batch_size, shuffle=shuffle, drop_last=drop_last, seed=seed,
                                    num_replicas=world_size, rank=rank, by_step=by_step, repeats=repeats)
    return ResumableDataLoader(dataset, sampler, num_workers=num_workers)
