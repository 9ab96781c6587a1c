"""One training step, as the trainer and the benchmark make it: forward under autocast, the
loss, the scaled backward pass, the optimizer update.

The trainer wraps more around these pieces (the finite check, accumulation windows, the
gradient all-reduce only at an update, EMA, logging); the benchmark times them bare. Nothing
here reads a tensor back to the host: a step costs no synchronisation unless its caller asks.
With `batch_threads` (variants/batch_threads.py, train.batch_threads) the forward and backward
passes run on slices of the batch in threads and the update adds their gradients first.
"""
import contextlib

import paddle
import paddle.nn.functional as F


def autocast(amp_dtype, level="O1"):
    """The context a forward pass runs in: Paddle's autocast to `amp_dtype` ("bfloat16",
    "float16") at `level`, or nothing for float32 (`amp_dtype` None)."""
    if not amp_dtype:
        return contextlib.nullcontext()
    return paddle.amp.auto_cast(enable=True, dtype=amp_dtype, level=level)


def soft_cross_entropy(logits, targets):
    """Cross-entropy against soft targets [B, K] (mixup, cutmix, label smoothing)."""
    return -(targets * F.log_softmax(logits, axis=-1)).sum(axis=-1).mean()


def classification_loss(logits, targets):
    """The mean cross-entropy in float32 of logits [B, K] against hard labels [B] (int64) or
    soft targets [B, K]."""
    logits = logits.astype("float32")
    if targets.ndim == 2:
        return soft_cross_entropy(logits, targets)
    return F.cross_entropy(logits, targets)


def forward_loss(model, images, targets, amp_context=contextlib.nullcontext):
    """The loss (a scalar tensor) of `model` on images [B, C, H, W]; `amp_context()` makes the
    context the forward pass runs in (`autocast`), the loss itself is float32."""
    with amp_context():
        logits = model(images)  # [B, K]
    return classification_loss(logits, targets)


def sliced_forward_loss(loss_of, model, images, targets, batch_threads=None):
    """loss_of(model, images, targets, first) -> the mean loss, on the whole batch (`first` True),
    or on `batch_threads`' slices, each on its replica of `model` (`first`: the slice on this
    thread), returning the batch's mean loss."""
    if batch_threads is None:
        return loss_of(model, images, targets, True)
    return batch_threads.forward(loss_of, images, targets)


def backward(loss, scaler=None, accumulate_steps=1, batch_threads=None):
    """Add this micro-step's gradients: of loss / accumulate_steps (the update averages its
    micro-steps), multiplied by the fp16 loss scale when there is a `scaler`; with
    `batch_threads`, of each slice's loss in its thread (`loss`, their detached sum, is not used)."""
    if batch_threads is not None:
        batch_threads.backward(lambda slice_loss: backward(slice_loss, scaler, accumulate_steps))
        return
    scaled = loss / accumulate_steps if accumulate_steps != 1 else loss  # x / 1 is x: no kernel spent on it
    (scaler.scale(scaled) if scaler else scaled).backward()


def apply_update(optimizer, scaler=None, batch_threads=None):
    """Step `optimizer` on the gradients added since the last update (the slices' added together
    first with `batch_threads`), then free them. With an fp16 `scaler` the step is skipped by the
    scaler itself when it finds Inf/NaN gradients; returns its found-Inf flag (a tensor, not read
    here: reading it waits for the device), or None without a scaler."""
    if batch_threads is not None:
        batch_threads.gather_gradients()
    found_inf = None
    if scaler:
        scaler.step(optimizer)
        scaler.update()
        found_inf = getattr(scaler, "_found_inf", None)
    else:
        optimizer.step()
    discard_gradients(optimizer, batch_threads)
    return found_inf


def discard_gradients(optimizer, batch_threads=None):
    """Free the gradients added since the last update (the slices' replicas' too): after an
    update, or instead of one."""
    optimizer.clear_grad(set_to_zero=False)  # freed until the next backward: lower peak memory
    if batch_threads is not None:
        batch_threads.clear_gradients()
