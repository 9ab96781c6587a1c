"""What a trained ViT learned, drawn as the paper draws it (Section 4.5, Figures 6 and 7).

Four views, each in two parts: a function that computes the numbers from arrays (numpy, or
Paddle where it interpolates), which the tests check against hand-computed values, and a
function that takes a model, draws a matplotlib figure and returns ``(figure, numbers)``, the
numbers as a dict of numpy arrays:

- attention maps (Fig. 6): attention rollout (Abnar & Zuidema, 2020) through every layer, and
  the class token's attention in the last layer, one map per head, over the input image;
  `attention_figure`, numbers from `attention_rollout`, `rollout_patch_map`, `class_token_attention`;
- position-embedding similarity (Fig. 7, centre): the cosine similarity of every patch
  position's embedding with every other's; `position_similarity_figure`, numbers from
  `position_embedding_similarity`;
- embedding filters (Fig. 7, left): the principal components of the patch-embedding weights;
  `embedding_filters_figure`, numbers from `patch_embedding_components`;
- mean attention distance (Fig. 7, right; Appendix D.7): per layer and head, how far in
  pixels a patch looks; `attention_distance_figure`, numbers from `mean_attention_distance`.

`attention_overlay_image` gives one image (rollout over the input) as uint8 for VisualDL's image
tab during training. Figures are drawn on matplotlib's Agg canvas without pyplot, so nothing
global is switched, nothing accumulates in pyplot's figure list, and they display in a notebook
like any figure.
"""
import contextlib
import logging
import os

import numpy as np
import paddle
import paddle.nn.functional as F
from PIL import Image, UnidentifiedImageError

from . import fileio
from .figure_text import current as current_figure_text, use_language  # noqa: F401 (use_language: viz's API)
from .data import build_transforms
from .data.imagefolder import decode_image
from .errors import ConfigError, DataError, check_choice

logger = logging.getLogger("paddle_vit")

NUM_FILTER_COMPONENTS = 28  # the paper's Fig. 7 (left) shows the first 28


# ---- helpers -----------------------------------------------------------------------------------

def _numpy(value, dtype=np.float64):
    """A Paddle tensor or array-like as a numpy array of `dtype`."""
    if isinstance(value, paddle.Tensor):
        value = value.astype("float32").numpy()
    return np.asarray(value, dtype=dtype)


