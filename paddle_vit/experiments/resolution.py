"""Accuracy at input sizes other than the training one: where the kinds of position embedding
part ways (RoPE-ViT, Heo et al., ECCV 2024, Figure 3).

The paper's Appendix D.4 compares the kinds at the training resolution and finds little
difference. At another resolution the patch grid has another size and each kind meets it its own
way, here as a model built with ``dynamic_img_size`` meets it (models/token_embed.py):
- ``learned``: the table resampled to the new grid (bicubic, timm's method), as the paper does
  before fine-tuning at a higher resolution (Section 3.2), but without the fine-tuning;
- ``learned_2d``: its row and column tables resampled, each along its own axis (below);
- ``sincos_2d``: computed at the new grid, its frequencies unchanged: a patch further out gets
  angles the model never saw;
- ``rope_axial``, ``rope_mixed``: the rotary table computed for the new grid (models/rope.py),
  likewise further out;
- ``none``: nothing to adapt, a bag of more patches.
Every model sees the validation images through its recipe's eval transform at each size, the
resize its training data had.
"""
import numpy as np
import paddle

from ..data.datasets import build_datasets
from ..data.loader import build_dataloader
from ..errors import WeightsError
from ..models.vit import ViT
from ..viz import current_figure_text, new_figure

# the composition of a learned_2d embedding, which dynamic_img_size does not resample
LEARNED_2D_TABLES = ("patch_embed.row_embedding", "patch_embed.column_embedding",
                     "patch_embed.class_position_embedding")


def at_any_size(model, pad=False):
    """A copy of the trained `model` (a `ViT`, left as it is) that takes inputs of
    any size the patch divides (`pad`: any size, padded up to a multiple of the patch with
    dynamic_img_pad), in eval mode. It computes what `model` computes at the training size.

    A ``learned_2d`` model becomes a ``learned`` one whose table is its row and column tables
    composed: the same vectors at the training grid, and at another grid each output of the
    resampling is a weighted mean of its neighbours (every method's weights sum to 1), so
    resampling the composed table in 2-D is resampling the row table along the rows and the
    column table along the columns."""
    config = model.config
    state = dict(model.state_dict())
    if config.position_embedding == "learned_2d":
        for name in LEARNED_2D_TABLES:
            state.pop(name)
        state["patch_embed.position_embedding"] = model.patch_embed.full_position_embedding().detach()
        config = config.replace(position_embedding="learned")
    copy = ViT(config.replace(dynamic_img_size=True, dynamic_img_pad=pad))
    missing, unexpected = copy.set_state_dict(state)
    if missing or unexpected:
        raise WeightsError(f"the copy at any size does not take the model's weights: missing {missing}, "
                           f"unexpected {unexpected}")
    copy.eval()
    return copy


def validation_sets(data_config, sizes):
    """{size: the validation set of `data_config` through its eval transform at that size}."""
    return {size: build_datasets(data_config, size)[1] for size in sizes}


def top1(model, dataset, batch_size=512):
    """Top-1 accuracy of `model` (in eval mode, no gradients) on `dataset`."""
    model.eval()
    correct = total = 0
    loader = build_dataloader(dataset, batch_size, shuffle=False, drop_last=False, distributed=False)
    with paddle.no_grad():
        for images, labels in loader:
            predictions = model(images).argmax(axis=1).numpy()  # [B]
            labels = labels.numpy() if hasattr(labels, "numpy") else np.asarray(labels)
            correct += int((predictions == labels.reshape(-1)).sum())
            total += len(predictions)
    return correct / total


def accuracy_at_sizes(models, data_config, sizes, pad=False, batch_size=512):
    """The validation top-1 of each trained model at each input size (RoPE-ViT's Figure 3).

    Args:
        models: {name: a trained `ViT`}, e.g. one per kind of position embedding,
            all trained at one size; each is evaluated through `at_any_size` (not changed).
        data_config: the `DataConfig` they were trained on; its validation split, through its
            eval transform at each size, is the test.
        sizes: the input sizes in pixels (the training size among them gives the reference).
        pad: pad sizes the patch does not divide (dynamic_img_pad); else such a size is refused.
    Returns:
        {name: {size: top-1}}, names in the order of `models`, sizes in the order given.
    """
    datasets = validation_sets(data_config, sizes)
    accuracy = {}
    for name, model in models.items():
        resizable = at_any_size(model, pad=pad)
        accuracy[name] = {size: top1(resizable, datasets[size], batch_size) for size in sizes}
    return accuracy


def resolution_figure(accuracy, train_size=None, title=None):
    """Validation top-1 against the test resolution, one line per model (`accuracy` as
    `accuracy_at_sizes` returns it); the training size dashed. Returns the figure."""
    words = current_figure_text()
    figure = new_figure(6.0, 3.6)
    axis = figure.subplots()
    for name, by_size in accuracy.items():
        sizes = list(by_size)
        axis.plot(sizes, [by_size[size] for size in sizes], marker="o", label=name)
    sizes = sorted({size for by_size in accuracy.values() for size in by_size})
    if train_size is not None:
        axis.axvline(train_size, color="black", linestyle=":", linewidth=1, label=words("trained at {size} px", size=train_size))
    axis.axhline(0.1, color="grey", linestyle="--", linewidth=1, label=words("chance"))
    axis.set_xticks(sizes, [str(size) for size in sizes])
    axis.set_xlabel(words("test resolution (pixels)"))
    axis.set_ylabel(words("val top-1"))
    axis.set_ylim(0, 1)
    axis.legend(fontsize=8)
    axis.set_title(title or words("accuracy at other resolutions, no fine-tuning"), fontsize=9)
    figure.tight_layout()
    return figure
