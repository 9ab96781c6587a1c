"""A training step's forward and backward passes shared out over threads, a slice of the batch
each, so that every core works through the whole step on a CPU.

Why: Paddle 3.3 runs its elementwise CPU kernels (softmax, GELU, the adds, transposes and
reductions of a backward pass) on one thread; only the matrix products use every core. In a
ViT-Ti/16 training step at batch 8 on two cores those kernels are about half the time, and the
second core idles through them (docs/benchmarks.md, "The training step against timm"). Paddle's
eager kernels release Python's GIL, so n Python threads, each computing the loss and its
gradients on 1/n of the batch with its products on one core, keep every core busy instead.

Each thread computes on its own replica of the model: a copy of the Layer objects whose
parameters share the model's memory (an update of the model is the replicas' update too) and
whose gradients are their own, added into the model's before the update (`gather_gradients`).
Slice i of n_i images contributes its mean loss times n_i / N, so the gradients are the whole
batch's up to the order of float additions (tests/test_batch_threads.py). Each slice is computed
in the same order every step (one math thread per slice, a fixed split), so a run is as
reproducible as with one thread.

Where this is not the same computation it is not used (`reason_not_to_split`): BatchNorm in
training (its statistics would be a slice's, not the batch's) and random draws from Paddle's one
generator in the forward pass (the threads would take its numbers in an order that changes from
run to run). The CPU fast paths' dropout and drop path draw from a seed stream of each slice
instead (slice_random.py), so models built by create_model or the trainer split with them too.
"""
import concurrent.futures
import contextlib
import copy

import paddle
import paddle.nn as nn

from .. import runtime
from ..models.config import ViTConfig
from .compiled import kernel_threads_for_this_thread
from .cpu import dense_transposes, runs_on_cpu
from ..paddle_versions import DEPENDENCIES, SHARED_REPLICAS, applies
from .slice_random import SeededDropout, SeededDropPath, draw_base_seed, draws_seeded, draws_unseeded, slice_stream

# Below this many elements in a slice's [b, N, D] activations the kernels are so short that the
# threads wait on each other for Python's GIL and gain nothing (docs/benchmarks.md: the digits
# recipe's 32 x 17 x 64 = 34,816 none, ViT-Ti/16's 4 x 197 x 192 = 151,296 and the same
# walkthrough model at batch 256 13-40%).
MIN_SLICE_ELEMENTS = 100_000
BATCH_NORMS = (nn.BatchNorm, nn.BatchNorm1D, nn.BatchNorm2D, nn.BatchNorm3D, nn.SyncBatchNorm)  # and subclasses


def reason_not_to_split(model):
    """Why the forward pass of `model` (as it is now: train or eval mode per layer) would compute
    something else on slices of the batch in threads, or None when it would not."""
    for name, layer in [("", model), *model.named_sublayers()]:
        if not layer.training:
            continue
        where = f" ({name})" if name else ""
        if isinstance(layer, BATCH_NORMS):
            return f"the model has BatchNorm in training{where}: its statistics would be a slice's"
        if draws_unseeded(layer):
            return (f"the model draws random numbers in its forward pass{where}: threads would take them "
                    f"from Paddle's one generator in a different order each run (the CPU fast paths' "
                    f"dropout and drop path do not: paddle_vit.variants.use_cpu_fast_paths)")
    return None


