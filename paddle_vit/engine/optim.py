"""The optimizer (AdamW or momentum SGD) with weight decay excluded by parameter, layer-wise
learning-rate decay, gradient clipping by global norm; the warm-up + cosine schedule."""
import math

import paddle
import paddle.nn as nn

from ..variants.fused_adamw import FusedCpuAdamW


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


def layer_id(name, depth):
    """The layer of the parameter `name` (as `named_parameters()` names it) for layer-wise
    learning-rate decay, numbered as timm's `param_groups_layer_decay` numbers a ViT (BEiT's
    scheme): the patch embedding (with a hybrid's ResNet), class, distillation and register
    tokens, position embedding and a pre-norm 0, encoder block i i + 1, the head and what only it
    reads (fc_norm, pre-logits, SigLIP's attention pool, the distillation head) depth + 1.
    The RoPE generation (timm's `Eva` and its own group_matcher) is numbered the same way; mixed
    RoPE's learned frequencies (`rope.freqs`) match none of Eva's patterns, which timm puts in the
    top group, and so does the default here (depth + 1).
    The encoder's final norm shares the last block's layer, depth: timm's group_matcher puts
    `norm` in the group before it (MAE's code, where a final norm is kept, gives it depth + 1;
    the two differ in that norm's scale alone, by one factor of the decay)."""
    if name.startswith(("patch_embed.", "encoder.norm_pre.")):  # CLIP's pre-norm is in timm's stem too
        return 0
    if name.startswith("encoder.layers."):
        return int(name.split(".")[2]) + 1
    if name.startswith("encoder.norm."):
        return depth
    return depth + 1


def layer_decay_scales(vit, decay):
    """{parameter name: learning-rate multiplier decay ** (top - layer)} of every parameter of
    `vit` (all 1.0 when `decay` is None); top is the last layer that has parameters: depth + 1,
    or depth for a model with no head (DINOv2's), whose final norm then trains at the full rate,
    as timm's param_groups_layer_decay counts it."""
    depth = vit.config.depth
    layers = {name: layer_id(name, depth) for name, _ in vit.named_parameters()}
    top = max(layers.values(), default=0)
    return {name: 1.0 if decay is None else decay ** (top - layer) for name, layer in layers.items()}


def learning_rate_multipliers(vit, optimizer_config):
    """{parameter name: multiplier of the scheduled learning rate}: the layer decay's scale,
    times head_lr_scale for the classifier head."""
    multipliers = layer_decay_scales(vit, optimizer_config.layer_decay)
    if isinstance(vit.head, nn.Linear):
        for name, _ in vit.head.named_parameters(prefix="head"):
            multipliers[name] *= optimizer_config.head_lr_scale
    return multipliers


def build_optimizer(model, optimizer_config, schedule):
    """The optimizer of `optimizer_config` (AdamW or momentum SGD) over `model`'s trainable
    parameters, driven by `schedule`.

    One flat list of parameters, never Paddle's parameter groups: Paddle clips each group's
    gradients on their own, which would turn ClipGradByGlobalNorm (the ViT recipes' clipping
    of the gradient's global norm) into a per-group clipping. Per-parameter settings go on the
    parameter instead: the learning-rate multiplier (layer decay, head_lr_scale) as
    `optimize_attr["learning_rate"]`, which Paddle multiplies with the scheduled rate at every
    step. Weight decay is excluded from biases, norms, the class token and position embeddings
    by parameter (not by `named_parameters()` name: Paddle's optimizer knows a parameter by its
    `Tensor.name`).
    """
    vit = model._layers if isinstance(model, paddle.DataParallel) else model
    no_decay = {id(parameter) for parameter in vit.no_weight_decay_parameters()}
    multipliers = learning_rate_multipliers(vit, optimizer_config)
    parameters = []
    for name, parameter in vit.named_parameters():
        parameter.optimize_attr["learning_rate"] = multipliers[name]  # 1.0 too: a rebuilt optimizer starts clean
        parameter.regularizer = None  # SGD's weight decay sets its own below; AdamW's is decoupled
        if not parameter.stop_gradient:  # a frozen backbone gets no optimizer state
            parameters.append(parameter)
    decays = [parameter for parameter in parameters if id(parameter) not in no_decay]
    clip = nn.ClipGradByGlobalNorm(optimizer_config.clip_grad_norm) if optimizer_config.clip_grad_norm > 0 else None
    if optimizer_config.name == "sgd":
        return _momentum_sgd(parameters, decays, optimizer_config, schedule, clip)
    decay_names = {parameter.name for parameter in decays}
    return FusedCpuAdamW(  # Paddle's AdamW, its step one compiled op on a CPU (variants/fused_adamw.py)
        learning_rate=schedule,
        parameters=parameters,
        beta1=optimizer_config.beta1,
        beta2=optimizer_config.beta2,
        epsilon=optimizer_config.epsilon,
        weight_decay=optimizer_config.weight_decay,
        apply_decay_param_fun=lambda name: name in decay_names,
        grad_clip=clip)


def _momentum_sgd(parameters, decays, optimizer_config, schedule, clip):
    """SGD with momentum as PyTorch's torch.optim.SGD (dampening 0) and optax.sgd compute it
    (g = clipped gradient + weight_decay * w):

        velocity = momentum * velocity + g          (the first step: velocity = g)
        w -= lr * velocity                          (nesterov: w -= lr * (g + momentum * velocity))

    Paddle's Momentum computes exactly this (the learning rate multiplies the velocity when it
    is applied, never inside it, so a schedule acts on the step as in PyTorch and optax); its
    weight decay is the same L2 term, given here per parameter as an L2Decay regularizer (which
    Paddle's momentum kernel adds to the gradient after clipping, as torch.optim.SGD does)
    because its `apply_decay_param_fun`-less API has no other per-parameter switch outside
    parameter groups."""
    decay_ids = {id(parameter) for parameter in decays}
    for parameter in parameters:
        wants_decay = optimizer_config.weight_decay > 0 and id(parameter) in decay_ids
        parameter.regularizer = paddle.regularizer.L2Decay(optimizer_config.weight_decay) if wants_decay else None
    return paddle.optimizer.Momentum(
        learning_rate=schedule,
        momentum=optimizer_config.momentum,
        parameters=parameters,
        use_nesterov=optimizer_config.nesterov,
        weight_decay=None,
        grad_clip=clip)
