"""Position embeddings at another patch grid, computed in the forward pass (`dynamic_img_size`).

A model built with ``dynamic_img_size=True`` takes any H x W; its learned position embedding
(one vector per cell of the grid it was built for) is resampled to the input's grid on every
forward pass, as timm's ``resample_abs_pos_embed`` and transformers' ``interpolate_pos_encoding``
do. Each resampling here is two dense matrices, rows = new grid, columns = old grid:

    new grid [D, h, w] = W_rows [h, R] @ old grid [D, R, C] @ W_cols [w, C]^T

built from the sizes with Paddle ops (arange, floor, comparisons), so that a traced or exported
graph computes them from the input's shape and one implementation serves eager mode, Paddle
inference and ONNX. The methods are those of paddle_vit/weights/resample.py, which resamples at
load time with Paddle's interpolate (the arithmetic of PyTorch's kernels, align_corners=False
unless the name says otherwise):

- ``bicubic_antialias`` (timm): PIL-style separable filter, Keys cubic with a = -0.5, widened by
  the scale when downsampling, each row normalised to sum 1, taps outside the grid dropped;
- ``bicubic`` (transformers, PLSC): Keys cubic with a = -0.75 at source x = (i + 0.5) s - 0.5,
  the four taps clamped to the border;
- ``bilinear``: source x = max((i + 0.5) s - 0.5, 0), two taps, the second clamped;
- ``bilinear_align_corners``: source x = i (old - 1) / (new - 1);
- ``bicubic_align_corners`` (torchvision's ``interpolate_embeddings``): the ``bicubic`` taps at
  the corner-aligned source x = i (old - 1) / (new - 1).
"""
import paddle

RESIZE_METHODS = ("bicubic_antialias", "bicubic", "bilinear", "bilinear_align_corners", "bicubic_align_corners")
DEFAULT_RESIZE = "bicubic_antialias"  # timm's resample_abs_pos_embed


def _cubic(distance, a):
    """Keys' cubic convolution kernel at |distance| (0 beyond 2)."""
    x = distance.abs()
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0  # |x| <= 1
    far = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a  # 1 < |x| < 2
    zero = paddle.zeros_like(x)
    return paddle.where(x <= 1.0, near, paddle.where(x < 2.0, far, zero))


def _cubic_weights(t):
    """The four weights (a = -0.75, PyTorch's bicubic) of the taps at floor - 1 ... floor + 2 for
    fractional positions `t` [new]."""
    return [_cubic(t + 1.0, -0.75), _cubic(t, -0.75), _cubic(1.0 - t, -0.75), _cubic(2.0 - t, -0.75)]


def _taps(source, old, offsets, weights):
    """[new, old] matrix with weight weights[k] at column clamp(floor-based index + offsets[k])."""
    columns = paddle.arange(old, dtype="float32").unsqueeze(0)  # [1, old]
    matrix = 0.0
    for offset, weight in zip(offsets, weights):
        index = paddle.clip(source + offset, 0.0, float(old - 1)).unsqueeze(1)  # [new, 1]
        matrix = matrix + weight.unsqueeze(1) * (columns == index).astype("float32")
    return matrix  # [new, old]


def resize_matrix(new, old, method=None):
    """The [new, old] float32 matrix resampling a 1-D signal of `old` samples to `new` samples.

    `old` is a Python int (the grid the model was built for); `new` an int or, in a traced
    graph, an int64 scalar tensor taken from the input's shape. `method`: None is timm's.
    """
    method = method or DEFAULT_RESIZE
    new_float = paddle.to_tensor(new, dtype="float32") if isinstance(new, int) else new.astype("float32")
    rows = paddle.arange(new, dtype="float32")  # [new]: output sample i
    if method in ("bilinear_align_corners", "bicubic_align_corners"):
        scale = (old - 1.0) / paddle.maximum(new_float - 1.0, paddle.ones_like(new_float))
        source = rows * scale
        below = paddle.floor(source)
        t = source - below  # [new], in [0, 1)
        if method == "bicubic_align_corners":
            return _taps(below, old, (-1.0, 0.0, 1.0, 2.0), _cubic_weights(t))
        return _taps(below, old, (0.0, 1.0), (1.0 - t, t))
    scale = old / new_float  # input samples per output sample
    if method == "bicubic_antialias":
        support = paddle.maximum(scale, paddle.ones_like(scale))  # the filter widens when downsampling
        centre = (rows + 0.5) * scale  # [new], in input coordinates
        columns = paddle.arange(old, dtype="float32")  # [old]
        distance = (columns.unsqueeze(0) + 0.5 - centre.unsqueeze(1)) / support  # [new, old]
        weights = _cubic(distance, -0.5)
        return weights / weights.sum(axis=1, keepdim=True)  # each output a weighted mean
    if method == "bicubic":
        source = (rows + 0.5) * scale - 0.5
        below = paddle.floor(source)
        t = source - below  # [new], in [0, 1)
        return _taps(below, old, (-1.0, 0.0, 1.0, 2.0), _cubic_weights(t))
    if method == "bilinear":
        source = paddle.maximum((rows + 0.5) * scale - 0.5, paddle.zeros_like(rows))
        below = paddle.floor(source)
        upper_weight = source - below
        return _taps(below, old, (0.0, 1.0), (1.0 - upper_weight, upper_weight))
    raise ValueError(f"unknown resize method {method!r}; one of {', '.join(RESIZE_METHODS)}")


def resize_grid_embedding(table, old_grid, new_grid, method=None):
    """A [1, R * C, D] grid of position vectors resampled to [1, h * w, D]; `new_grid` (h, w)
    as in `resize_matrix` (ints, or scalar tensors in a traced graph)."""
    rows, cols = old_grid
    width = table.shape[-1]
    grid = table.reshape([rows, cols, width]).transpose([2, 0, 1]).astype("float32")  # [D, R, C]
    row_matrix = resize_matrix(new_grid[0], rows, method)  # [h, R]
    col_matrix = resize_matrix(new_grid[1], cols, method)  # [w, C]
    resized = paddle.matmul(paddle.matmul(row_matrix, grid), col_matrix, transpose_y=True)  # [D, h, w]
    # [D, h, w] -> [h, w, D] -> [1, h * w, D] (a reshape, not an unsqueeze after the transpose: oneDNN's
    # transpose + unsqueeze fusion in Paddle Inference gives that pair a wrong output type)
    return resized.transpose([1, 2, 0]).reshape([1, -1, width]).astype(table.dtype)


def sincos_2d_grid(rows, cols, embed_dim, temperature=10000.0):
    """`patch_embed.sincos_2d_embedding` in Paddle ops for a grid known only when the graph
    runs: [1, rows * cols, D] float32."""
    quarter = embed_dim // 4
    omega = 1.0 / temperature ** (paddle.arange(quarter, dtype="float32") / quarter)  # [D/4]
    row = paddle.arange(rows, dtype="float32").unsqueeze(1)  # [rows, 1]
    col = paddle.arange(cols, dtype="float32").unsqueeze(0)  # [1, cols]
    row_index, col_index = row + col * 0.0, col + row * 0.0  # both [rows, cols], row-major as the tokens
    row_angles = row_index.reshape([-1, 1]) * omega  # [N, D/4]
    col_angles = col_index.reshape([-1, 1]) * omega  # [N, D/4]
    table = paddle.concat([paddle.sin(row_angles), paddle.cos(row_angles),
                           paddle.sin(col_angles), paddle.cos(col_angles)], axis=1)  # [N, D]
    return table.reshape([1, -1, embed_dim])
