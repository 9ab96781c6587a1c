"""Linear probing: training the classifier head on a frozen representation (`model.freeze: backbone`).

The paper reads its models' quality off the frozen representation (Section 4.1): what the head
reads, i.e. the pooled token after the final norm (or `fc_norm` for mean pooling) and, where
the model has one, the pre-logits layer. That whole path is the "backbone" here; only `head`
trains. Freezing it means three things, each of which a linear probe needs:
- no gradients: every backbone parameter has `stop_gradient`, so the backward pass stops at
  the head's input and the optimizer, built over trainable parameters only, keeps no state
  (AdamW's moments, SGD's velocity) for the backbone;
- eval mode: dropout and drop-path are off in the backbone while the head trains, so the
  features are the deterministic ones a few-shot evaluation reads (`keep_backbone_in_eval`,
  called after every `model.train()`);
- a zero-initialised head (paper Section 3.2: "a zero-initialized D x K feedforward layer").
"""
import paddle


def head_parameters(vit):
    """The parameters a linear probe trains: the classifier `head` (weight [F, K], bias [K])."""
    return list(vit.head.parameters())


def freeze_backbone(vit):
    """Stop the gradients of every parameter of `vit` but the head's, and zero the head
    (in place: no random numbers drawn, so the run's other draws are unchanged)."""
    trainable = {id(parameter) for parameter in head_parameters(vit)}
    if not trainable:
        raise ValueError("freeze_backbone needs a model with a classifier head (num_classes > 0)")
    for parameter in vit.parameters():
        parameter.stop_gradient = id(parameter) not in trainable
    with paddle.no_grad():
        for parameter in head_parameters(vit):
            parameter.set_value(paddle.zeros_like(parameter))
    return vit


def keep_backbone_in_eval(vit):
    """Put every sublayer of `vit` but the head in eval mode (dropout and drop-path off), after
    `model.train()` has put all of them in training mode."""
    for layer in vit.children():
        if layer is not vit.head:
            layer.eval()
    return vit
