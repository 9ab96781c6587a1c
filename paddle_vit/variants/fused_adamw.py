"""AdamW's update of the whole model as one compiled op (kernels/adamw.cc), with the gradients'
global-norm clipping folded in, in eager float32 on a CPU.

Why: Paddle 3.3's AdamW has no multi-tensor path. Its step clips (a norm, a sum and a
multiplication per parameter) and then starts one adamw kernel per parameter from Python, each
on one thread: about 30 ms a step for ViT-Ti/16's 152 parameters, a core idle
(docs/benchmarks.md, "The training step against timm"). The compiled update reads each gradient
twice (its norm, then the update) and each parameter and moment once, on the kernel threads.

`FusedCpuAdamW` is Paddle's AdamW with the same accumulators (moments and beta powers under the
same names): its state dict, a checkpoint and a resumed run are the same either way, and where the
fused update does not apply (not every parameter float32 on a CPU with a gradient, parameter
groups, AMSGrad, multi-precision, an `lr_ratio` function, a clip other than ClipGradByGlobalNorm
or a parameter excluded from it, the kernels not built) its step is Paddle's own. The numbers are
Paddle's to float rounding (the norm is summed in double): tests/test_fused_adamw.py.
"""
import paddle
import paddle.nn as nn

from .compiled import kernel_library, kernel_threads
from ..paddle_versions import ADAMW_STATE, applies


class FusedCpuAdamW(paddle.optimizer.AdamW):
    """`paddle.optimizer.AdamW` whose step, in eager float32 on a CPU, is one compiled op."""

    @paddle.no_grad()
    def step(self):
        if not applies(ADAMW_STATE):  # before any private attribute is read
            return super().step()
        params_grads = self._params_and_gradients()
        library = self._library_for(params_grads)
        if library is None:
            return super().step()
        if not params_grads:
            return None
        parameters = [parameter for parameter, _ in params_grads]
        self._create_accumulators(paddle.static.default_main_program().global_block(), parameters)
        accumulator = lambda kind: [self._get_accumulator_master(kind, parameter) for parameter in parameters]
        clip = self._grad_clip.clip_norm if self._grad_clip is not None else 0.0
        learning_rate = float(self.get_lr())
        library.paddle_vit_adamw(
            [parameter.detach() for parameter in parameters],  # the same memory; Paddle updates no leaf in place
            [grad for _, grad in params_grads], accumulator(self._moment1_acc_str),
            accumulator(self._moment2_acc_str), accumulator(self._beta1_pow_acc_str),
            accumulator(self._beta2_pow_acc_str),
            [float(parameter.optimize_attr.get("learning_rate", 1.0)) for parameter in parameters],
            [int(self._decays(parameter)) for parameter in parameters], learning_rate, float(self._beta1),
            float(self._beta2), float(self._epsilon), float(self._weight_decay), float(clip), kernel_threads())
        return None

    def _params_and_gradients(self):
        """[(parameter, its gradient)] of the parameters Paddle's step would update, or None where
        the parameters are in groups."""
        if isinstance(self._param_groups[0], dict):
            return None
        return [(parameter, parameter._grad_ivar()) for parameter in self._param_groups
                if not parameter.stop_gradient and parameter._grad_ivar() is not None]

    def _decays(self, parameter):
        return self._apply_decay_param_fun is None or self._apply_decay_param_fun(parameter.name)

    def _library_for(self, params_grads):
        """The compiled kernels where the fused update computes Paddle's step, else None."""
        if params_grads is None or not paddle.in_dynamic_mode() or paddle.get_device() != "cpu":
            return None
        if self._amsgrad or self._multi_precision or self._lr_ratio is not None or self._lazy_mode:
            return None
        if not all(isinstance(value, (int, float)) for value in (self._beta1, self._beta2, self._weight_decay)):
            return None  # betas or decay given as tensors
        if self._grad_clip is not None and type(self._grad_clip) is not nn.ClipGradByGlobalNorm:
            return None
        if any(getattr(parameter, "need_clip", True) is False for parameter, _ in params_grads):
            return None
        for parameter, grad in params_grads:
            if parameter.dtype != paddle.float32 or grad.dtype != paddle.float32 or grad.is_selected_rows():
                return None
            if getattr(parameter, "main_grad", None) is not None:  # Paddle's step would read that one
                return None
            if not isinstance(parameter.optimize_attr.get("learning_rate", 1.0), (int, float)):
                return None
        return kernel_library()
