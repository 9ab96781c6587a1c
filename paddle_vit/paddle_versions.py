"""Every workaround of a Paddle release and every private Paddle API the package uses, in one
table, each with the Paddle releases it was written and tested for.

Why: a private API (`paddle._legacy_C_ops`, a layer's `_epsilon`, an optimizer's accumulators)
may change its arguments or meaning in any release without a word, and a workaround for one
release's bug may be wrong, or only slower, in the next. On a release not listed for an entry,
the variant that needs it computes as Paddle's own module does (or the step is Paddle's own), and
one info line says which entry and why; the numbers are the same, only slower. Moving to a new
Paddle release is then: run the test suite under it, and add the release to the entries it passes.
"""
import logging
from typing import NamedTuple

import paddle

logger = logging.getLogger("paddle_vit")


class PaddleDependency(NamedTuple):
    uses: str  # what of Paddle the variant relies on
    releases: tuple  # the "major.minor" Paddle releases it was written and tested for
    where: str  # the variants that use it; on another release each is Paddle's own
    why: str


WORKAROUND_FROZEN_LAYER_NORM_WEIGHT = "frozen LayerNorm weight"
LEGACY_LAYER_NORM = "legacy layer_norm op"
COMPILED_KERNELS = "compiled kernels"
ADAMW_STATE = "AdamW's state"
SEEDED_DROPOUT = "seeded dropout op"
SHARED_REPLICAS = "replicas sharing memory"
DATALOADER_ITERATOR = "DataLoader iterator's shutdown"
SHARED_MEMORY_BATCHES = "DataLoader batches moved into shared memory"
CONVERSIONS_PER_FUNCTION = "dy2static conversions kept per function"

DEPENDENCIES = {
    WORKAROUND_FROZEN_LAYER_NORM_WEIGHT: PaddleDependency(
        "a workaround: Paddle 3.3's CPU LayerNorm computes the input gradient as if a frozen weight were all "
        "ones (30-50% off for trained weights), so the weight is handed to it as a tensor that wants a gradient",
        ("3.3",), "cpu.FastCpuLayerNorm",
        "written against 3.3's kernel: a release that mends it needs no detour"),
    LEGACY_LAYER_NORM: PaddleDependency(
        "paddle._legacy_C_ops.layer_norm(x, weight, bias, 'epsilon', e, 'begin_norm_axis', a) -> out, mean, "
        "variance; nn.LayerNorm's _normalized_shape and _epsilon",
        ("3.3",), "cpu.FastCpuLayerNorm in training (its compiled backward reads the mean and variance)",
        "a private op: its arguments and outputs may change in any release"),
    COMPILED_KERNELS: PaddleDependency(
        "the C++ kernels' paddle::experimental::matmul and addmm, LayerNorm's mean and variance as the backward "
        "reads them, and the builder's private loader (cpp_extension.extension_utils._import_module_from_library); "
        "nn.GELU's _approximate, nn.Softmax's _axis and _dtype and nn.LayerNorm's _epsilon and _normalized_shape; "
        "nn.Layer's _forward_pre_hooks and _forward_post_hooks (a hook a kernel called in a layer's place would not "
        "call); nn.Dropout's p and mode (a dropout that passes its input through in eval mode); that a custom op's first "
        "call with gradients writes its graph entry unguarded and later calls only read it (the training op's "
        "first call made by one thread at a time)",
        ("3.3",), "compiled.kernel_library and every kernel's caller: FastCpuLayerNorm, FastCpuGELU, "
        "RecomputedAttention's softmax and FastCpuAttention's in evaluation, FusedCpuEncoderLayer (training and "
        "evaluation), FusedCpuAdamW",
        "an experimental C++ API and private attributes: they may change in any release"),
    ADAMW_STATE: PaddleDependency(
        "paddle.optimizer.AdamW's private state: _param_groups, _grad_ivar(), _create_accumulators, "
        "_get_accumulator_master and the *_acc_str names, _beta1, _beta2, _epsilon, _weight_decay, _grad_clip, "
        "_amsgrad, _multi_precision, _lr_ratio, _lazy_mode, _apply_decay_param_fun",
        ("3.3",), "fused_adamw.FusedCpuAdamW (its step reads and updates the accumulators Paddle's would)",
        "private attributes: their names and layout may change in any release"),
    SEEDED_DROPOUT: PaddleDependency(
        "paddle._C_ops.dropout(x, None, p, is_test, mode, seed, fix_seed)",
        ("3.3",), "slice_random.SeededDropout and SeededDropPath (without them a step with dropout or drop path "
        "is not split into threads)",
        "a private op: its positional arguments may change in any release"),
    SHARED_REPLICAS: PaddleDependency(
        "Tensor._share_buffer_to, Tensor._copy_gradient_from, paddle.base.core.set_num_threads",
        ("3.3",), "batch_threads (plan_batch_threads says a step is not split)",
        "private methods: they may change in any release"),
    DATALOADER_ITERATOR: PaddleDependency(
        "paddle.io.DataLoader's iterators: _exit_thread_expectedly(), _try_shutdown_all(), _thread (the reader "
        "thread), _reader and its shutdown(), _blocking_queue, _workers, _shutdown and _data_queue, and that a "
        "(_ResumeIteration(), None, None) on that queue returns the reader to its stop flag",
        ("3.3",), "data.loader.end_iteration (a loop's workers and reader thread ended when the loop ends; on "
        "another release Paddle ends them when it does)",
        "private methods and attributes: they may change in any release"),
    SHARED_MEMORY_BATCHES: PaddleDependency(
        "paddle.io.dataloader.collate.default_collate_fn; DenseTensor._share_filename(use_file_descriptor) and "
        "FLAGS_dataloader_use_file_descriptor; the reducer paddle.incubate.multiprocessing registers for "
        "DenseTensor, its (rebuild, (cls, ipc_name, ...)) and that it moves nothing already in shared memory; "
        "that a worker hands its queue tensor.get_tensor(), which does not keep the tensor alive",
        ("3.3",), "data.loader.collate_in_shared_memory (a worker's batch moved into shared memory by its "
        "result queue's thread, as Paddle does)",
        "private methods and the worker's internals: they may change in any release"),
    CONVERSIONS_PER_FUNCTION: PaddleDependency(
        "paddle.jit.dy2static.program_translator.FunctionCache.convert_with_cache(cache, function), called under "
        "Paddle's conversion lock, and that the function it returns for a method takes `self` as an argument; "
        "a StaticFunction's get_concrete_program, where its calls find or trace their program",
        ("3.3",), "deploy.tracing.save_traced (every export's trace) and to_static_graph (eval.engine=to_static, "
        "train.to_static, the benchmark's to_static); on another release each layer's methods are converted again, "
        "as Paddle does: the same graph, slower",
        "a private method: its arguments and what it returns may change in any release"),
}

_SAID = set()  # (entry, release) already said in the log


def running_release():
    """The running Paddle's "major.minor" (tests substitute it)."""
    return ".".join(paddle.__version__.split(".")[:2])


def applies(name):
    """Whether the variants may use the entry `name` of DEPENDENCIES with the running Paddle; the
    first refusal of each entry says so in one info line."""
    release = running_release()
    dependency = DEPENDENCIES[name]
    if release in dependency.releases:
        return True
    if (name, release) not in _SAID:
        _SAID.add((name, release))
        logger.info("Paddle %s: %s compute as Paddle's own: the variants' %s is written for Paddle %s only (%s)",
                    paddle.__version__, dependency.where, name, ", ".join(dependency.releases), dependency.why)
    return False
