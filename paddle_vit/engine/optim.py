"""AdamW with the ViT recipe's parameter groups, warm-up + cosine schedule, gradient clipping."""
import math

import paddle
import paddle.nn as nn


class WarmupCosineSchedule(paddle.optimizer.lr.LRScheduler):
    """Linear warm-up from `warmup_start_lr` to `peak_lr` over `warmup_steps`, then cosine decay
    to `min_lr` at `total_steps` ("constant" keeps `peak_lr` after warm-up). Stepped once per
    optimizer update; its state (`last_epoch`, here a step count) is checkpointed."""

    def __init__(self, peak_lr, total_steps, warmup_steps=0, warmup_start_lr=0.0, min_lr=0.0, cosine=True):
        self.peak_lr = peak_lr
        self.total_steps = max(int(total_steps), 1)
        self.warmup_steps = int(warmup_steps)
        self.warmup_start_lr = warmup_start_lr
        self.min_lr = min_lr
        self.cosine = cosine
        super().__init__(learning_rate=peak_lr)

    def get_lr(self):
        step = self.last_epoch
        if step < self.warmup_steps:
            return self.warmup_start_lr + (self.peak_lr - self.warmup_start_lr) * step / self.warmup_steps
        if not self.cosine:
            return self.peak_lr
        progress = min((step - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1), 1.0)
        return self.min_lr + 0.5 * (self.peak_lr - self.min_lr) * (1.0 + math.cos(math.pi * progress))


def build_schedule(optimizer_config, schedule_config, updates_per_epoch, epochs):
    return WarmupCosineSchedule(
        peak_lr=optimizer_config.lr,
        total_steps=updates_per_epoch * epochs,
        warmup_steps=round(schedule_config.warmup_epochs * updates_per_epoch),
        warmup_start_lr=schedule_config.warmup_start_lr,
        min_lr=schedule_config.min_lr,
        cosine=schedule_config.name == "cosine")


def build_optimizer(model, optimizer_config, schedule):
    """AdamW over `model`'s trainable parameters.

    Weight decay is excluded from biases, norms, the class token and position embeddings by
    parameter (their `Tensor.name`, which is what `apply_decay_param_fun` receives), and the
    gradient's global norm is clipped (ClipGradByGlobalNorm, as the ViT recipes do).
    """
    vit = model._layers if isinstance(model, paddle.DataParallel) else model
    no_decay = {id(parameter) for parameter in vit.no_weight_decay_parameters()}
    parameters = [parameter for parameter in vit.parameters() if not parameter.stop_gradient]
    decay_names = {parameter.name for parameter in parameters if id(parameter) not in no_decay}
    if optimizer_config.head_lr_scale != 1.0 and isinstance(vit.head, nn.Linear):
        for parameter in vit.head.parameters():
            parameter.optimize_attr["learning_rate"] = optimizer_config.head_lr_scale
    clip = nn.ClipGradByGlobalNorm(optimizer_config.clip_grad_norm) if optimizer_config.clip_grad_norm > 0 else None
    return paddle.optimizer.AdamW(
        learning_rate=schedule,
        parameters=parameters,
        beta1=optimizer_config.beta1,
        beta2=optimizer_config.beta2,
        epsilon=optimizer_config.epsilon,
        weight_decay=optimizer_config.weight_decay,
        apply_decay_param_fun=lambda name: name in decay_names,
        grad_clip=clip)