def slice_bounds(batch, threads):
    """[(start, stop)] of `threads` slices of a batch of `batch` (the first batch % threads one
    longer; no empty slice)."""
    threads = max(1, min(threads, batch))
    base, longer = divmod(batch, threads)
    bounds, start = [], 0
    for index in range(threads):
        stop = start + base + (1 if index < longer else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


class BatchThreads:
    """`threads` replicas of `model` (the model itself the first), each stepped by its own thread.

    forward(loss_of, images, targets) -> the batch's loss (detached; each slice's weighted loss is
    kept for its backward pass); backward(run_backward) runs run_backward(slice loss) in each
    slice's thread; gather_gradients() adds the replicas' gradients into the model's before the
    update; clear_gradients() frees the replicas' (the optimizer frees the model's)."""

    def __init__(self, model, threads, math_threads=None):
        if threads < 2:
            raise ValueError(f"BatchThreads needs 2 or more threads, got {threads}")
        self.model = model
        self.threads = threads
        self.math_threads = math_threads or runtime.math_threads()  # restored between the parallel parts
        self.replicas = [model] + [copy.deepcopy(model) for _ in range(threads - 1)]
        self._layer_pairs = [list(zip([model, *model.sublayers()], [replica, *replica.sublayers()]))
                             for replica in self.replicas[1:]]
        self._tensor_pairs = [list(zip([*model.parameters(), *model.buffers()],
                                       [*replica.parameters(), *replica.buffers()]))
                              for replica in self.replicas[1:]]
        self._share_model()
        self._random_layers = [layer for layer in model.sublayers() if isinstance(layer, (SeededDropout, SeededDropPath))]
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads - 1,
                                                           thread_name_prefix="paddle-vit-batch")
        self._slice_losses = []

    def close(self):
        self._pool.shutdown(wait=True)
        self.replicas = [self.model]

    def _share_model(self):
        """Point every replica's parameters and buffers at the model's memory and give its layers
        the model's train/eval modes and its parameters' stop_gradient: cheap, done at every step
        so that whatever replaced a tensor of the model (a loaded state dict) reaches them."""
        for tensors in self._tensor_pairs:
            for own, replica in tensors:
                own._share_buffer_to(replica)
                replica.stop_gradient = own.stop_gradient
        for layers in self._layer_pairs:
            for own, replica in layers:
                replica.training = own.training

    @contextlib.contextmanager
    def _one_math_thread_each(self):
        """Paddle's math on one thread per slice while the slices compute (MKL's setting is the
        process's), the process's own count again afterwards; the stride kernels off once for all
        threads (cpu.dense_transposes: a flag of the process, which each forward pass would
        otherwise switch off and on under the others)."""
        paddle.base.core.set_num_threads(1)
        try:
            with dense_transposes():
                yield
        finally:
            paddle.base.core.set_num_threads(self.math_threads)

    def _in_threads(self, work, slices):
        """work(index) for index in range(slices), index 0 on this thread, the others on the pool;
        returns their results in order; an exception of any is raised here, after all ended."""
        def on_worker(index):
            with kernel_threads_for_this_thread(1):
                return work(index)

        with self._one_math_thread_each():
            futures = [self._pool.submit(on_worker, index) for index in range(1, slices)]
            try:
                first = on_worker(0)
            finally:
                concurrent.futures.wait(futures)
        return [first] + [future.result() for future in futures]

    def forward(self, loss_of, images, targets):
        """loss_of(model, images, targets, first) -> the mean loss of `model` on a slice (`first`:
        the slice on this thread); returns the batch's mean loss, a detached scalar."""
        self._slice_losses = []  # a skipped backward's graphs are freed before this one's are made
        self._share_model()
        batch = images.shape[0]
        bounds = slice_bounds(batch, self.threads)

        # the random layers of each slice draw from a stream of its own, based on one number of the
        # global generator (drawn here, on this thread, only when a layer draws)
        base = draw_base_seed() if any(draws_seeded(layer) for layer in self._random_layers) else None

        def slice_loss(index):
            start, stop = bounds[index]
            with slice_stream(base, index) if base is not None else contextlib.nullcontext():
                loss = loss_of(self.replicas[index], images[start:stop], targets[start:stop], index == 0)
            return loss * ((stop - start) / batch) if len(bounds) > 1 else loss

        self._slice_losses = self._in_threads(slice_loss, len(bounds))
        with paddle.no_grad():
            total = self._slice_losses[0].detach()
            for loss in self._slice_losses[1:]:
                total = total + loss.detach()
        return total

    def backward(self, run_backward):
        """run_backward(slice loss) for each slice of the last forward, in its thread."""
        losses, self._slice_losses = self._slice_losses, []
        self._in_threads(lambda index: run_backward(losses[index]), len(losses))

    @paddle.no_grad()
    def gather_gradients(self):
        """Add every replica's gradients into the model's (before the optimizer reads them)."""
        for tensors in self._tensor_pairs:
            for own, replica in tensors:
                gradient = replica.grad
                if gradient is None:
                    continue
                if own.grad is None:
                    own._copy_gradient_from(gradient)
                else:
                    own.grad.add_(gradient)

    def clear_gradients(self):
        """Free the replicas' gradients (after the update, or when it is skipped)."""
        for replica in self.replicas[1:]:
            replica.clear_gradients(set_to_zero=False)


def slice_elements(model, batch, threads):
    """The elements of one slice's token activations [batch / threads, N, D] for a ViT `model`
    (the size of the tensors its elementwise kernels run over), or None for another model."""
    config = getattr(model, "config", None)
    if not isinstance(config, ViTConfig):
        return None
    return batch // max(threads, 1) * (config.num_patches + config.num_prefix_tokens) * config.embed_dim


def plan_batch_threads(requested, model, place, single_process, eager, batch, math_threads=None):
    """(threads, why not more): the threads a training step of `model` on batches of `batch`
    shares its batch over. `requested`: train.batch_threads (None: the math threads where the
    step can be split and each slice is large enough to pay for its thread, else 1);
    `math_threads`: the process's (None: runtime.math_threads()). A request that cannot be
    honoured is refused by the caller with the reason."""
    reason = None
    if not runs_on_cpu() or not str(place).startswith("cpu"):
        reason = "the model trains on a GPU, whose kernels use the whole device"
    elif not single_process:
        reason = "the run has several processes, each with its own batch"
    elif not eager:
        reason = "train.to_static traces the step as one graph"
    elif not applies(SHARED_REPLICAS):
        reason = (f"the replicas share the model's memory through private tensor methods written for Paddle "
                  f"{', '.join(DEPENDENCIES[SHARED_REPLICAS].releases)}, not {paddle.__version__}")
    else:
        reason = reason_not_to_split(model)
    if requested is None:
        threads = math_threads or runtime.math_threads()
        elements = slice_elements(model, batch, threads)
        if reason is None and threads < 2:
            reason = "Paddle's math runs on one thread"
        elif reason is None and (elements is None or elements < MIN_SLICE_ELEMENTS):
            reason = (f"a slice's activations ({elements or 'unknown'} elements) would be below the "
                      f"{MIN_SLICE_ELEMENTS:,} where a thread pays for itself (train.batch_threads: 2 asks anyway)")
        return (1, reason) if reason else (threads, None)
    return requested, (reason if requested > 1 else None)
