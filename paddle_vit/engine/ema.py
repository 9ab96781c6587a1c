"""Exponential moving average of the model's weights (Polyak averaging, as in DeiT)."""
import paddle


class ModelEma:
    """shadow = decay * shadow + (1 - decay) * weights, after every optimizer update; a frozen
    parameter (stop_gradient, e.g. a linear probe's backbone) is copied instead, so that its
    shadow stays bit-identical to it rather than drifting by the average's rounding.

    The shadow is a float32 copy of the model's state dict; `apply_to(model)` swaps it in (for
    evaluation) and returns the weights it replaced so they can be put back.
    """

    def __init__(self, model, decay=0.9999):
        self.decay = decay
        self.shadow = {name: value.detach().astype("float32").clone() for name, value in model.state_dict().items()}

    @paddle.no_grad()
    def update(self, model):
        for name, value in model.state_dict().items():
            shadow = self.shadow[name]
            if not paddle.is_floating_point(value):
                shadow.copy_(value, False)
            elif value.stop_gradient:  # not trained: nothing to average
                shadow.copy_(value.detach().astype("float32"), False)
            else:
                shadow.scale_(self.decay)
                shadow.add_(value.detach().astype("float32") * (1.0 - self.decay))

    def state_dict(self):
        return dict(self.shadow)

    def set_state_dict(self, state):
        for name, value in state.items():
            self.shadow[name] = (value.detach().astype("float32").clone() if isinstance(value, paddle.Tensor)
                                 else paddle.to_tensor(value, dtype="float32"))

    def apply_to(self, model):
        original = {name: value.detach().clone() for name, value in model.state_dict().items()}
        model.set_state_dict(self.shadow)
        return original