@contextlib.contextmanager
def _eval_mode(model):
    """Switch dropout and drop-path off for a look at the model, then restore its mode."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        if was_training:
            model.train()


def new_figure(width, height):
    """A matplotlib figure on the Agg canvas, not registered with pyplot."""
    # matplotlib is imported where a figure is drawn: training and evaluation import this module
    # and need none of its start-up time
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height))
    FigureCanvasAgg(figure)
    return figure


def figure_to_array(figure, dpi=100):
    """The rendered figure as uint8 [H, W, 3] (what VisualDL's `add_image` takes)."""
    figure.set_dpi(dpi)
    figure.canvas.draw()
    return np.asarray(figure.canvas.buffer_rgba())[..., :3].copy()


FIGURE_FORMATS = (".png", ".svg", ".pdf")


def save_figure(figure, path, dpi=100):
    """Write `figure` as a PNG (or SVG, PDF by the extension of `path`), atomically (the folder
    is created); returns the path. A full disk or an unwritable folder is a DataError naming the
    file, the previous one kept."""
    extension = os.path.splitext(path)[1].lower()
    file_format = extension[1:] if extension in FIGURE_FORMATS else "png"
    try:
        fileio.atomic_write(path, lambda temporary: figure.savefig(temporary, dpi=dpi, bbox_inches="tight",
                                                                   format=file_format))
    except OSError as error:
        raise DataError(f"cannot write the figure {path}: {error.strerror or error}") from None
    return path


def _grid_of(model):
    return tuple(model.patch_embed.grid_size)


def _model_input(model, images):
    """[B, 3, S, S] (or one [3, S, S]) normalised images as a tensor of the model's dtype."""
    images = paddle.to_tensor(images) if not isinstance(images, paddle.Tensor) else images
    if images.ndim == 3:
        images = images.unsqueeze(0)
    return images.astype(model.patch_embed.patch_embedding.weight.dtype)


def _attentions_of(model, images):
    """Every layer's attention weights for `images`, depth x [B, H, 1 + N, 1 + N] float64 numpy."""
    with _eval_mode(model):
        attentions = model.get_attention_maps(_model_input(model, images))
    return [_numpy(attention) for attention in attentions]


# ---- images ------------------------------------------------------------------------------------

def load_image(path):
    """The image at `path` as an RGB PIL image, EXIF orientation applied, any mode converted
    (transparency on white). A missing or unreadable file is a DataError naming it."""

    if not os.path.isfile(path):
        raise DataError(f"image {path} does not exist")
    try:
        return decode_image(path)
    except (OSError, UnidentifiedImageError, ValueError) as error:
        raise DataError(f"cannot read image {path}: {type(error).__name__}: {error}") from error


def denormalise(image_chw, mean, std):
    """A normalised float image [3, S, S] back to uint8 [S, S, 3] pixels: x * std + mean."""
    image = _numpy(image_chw)
    mean = np.asarray(mean, dtype=np.float64).reshape(-1, 1, 1)
    std = np.asarray(std, dtype=np.float64).reshape(-1, 1, 1)
    pixels = (image * std + mean).transpose(1, 2, 0)  # [S, S, 3] in [0, 1]
    return np.clip(np.round(pixels * 255.0), 0, 255).astype(np.uint8)


def upsample(maps, size):
    """Bilinear upsampling of [..., rows, cols] maps to [..., size, size] (or size = (H, W)),
    with Paddle's interpolate (align_corners=False: every patch covers its own pixels)."""
    maps = _numpy(maps, np.float32)
    size = [size, size] if isinstance(size, int) else list(size)
    leading = maps.shape[:-2]
    flat = maps.reshape((1, -1) + maps.shape[-2:])  # [1, K, rows, cols]
    with paddle.no_grad():
        resized = F.interpolate(paddle.to_tensor(flat), size=size, mode="bilinear", align_corners=False)
    return resized.numpy().reshape(leading + tuple(size)).astype(np.float64)


def overlay(image_hwc, heat, alpha=0.5, colormap="jet"):
    """Blend a heat map [H, W] (any range; scaled to [0, 1] by its min and max) in `colormap`
    over a uint8 image [H, W, 3]; returns uint8 [H, W, 3]."""
    import matplotlib

    heat = _numpy(heat)
    span = heat.max() - heat.min()
    heat = (heat - heat.min()) / span if span > 0 else np.zeros_like(heat)
    colours = matplotlib.colormaps[colormap](heat)[..., :3]  # [H, W, 3] in [0, 1]
    blended = (1.0 - alpha) * image_hwc.astype(np.float64) / 255.0 + alpha * colours
    return np.clip(np.round(blended * 255.0), 0, 255).astype(np.uint8)


# ---- attention maps (paper Fig. 6) ---------------------------------------------------------------

def attention_rollout(attentions, add_identity=True):
    """Attention rollout (Abnar & Zuidema, 2020; the paper's Appendix D.8).

    Each layer's weights are averaged over the heads; the identity is added for the residual
    connection and the rows renormalised (which is 0.5 A + 0.5 I, as in the rollout paper);
    then the layers are multiplied from the first upward: R = A_L ... A_2 A_1. Row t of R says
    how much each input token flows into token t at the output.

    Args:
        attentions: depth x [B, H, T, T] (the list `model.get_attention_maps(x)` returns).
        add_identity: account for the residual connections (False: the plain product).
    Returns:
        [B, T, T] float64; every row sums to 1.
    """
    rollout = None
    for attention in attentions:
        layer = _numpy(attention).mean(axis=1)  # [B, T, T], heads averaged
        if add_identity:
            layer = layer + np.eye(layer.shape[-1])
            layer = layer / layer.sum(axis=-1, keepdims=True)
        rollout = layer if rollout is None else layer @ rollout  # [B, T, T]
    if rollout is None:
        raise ConfigError("attention rollout needs the attention of at least one layer")
    return rollout


ROLLOUT_QUERIES = ("class", "patches", "all")


def rollout_patch_map(rollout, grid, query="class"):
    """How much each patch flows into the output that the classifier reads, [B, rows, cols].

    `query` names the output tokens: "class" the class token (row 0; the paper's pool="cls"),
    "patches" the mean over the patch tokens (pool="mean"), "all" the mean over every token
    (the walkthrough's average pooling). The class token's own column is left out, so a map
    sums to at most 1.
    """
    rollout = _numpy(rollout)
    rows, cols = grid
    check_choice("query", query, ROLLOUT_QUERIES)
    if query == "class":
        flow = rollout[:, 0]  # [B, T]
    elif query == "patches":
        flow = rollout[:, 1:].mean(axis=1)  # [B, T]
    else:  # "all"
        flow = rollout.mean(axis=1)  # [B, T]
    return flow[:, 1:].reshape(-1, rows, cols)  # [B, rows, cols]


def rollout_query_for(model):
    """The rollout query that matches how `model` pools its tokens (see `rollout_patch_map`)."""
    return {"cls": "class", "mean": "patches", "walkthrough": "all"}[model.config.pool]


def class_token_attention(attention, grid):
    """One layer's attention from the class token to every patch, per head: [B, H, rows, cols]."""
    attention = _numpy(attention)  # [B, H, T, T]
    rows, cols = grid
    return attention[:, :, 0, 1:].reshape(attention.shape[0], attention.shape[1], rows, cols)


def attention_overlay_image(model, image_chw_normalised, mean, std, *, min_side=224):
    """The attention rollout of one image over the image itself, as uint8 [S', S', 3].

    For VisualDL's image tab (`LogWriter.add_image(tag, image, step)`) while training: the image
    is de-normalised with `mean`/`std`, enlarged (nearest neighbour, so pixels stay sharp) to at
    least `min_side` pixels, and the rollout map, upsampled bilinearly, blended over it in colour.
    The rollout reads the tokens the model's pooling reads. The model is put in eval mode for
    the look and restored.

    Args:
        model: a `paddle_vit.ViT` (not a DataParallel or to_static wrapper).
        image_chw_normalised: [3, S, S] float, as the data set yields it (tensor or numpy).
        mean, std: the normalisation of the data config (`config.data.mean`, `config.data.std`).
    """
    attentions = _attentions_of(model, image_chw_normalised)
    heat = rollout_patch_map(attention_rollout(attentions), _grid_of(model), rollout_query_for(model))[0]
    image = denormalise(image_chw_normalised, mean, std)  # [S, S, 3]
    scale = max(1, -(-min_side // max(image.shape[:2])))  # ceil division
    if scale > 1:
        image = np.asarray(Image.fromarray(image).resize((image.shape[1] * scale, image.shape[0] * scale),
                                                         Image.Resampling.NEAREST))
    return overlay(image, upsample(heat, image.shape[:2]))


def attention_figure(model, images, mean, std, titles=None):
    """Paper Fig. 6 for a few images: each row shows the input, the attention rollout over it, and
    the last layer's class-token attention of every head over it.

    Args:
        images: [B, 3, S, S] normalised images (tensor or numpy).
        mean, std: their normalisation, to show them as pixels.
        titles: one string per image (e.g. the file name), or None.
    Returns:
        (figure, {"rollout": [B, rows, cols], "class_attention": [B, H, rows, cols],
                  "probabilities": [B, K]}) the last with K = 0 for a model without a head.
    """
    images = _numpy(images, np.float32)
    if images.ndim == 3:
        images = images[None]
    grid = _grid_of(model)
    attentions = _attentions_of(model, images)
    rollout = rollout_patch_map(attention_rollout(attentions), grid, rollout_query_for(model))
    heads = class_token_attention(attentions[-1], grid)
    with _eval_mode(model), paddle.no_grad():
        logits = model(_model_input(model, images)).astype("float32")
    probabilities = F.softmax(logits, axis=-1).numpy() if model.num_classes > 0 else np.zeros((len(images), 0))

    num_images, num_heads = len(images), heads.shape[1]
    size = images.shape[-2:]
    columns = 2 + num_heads
    words = current_figure_text()
    figure = new_figure(1.6 * columns, 1.75 * num_images + 0.3)
    axes = figure.subplots(num_images, columns, squeeze=False)
    for row in range(num_images):
        pixels = denormalise(images[row], mean, std)
        panels = [(pixels, words("input")), (overlay(pixels, upsample(rollout[row], size)), words("rollout"))]
        panels += [(overlay(pixels, upsample(heads[row, head], size)), words("head {head}", head=head + 1))
                   for head in range(num_heads)]
        for column, (picture, label) in enumerate(panels):
            axis = axes[row, column]
            axis.imshow(picture, interpolation="nearest")
            axis.set_xticks([])
            axis.set_yticks([])
            if row == 0:
                axis.set_title(label, fontsize=9)
        caption = titles[row] if titles else words("image {number}", number=row + 1)
        if probabilities.shape[1]:
            best = int(probabilities[row].argmax())
            caption += "\n" + words("predicted {label} ({probability})", label=best,
                                     probability=f"{probabilities[row, best]:.2f}")
        axes[row, 0].set_ylabel(caption, fontsize=8)
    figure.suptitle(words("attention rollout ({query} tokens) and the last layer's class-token attention per head",
                          query=words(rollout_query_for(model))), fontsize=10)
    figure.tight_layout()
    return figure, {"rollout": rollout, "class_attention": heads, "probabilities": probabilities}


# ---- position-embedding similarity (paper Fig. 7, centre) ----------------------------------------

def confusion_matrix_figure(confusion, class_names):
    """The confusion matrix [K, K] (rows: true class, columns: predicted) as a figure, the counts
    written in the cells for up to 20 classes."""
    confusion = np.asarray(confusion)
    size = max(4.0, 0.45 * len(class_names) + 2)
    figure = new_figure(size, size)
    axes = figure.subplots()
    image = axes.imshow(confusion, cmap="Blues")
    axes.set_xticks(range(len(class_names)), class_names, rotation=90)
    axes.set_yticks(range(len(class_names)), class_names)
    words = current_figure_text()
    axes.set_xlabel(words("predicted"))
    axes.set_ylabel(words("true"))
    if len(class_names) <= 20:
        for (row, column), count in np.ndenumerate(confusion):
            axes.text(column, row, str(count), ha="center", va="center", fontsize=7,
                      color="white" if count > confusion.max() / 2 else "black")
    figure.colorbar(image, ax=axes, fraction=0.046)
    figure.tight_layout()
    return figure


def position_embedding_similarity(position_embedding, grid, num_prefix_tokens=1):
    """Cosine similarity between the position embeddings of every pair of patches.

    Args:
        position_embedding: [1, prefix + rows * cols, D] or [prefix + rows * cols, D]
            (`model.patch_embed.full_position_embedding()`).
        grid: (rows, cols) of the patch grid.
        num_prefix_tokens: rows before the grid (the class token), left out.
    Returns:
        [rows, cols, rows, cols] float64: [r, c] is the map of patch (r, c)'s similarity with
        every patch; its own position is 1.
    """
    table = _numpy(position_embedding)
    table = table.reshape(-1, table.shape[-1])
    rows, cols = grid
    if table.shape[0] != num_prefix_tokens + rows * cols:
        raise ConfigError(f"a position embedding of {table.shape[0]} rows is not {num_prefix_tokens} prefix "
                          f"token(s) + a {rows}x{cols} grid")
    patches = table[num_prefix_tokens:]  # [N, D]
    norms = np.linalg.norm(patches, axis=1, keepdims=True)
    unit = patches / np.maximum(norms, 1e-12)
    return (unit @ unit.T).reshape(rows, cols, rows, cols)  # [N, N] -> [R, C, R, C]


def _mosaic(tiles, gap_value=np.nan):
    """[R, C, h, w(, 3)] tiles -> one [R(h + 1) - 1, C(w + 1) - 1(, 3)] picture with 1-pixel gaps."""
    rows, cols, height, width = tiles.shape[:4]
    extra = tiles.shape[4:]
    picture = np.full((rows * (height + 1) - 1, cols * (width + 1) - 1) + extra, gap_value, dtype=np.float64)
    for row in range(rows):
        for col in range(cols):
            top, left = row * (height + 1), col * (width + 1)
            picture[top:top + height, left:left + width] = tiles[row, col]
    return picture


def position_similarity_figure(model, title=None, vmin=-1.0):
    """Paper Fig. 7 (centre): for each patch position, the cosine similarity of its position
    embedding with every other position's, drawn as a grid of small maps (any grid size).

    The colour scale runs from `vmin` (the paper's -1; None: the smallest similarity, which
    shows the structure of an embedding whose similarities are all high) to 1.

    Returns (figure, {"similarity": [rows, cols, rows, cols]}). A model without a position
    embedding (position_embedding="none") is a ConfigError.
    """
    import matplotlib

    embedding = model.patch_embed.full_position_embedding()
    if embedding is None:
        raise ConfigError("the model has no position embedding (position_embedding='none'): nothing to compare")
    rows, cols = _grid_of(model)
    # the rows before the grid: the class token's (and DeiT's, registers'), none with no_embed_class
    similarity = position_embedding_similarity(embedding, (rows, cols), model.patch_embed.num_embedded_prefix)
    picture = _mosaic(similarity)
    colormap = matplotlib.colormaps["viridis"].with_extremes(bad="white")  # the gaps between maps
    side = min(7.0, 1.2 + 0.45 * max(rows, cols))
    figure = new_figure(side + 1.0, side)
    axis = figure.subplots()
    vmin = similarity.min() if vmin is None else vmin
    shown = axis.imshow(picture, cmap=colormap, vmin=vmin, vmax=1, interpolation="nearest")
    axis.set_xticks([col * (cols + 1) + (cols - 1) / 2 for col in range(cols)], [str(c + 1) for c in range(cols)])
    axis.set_yticks([row * (rows + 1) + (rows - 1) / 2 for row in range(rows)], [str(r + 1) for r in range(rows)])
    axis.tick_params(length=0, labelsize=7 if max(rows, cols) > 10 else 9)
    for spine in axis.spines.values():
        spine.set_visible(False)
    words = current_figure_text()
    axis.set_xlabel(words("input patch column"))
    axis.set_ylabel(words("input patch row"))
    figure.colorbar(shown, ax=axis, fraction=0.046, pad=0.04, label=words("cosine similarity"))
    axis.set_title(title or words("position embedding similarity ({kind})",
                                  kind=model.patch_embed.position_embedding_kind), fontsize=10)
    return figure, {"similarity": similarity}


# ---- embedding filters (paper Fig. 7, left) -----------------------------------------------------

def patch_embedding_components(weight, num_components=NUM_FILTER_COMPONENTS):
    """Principal components of the patch-embedding filters.

    The D filters of the patch projection (`model.patch_embed.patch_embedding.weight`,
    [D, C, P, P]) are D points in C*P*P dimensions; their principal components (centred, by
    SVD) are the directions the D filters vary along most, the "basis functions" the paper
    shows. Each component's sign is chosen so that its largest entry is positive.

    Returns:
        components [K, C, P, P] (unit length each), explained_variance_ratio [K], with
        K = min(num_components, D, C*P*P).
    """
    weight = _numpy(weight)
    filters = weight.reshape(weight.shape[0], -1)  # [D, C*P*P]
    centred = filters - filters.mean(axis=0, keepdims=True)
    _, singular_values, directions = np.linalg.svd(centred, full_matrices=False)  # directions [r, C*P*P]
    count = min(num_components, len(singular_values))
    components = directions[:count]
    largest = np.abs(components).argmax(axis=1)
    components = components * np.sign(components[np.arange(count), largest])[:, None]
    variance = singular_values ** 2
    ratio = variance[:count] / variance.sum() if variance.sum() > 0 else np.zeros(count)
    return components.reshape((count,) + weight.shape[1:]), ratio


def embedding_filters_figure(model, num_components=NUM_FILTER_COMPONENTS, grey=False, columns=7, title=None):
    """Paper Fig. 7 (left): the first principal components of the patch-embedding filters, each
    drawn as a P x P patch, RGB for 3 channels (grey for 1; the channel mean otherwise), each
    scaled to its own min..max.

    `grey=True` is for a model that sees grey images (three equal channels, such as the
    digits): on those, a filter acts only through the sum of its three channels, so the channels
    are summed before the analysis (otherwise the colour differences the weights were
    initialised with, which training never sees, fill the picture).

    Returns (figure, {"components": [K, C, P, P], "explained_variance_ratio": [K]}), C = 1 when grey.
    """
    weight = _numpy(model.patch_embed.pixel_filters())  # [D, C, P, P]; a hybrid: its stem's [64, C, 7, 7]
    if grey:
        weight = weight.sum(axis=1, keepdims=True)  # [D, 1, P, P]: what a grey image meets
    components, ratio = patch_embedding_components(weight, num_components)
    count, channels, patch = components.shape[0], components.shape[1], components.shape[2]
    low = components.reshape(count, -1).min(axis=1)[:, None, None, None]
    high = components.reshape(count, -1).max(axis=1)[:, None, None, None]
    scaled = (components - low) / np.maximum(high - low, 1e-12)  # [K, C, P, P] in [0, 1]
    if channels == 3:
        tiles = scaled.transpose(0, 2, 3, 1)  # [K, P, P, 3]
    else:
        tiles = np.repeat(scaled.mean(axis=1)[..., None], 3, axis=-1)  # grey: [K, P, P, 3]
    columns = min(columns, count)
    rows = -(-count // columns)
    padded = np.ones((rows * columns, patch, patch, 3))
    padded[:count] = tiles
    picture = _mosaic(padded.reshape(rows, columns, patch, patch, 3), gap_value=1.0)
    figure = new_figure(0.9 * columns + 0.4, 0.9 * rows + 0.8)
    axis = figure.subplots()
    axis.imshow(picture, interpolation="nearest")
    axis.set_axis_off()
    words = current_figure_text()
    which = words("the hybrid's ResNet stem filters" if model.config.is_hybrid else "patch-embedding filters")
    axis.set_title(title or words("{which}: first {count} principal components", which=which, count=count) + "\n" +
                   words("({percent}% of the variance of the {filters} filters of {shape})",
                         percent=f"{100 * ratio.sum():.0f}", filters=weight.shape[0],
                         shape=f"{channels}x{patch}x{patch}"), fontsize=9)
    return figure, {"components": components, "explained_variance_ratio": ratio}


# ---- mean attention distance (paper Fig. 7, right) ----------------------------------------------

def patch_distances(grid, patch_size):
    """Pixel distance between the centres of every pair of patches, [N, N] (row-major order)."""
    rows, cols = grid
    row_index, col_index = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    centres = np.stack([row_index.ravel(), col_index.ravel()], axis=1) * float(patch_size)  # [N, 2]
    return np.linalg.norm(centres[:, None, :] - centres[None, :, :], axis=-1)  # [N, N]


def mean_attention_distance(attentions, grid, patch_size, num_prefix_tokens=1):
    """The paper's "attention distance" (Section 4.5, Appendix D.7), per layer and head.

    For each query patch, the pixel distance to every key patch weighted by the attention it
    pays that patch, then averaged over query patches and images. Only patch-to-patch
    attention counts: the weights on the class token are dropped and the rest renormalised,
    so that each query's weights are a distribution over the image.

    Args:
        attentions: depth x [B, H, T, T] (`model.get_attention_maps(x)`), T = prefix + N.
        grid: (rows, cols); patch_size: pixels per patch side.
    Returns:
        [depth, H] float64, in pixels of the model input.
    """
    distances = patch_distances(grid, patch_size)  # [N, N]
    result = []
    for attention in attentions:
        weights = _numpy(attention)[:, :, num_prefix_tokens:, num_prefix_tokens:]  # [B, H, N, N]
        weights = weights / np.maximum(weights.sum(axis=-1, keepdims=True), 1e-12)
        per_query = (weights * distances).sum(axis=-1)  # [B, H, N]
        result.append(per_query.mean(axis=(0, 2)))  # [H]
    return np.stack(result)  # [depth, H]


def attention_distance_figure(model, images, title=None):
    """Paper Fig. 7 (right): mean attention distance of every head against network depth, over
    the given images ([B, 3, S, S] normalised).

    Returns (figure, {"distance": [depth, H]}), distances in pixels of the model input.
    """
    images = _numpy(images, np.float32)
    if images.ndim == 3:
        images = images[None]
    attentions = _attentions_of(model, images)
    patch_size = model.patch_embed.token_pixels  # a hybrid's token covers S x P pixels
    distance = mean_attention_distance(attentions, _grid_of(model), patch_size)
    depth, num_heads = distance.shape
    words = current_figure_text()
    figure = new_figure(4.2, 3.4)
    axis = figure.subplots()
    layers = np.arange(1, depth + 1)
    for head in range(num_heads):
        axis.scatter(layers, distance[:, head], s=18, label=words("head {head}", head=head + 1))
    distances = patch_distances(_grid_of(model), patch_size)
    axis.axhline(distances.mean(), color="grey", linestyle="--", linewidth=1, label=words("uniform attention"))
    height, width = model.patch_embed.image_size
    axis.set_ylim(0, distances.max() * 1.05)
    axis.set_xticks(layers)
    axis.set_xlabel(words("network depth (layer)"))
    axis.set_ylabel(words("mean attention distance (pixels)"))
    if num_heads <= 8:
        axis.legend(fontsize=7, loc="upper left", ncol=2)
    images_named = words("1 image") if len(images) == 1 else words("{count} images", count=len(images))
    axis.set_title(title or words("{images} of {height}x{width}, patches of {patch}", images=images_named,
                                  height=height, width=width, patch=patch_size), fontsize=9)
    figure.tight_layout()
    return figure, {"distance": distance}


# ---- the four figures at once (tools/visualize.py) ------------------------------------------------

FIGURE_NAMES = ("attention_maps", "position_embedding_similarity", "embedding_filters", "attention_distance")


def prepare_images(paths, config, image_size):
    """Read image files and put them through the config's eval transform: ([B, 3, S, S] float32,
    the B paths read). A file that cannot be read is skipped with a warning naming it, as
    tools/predict.py does; none readable at all is a DataError."""

    transform = build_transforms(config.data, image_size, train=False)
    arrays, kept = [], []
    for path in paths:
        try:
            image = load_image(path)
        except DataError as error:
            logger.warning("skipping %s", str(error).replace("cannot read image ", "unreadable image ", 1))
            continue
        arrays.append(np.asarray(transform(image, np.random.default_rng(0)), np.float32))
        kept.append(path)
    if not arrays:
        raise DataError(f"none of the {len(paths)} images could be read ({', '.join(map(str, paths[:3]))}"
                        f"{', ...' if len(paths) > 3 else ''})")
    return np.stack(arrays), kept


def is_grey(images, mean, std):
    """Whether every one of the normalised images [B, 3, S, S] has three equal channels as pixels."""
    pixels = [denormalise(image, mean, std) for image in _numpy(images, np.float32).reshape((-1,) + images.shape[-3:])]
    return all(np.array_equal(p[..., 0], p[..., 1]) and np.array_equal(p[..., 1], p[..., 2]) for p in pixels)


def write_figures(model, images, mean, std, out_dir, titles=None, max_rows=8, dpi=100):
    """Draw the four figures for `images` ([B, 3, S, S] normalised) and write them as PNGs in
    `out_dir`: the attention maps of the first `max_rows` images, the attention distance averaged
    over all of them. The position-embedding figure is skipped for a model without one.

    Returns ({name: png path}, {name: figure numbers}, {name: figure}) keyed by `FIGURE_NAMES`.
    """
    if model.config.depth == 0:
        raise ConfigError("the model has no Transformer layer (model.depth 0): there is no attention to draw")
    figures, numbers = {}, {}
    figures["attention_maps"], numbers["attention_maps"] = attention_figure(
        model, images[:max_rows], mean, std, titles[:max_rows] if titles else None)
    if model.patch_embed.full_position_embedding() is not None:
        figures["position_embedding_similarity"], numbers["position_embedding_similarity"] = \
            position_similarity_figure(model)
    else:
        logger.info("no position embedding (position_embedding='none'): similarity figure skipped")
    figures["embedding_filters"], numbers["embedding_filters"] = embedding_filters_figure(
        model, grey=is_grey(images, mean, std))
    figures["attention_distance"], numbers["attention_distance"] = attention_distance_figure(model, images)
    paths = {name: save_figure(figure, os.path.join(out_dir, f"{name}.png"), dpi)
             for name, figure in figures.items()}
    return paths, numbers, figures
