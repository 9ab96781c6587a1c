"""The optimizer and learning-rate schedule sections of a recipe."""
import dataclasses
from typing import Optional

from ..checks import FRACTION, above, at_least, check_settings, one_of, setting, within
from ..errors import ConfigError

OPTIMIZERS = ("adamw", "sgd")
SCHEDULES = ("cosine", "constant")


@dataclasses.dataclass
class OptimizerConfig:
    """The optimizer: AdamW (the ViT/DeiT pre-training recipe) or SGD with momentum (the paper's
    fine-tuning recipe, Appendix B.1.1).

    name: "adamw" or "sgd" (momentum SGD, computed as PyTorch's torch.optim.SGD and optax.sgd:
        velocity = momentum * velocity + gradient, weights -= lr * velocity).
    lr: the peak learning rate, reached after warm-up.
    weight_decay: never applied to biases, norms, class token or position embeddings; AdamW's is
        decoupled, SGD's is L2 added to the gradient (as torch.optim.SGD's weight_decay); 0 is off.
    beta1, beta2, epsilon: AdamW's.
    momentum: SGD's momentum (paper: 0.9); nesterov: SGD with Nesterov momentum
        (the step is lr * (gradient + momentum * velocity)).
    clip_grad_norm: clip the global gradient norm to this (paper: 1.0); 0 switches it off.
    head_lr_scale: multiplies the learning rate of the head (e.g. 10 when fine-tuning).
    layer_decay: layer-wise learning-rate decay (BEiT, MAE, timm's param_groups_layer_decay):
        the patch embedding (a hybrid's ResNet included), class token and position embedding
        are layer 0, encoder block i is layer i + 1, the head (with fc_norm and a pre-logits
        layer) layer depth + 1, the encoder's final norm the last block's layer (as timm groups
        it), and each parameter's learning rate is multiplied by
        layer_decay ** (depth + 1 - layer); null (or 1.0) is off.
    """
    name: str = setting("adamw", one_of(OPTIMIZERS))
    lr: float = setting(1e-3, above(0.0))
    weight_decay: float = setting(0.05, at_least(0.0))
    beta1: float = setting(0.9, FRACTION)
    beta2: float = setting(0.999, FRACTION)
    epsilon: float = setting(1e-8, above(0.0))
    clip_grad_norm: float = setting(1.0, at_least(0.0))
    head_lr_scale: float = setting(1.0, above(0.0))
    momentum: float = setting(0.9, FRACTION)
    nesterov: bool = False
    layer_decay: Optional[float] = setting(None, within(0, 1, low_open=True, note=" (e.g. 0.75), or null for none"))

    def validate(self):
        """Raise ConfigError, one line naming the key, for a value out of its range."""
        check_settings(self, "optimizer")
        if self.nesterov and (self.name != "sgd" or self.momentum == 0):
            raise ConfigError(f"optimizer.nesterov is SGD's Nesterov momentum: it needs optimizer.name: sgd and "
                              f"optimizer.momentum > 0 (got name {self.name!r}, momentum {self.momentum!r})")
        return self


@dataclasses.dataclass
class ScheduleConfig:
    """Learning-rate schedule, updated every optimizer step.

    name: "cosine" (linear warm-up, then cosine decay to min_lr) or "constant" (warm-up, then lr).
    warmup_epochs: length of the linear warm-up from warmup_start_lr (may be fractional).
    """
    name: str = setting("cosine", one_of(SCHEDULES))
    warmup_epochs: float = setting(0.0, at_least(0.0))
    warmup_start_lr: float = setting(1e-6, at_least(0.0))
    min_lr: float = setting(1e-6, at_least(0.0))

    def validate(self):
        """Raise ConfigError, one line naming the key, for a value out of its range."""
        check_settings(self, "schedule")
        return self
