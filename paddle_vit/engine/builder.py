"""Build the model a config describes, with its pretrained weights if any."""
import logging

from ..models import ViT, get_model_config

logger = logging.getLogger("paddle_vit")


def resolve_model_config(config, num_classes=None):
    """The `ViTConfig` of `config.model`; `num_classes` fills in a `model.num_classes: null`."""
    overrides = config.model.vit_overrides()
    if config.model.num_classes is None and num_classes is not None:
        overrides["num_classes"] = num_classes
    return get_model_config(config.model.name, **overrides).validate()


def build_model(config, num_classes=None, load_weights=True):
    """Create the ViT of `config.model`; when `model.pretrained` names weights, load them
    (resampling the position embedding and re-initialising the head as needed)."""
    model = ViT(resolve_model_config(config, num_classes))
    if load_weights and config.model.pretrained:
        from ..weights import load_pretrained
        report = load_pretrained(model, config.model.pretrained, strict=True)
        logger.info("loaded %s:\n%s", config.model.pretrained, report)
    return model
