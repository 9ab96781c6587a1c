"""Training at scale on paper: compute, memory and communication per GPU from a model config.

Everything here is arithmetic on `ViTConfig`, to be replaced by measurements once GPUs are at
hand (tools/scaling_estimate.py prints it; docs/scaling.md keeps a table). Sources:
- forward multiply-adds per image: the patch embedding, per layer 12 T D^2 (qkv, proj, MLP of
  ratio 4) + 2 T^2 D (q k^T, attention x v), the head; a training step is 3 forwards (the
  backward pass is 2), 4 with every layer recomputed;
- activation memory per layer and image in 16-bit training: T D (34 + 5 H T / D) bytes
  (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
  without tensor parallelism); with the layer recomputed only its input, 2 T D bytes;
- model and optimizer state per parameter with AMP O2 and AdamW (ZeRO, Rajbhandari et al. 2020):
  2 (16-bit weights) + 2 (16-bit gradients) + 12 (float32 master weights and two moments) =
  16 bytes; ZeRO 1 divides the 12 by the GPU count, ZeRO 2 the 2 + 12, ZeRO 3 all 16;
- a ring all-reduce of G bytes of gradients sends and receives 2 (n - 1) / n G bytes per GPU.
"""
import dataclasses

STATE_BYTES = {"weights": 2, "gradients": 2, "optimizer": 12}  # per parameter, AMP O2 + AdamW
SHARDING = (None, "os", "os_g", "p_g_os")  # train.sharding: none, ZeRO 1, 2, 3


def parameter_count(config):
    """Parameters of a plain ViT (class token, learned position embedding, optional pre-logits)."""
    D, depth, K = config.embed_dim, config.depth, config.num_classes
    hidden = int(D * config.mlp_ratio)
    patches = (config.image_size // config.patch_size) ** 2
    embedding = config.in_channels * config.patch_size ** 2 * D + D + D + (patches + 1) * D
    qkv_bias = 3 * D if config.qkv_bias else 0
    layer = 4 * D + 3 * D * D + qkv_bias + D * D + D + D * hidden + hidden + hidden * D + D
    head_in = config.representation_size or D
    pre_logits = D * head_in + head_in if config.representation_size else 0
    return embedding + depth * layer + 2 * D + pre_logits + head_in * K + K


def forward_macs_per_image(config):
    D, T = config.embed_dim, (config.image_size // config.patch_size) ** 2 + 1
    hidden = int(D * config.mlp_ratio)
    embedding = (T - 1) * config.in_channels * config.patch_size ** 2 * D
    layer = T * (3 * D * D + D * D + 2 * D * hidden) + 2 * T * T * D
    return embedding + config.depth * layer + (config.representation_size or D) * config.num_classes


def activation_bytes_per_image(config, recompute=False):
    D, T, H = config.embed_dim, (config.image_size // config.patch_size) ** 2 + 1, config.num_heads
    per_layer = 2 * T * D if recompute else T * D * (34 + 5 * H * T / D)
    return config.depth * per_layer


def state_bytes_per_gpu(parameters, gpus, sharding=None):
    weights, gradients, optimizer = (STATE_BYTES[key] * parameters for key in ("weights", "gradients", "optimizer"))
    if sharding in ("os", "os_g", "p_g_os"):
        optimizer /= gpus
    if sharding in ("os_g", "p_g_os"):
        gradients /= gpus
    if sharding == "p_g_os":
        weights /= gpus
    return weights + gradients + optimizer


def allreduce_bytes_per_gpu(parameters, gpus, gradient_bytes=2):
    """What each GPU sends (and receives) to average one set of gradients over `gpus`."""
    return 2 * (gpus - 1) / gpus * parameters * gradient_bytes if gpus > 1 else 0.0


@dataclasses.dataclass
class Hardware:
    """The assumed GPU: peak 16-bit TFLOP/s, the fraction of it a step reaches (MFU), memory."""
    name: str = "A100-80GB"
    peak_tflops: float = 312.0
    mfu: float = 0.4
    memory_gib: float = 80.0


def estimate(config, gpus, micro_batch, global_batch, hardware=None, recompute=False, sharding=None):
    """One row: the per-GPU figures of data-parallel training of `config` on `gpus` GPUs."""
    hardware = hardware or Hardware()
    parameters = parameter_count(config)
    accumulate = max(1, global_batch // (gpus * micro_batch))
    step_flops = 2 * forward_macs_per_image(config) * (4 if recompute else 3)  # per image
    images_per_sec = hardware.peak_tflops * 1e12 * hardware.mfu / step_flops
    update_seconds = global_batch / gpus / images_per_sec
    allreduce = allreduce_bytes_per_gpu(parameters, gpus)
    activations = activation_bytes_per_image(config, recompute) * micro_batch
    state = state_bytes_per_gpu(parameters, gpus, sharding)
    return {
        "gpus": gpus, "micro_batch": micro_batch, "accumulate_steps": accumulate,
        "recompute": recompute, "sharding": sharding or "none",
        "parameters": parameters, "train_gflops_per_image": step_flops / 1e9,
        "images_per_sec_per_gpu": images_per_sec, "seconds_per_update": update_seconds,
        "activation_gib": activations / 2 ** 30, "state_gib": state / 2 ** 30,
        "memory_gib": (activations + state) / 2 ** 30,
        "fits": (activations + state) / 2 ** 30 <= hardware.memory_gib,
        "allreduce_gib_per_update": allreduce / 2 ** 30,
        # to hide the all-reduce behind one update's compute
        "bandwidth_gbps_needed": allreduce / update_seconds / 1e9 if gpus > 1 else 0.0,
    }


def format_table(model_name, rows):
    header = ("| GPUs | micro-batch x accum. | recompute | sharding | img/s per GPU | s per update | "
              "activations GiB | weights+grads+AdamW GiB | total GiB | all-reduce GiB per update | "
              "GB/s to hide it |")
    lines = [f"**{model_name}**", "", header, "|" + "---|" * 11]
    for r in rows:
        lines.append(f"| {r['gpus']} | {r['micro_batch']} x {r['accumulate_steps']} | "
                     f"{'yes' if r['recompute'] else 'no'} | {r['sharding']} | {r['images_per_sec_per_gpu']:.0f} | "
                     f"{r['seconds_per_update']:.2f} | {r['activation_gib']:.1f} | {r['state_gib']:.2f} | "
                     f"{r['memory_gib']:.1f}{'' if r['fits'] else ' (does not fit)'} | "
                     f"{r['allreduce_gib_per_update']:.2f} | {r['bandwidth_gbps_needed']:.1f} |")
    return "\n".join(lines)
