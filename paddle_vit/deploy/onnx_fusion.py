"""ONNX Runtime's fused attention kernel for an exported ViT (a graph only ONNX Runtime runs).

The export (`onnx_export.export_onnx`) writes each attention in standard ONNX ops, as the
walkthrough's `Attention` computes it (H heads of size d = D / H, N tokens):

    x [B, N, Din] -> MatMul(W_qkv [Din, 3D]) -> Add(b_qkv [3D], absent without qkv_bias)
      -> Reshape [0, 0, 3, H, d] -> Split on axis 2 into three [B, N, 1, H, d]
      -> q [B, H, N, d], k^T [B, H, d, N], v [B, H, N, d]   (Squeeze/Transpose, in any order)
      -> MatMul(q, k^T) -> Mul(scale) -> Softmax(-1) -> MatMul(., v) [B, H, N, d]
      -> Transpose [0, 2, 1, 3] -> Reshape [0, 0, D] -> y [B, N, D]

`fuse_attention(model)` replaces each such subgraph by `com.microsoft.Attention(x, W_qkv, b_qkv)`
with `num_heads` H and the graph's own `scale`: the same arithmetic in one kernel, without the
three split copies and four transposes per layer. Its column order is the export's (q, k, v, each
H heads of d contiguous columns), so the weights are used as they are. ONNX Runtime's dynamic
quantizer turns the fused node into `QAttention` (the q/k/v projection in int8, the two products
of activations in float32).

Only subgraphs whose every step is checked (the permutations are followed axis by axis, the
constants read) are replaced; anything else is left as it is and simply not counted. The fused
graph runs faster than the unfused one in float32 and in dynamic int8 (docs/benchmarks.md, "ONNX
Runtime and int8").
"""
import numpy as np

MS_DOMAIN = "com.microsoft"
# what the axes of one Split output [B, N, 1, H, d] must become for q, k^T and v
SPLIT_AXES = ("batch", "token", "part", "head", "channel")
WANTED_AXES = {
    0: ("batch", "head", "token", "channel"),  # q
    1: ("batch", "head", "channel", "token"),  # k, transposed for q k^T
    2: ("batch", "head", "token", "channel"),  # v
}


class _Graph:
    """Lookups over an onnx GraphProto: producers, consumers, constant initializers."""

    def __init__(self, graph):
        from onnx import numpy_helper  # here: the onnx extra is optional

        self.graph = graph
        self.initializers = {tensor.name: tensor for tensor in graph.initializer}
        self.producer = {output: node for node in graph.node for output in node.output}
        self.consumers = {}
        for node in graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.outputs = {value.name for value in graph.output}
        self._to_array = numpy_helper.to_array

    def constant(self, name):
        """The initializer `name` as a numpy array, or None when it is not one."""
        tensor = self.initializers.get(name)
        return None if tensor is None else self._to_array(tensor)

    def only_consumer(self, name, op_type):
        """The single node that reads `name` if it has `op_type` (and `name` is no graph output)."""
        readers = self.consumers.get(name, [])
        if len(readers) != 1 or readers[0].op_type != op_type or name in self.outputs:
            return None
        return readers[0]

    def producer_of(self, name, op_type):
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op_type else None


def _attribute(node, name, default=None):
    from onnx import helper  # here: the onnx extra is optional

    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def _squeeze_axes(graph, node):
    axes = graph.constant(node.input[1]) if len(node.input) > 1 else _attribute(node, "axes")
    return None if axes is None else [int(axis) for axis in np.asarray(axes).reshape(-1)]


def _follow_to_split(graph, name, chain):
    """Walk up from `name` through Squeeze/Transpose nodes to a Split; returns (split, index of
    the Split output, axis labels of `name`) or None. The walked nodes are appended to `chain`."""
    steps = []
    node = graph.producer.get(name)
    while node is not None and node.op_type in ("Squeeze", "Transpose"):
        steps.append(node)
        node = graph.producer.get(node.input[0])
    if node is None or node.op_type != "Split":
        return None
    index = list(node.output).index(steps[-1].input[0] if steps else name)
    labels = list(SPLIT_AXES)
    for step in reversed(steps):  # from the Split down to `name`
        if step.op_type == "Transpose":
            perm = _attribute(step, "perm")
            if perm is None or sorted(perm) != list(range(len(labels))):
                return None
            labels = [labels[axis] for axis in perm]
        else:
            axes = _squeeze_axes(graph, step)
            if axes is None or [labels[axis] for axis in axes] != ["part"]:
                return None
            labels = [label for position, label in enumerate(labels) if position not in
                      {axis % len(labels) for axis in axes}]
    chain.extend(steps)
    return node, index, tuple(labels)


def _match(graph, softmax):
    """The attention around `softmax`: (nodes to remove, x, W name, bias name or None, heads,
    scale, y), or None when any step differs from the module's pattern."""
    if _attribute(softmax, "axis", -1) not in (-1, 3):
        return None
    scale_node = graph.producer_of(softmax.input[0], "Mul")
    if scale_node is None:
        return None
    first, second = scale_node.input
    scores_name, scale = (first, graph.constant(second)) if second in graph.initializers else (second, graph.constant(first))
    scores = graph.producer_of(scores_name, "MatMul")
    if scores is None or scale is None or scale.size != 1:
        return None
    weighted = graph.only_consumer(softmax.output[0], "MatMul")
    if weighted is None or weighted.input[0] != softmax.output[0]:
        return None
    merge = graph.only_consumer(weighted.output[0], "Transpose")
    if merge is None or list(_attribute(merge, "perm", [])) != [0, 2, 1, 3]:
        return None
    flatten = graph.only_consumer(merge.output[0], "Reshape")
    chain = []
    found = [_follow_to_split(graph, name, chain) for name in (scores.input[0], scores.input[1], weighted.input[1])]
    if flatten is None or None in found or len({id(split) for split, _, _ in found}) != 1:
        return None
    if any((index, labels) != (part, WANTED_AXES[part]) for part, (_, index, labels) in enumerate(found)):
        return None
    split = found[0][0]
    if _attribute(split, "axis", 0) != 2 or len(split.output) != 3:
        return None
    sizes = graph.constant(split.input[1]) if len(split.input) > 1 and split.input[1] else None
    if sizes is not None and list(np.asarray(sizes).reshape(-1)) != [1, 1, 1]:
        return None
    heads_reshape = graph.producer_of(split.input[0], "Reshape")
    shape = graph.constant(heads_reshape.input[1]) if heads_reshape is not None else None
    if shape is None or list(shape[:3]) != [0, 0, 3] or len(shape) != 5:
        return None
    heads, head_size = int(shape[3]), int(shape[4])
    bias_add = graph.producer_of(heads_reshape.input[0], "Add")
    projection_output = bias_add.input[0] if bias_add is not None else heads_reshape.input[0]
    projection = graph.producer_of(projection_output, "MatMul")
    if projection is None:
        return None
    weight = graph.constant(projection.input[1])
    bias = graph.constant(bias_add.input[1]) if bias_add is not None else None
    hidden = heads * head_size
    if weight is None or weight.ndim != 2 or weight.shape[1] != 3 * hidden:
        return None
    if bias_add is not None and (bias is None or bias.shape != (3 * hidden,)):
        return None
    flat = graph.constant(flatten.input[1])
    if flat is None or list(flat) != [0, 0, hidden]:
        return None
    inside = [projection, *([bias_add] if bias_add is not None else []), heads_reshape, split, *chain,
              scores, scale_node, softmax, weighted, merge]
    members = {id(node) for node in inside} | {id(flatten)}
    for node in inside:  # every intermediate is read only inside the subgraph
        for output in node.output:
            if output in graph.outputs or any(id(reader) not in members
                                              for reader in graph.consumers.get(output, [])):
                return None
    return (inside + [flatten], projection.input[0], projection.input[1],
            bias_add.input[1] if bias_add is not None else None, heads, float(scale.reshape(())), flatten.output[0])


def fuse_attention(model):
    """Replace, in the onnx ModelProto `model` (in place), every attention of the export's pattern
    by ONNX Runtime's `com.microsoft.Attention`; returns how many were fused (0: the graph is left
    unchanged). Unused initializers are dropped, the Microsoft opset is declared."""
    from onnx import helper, numpy_helper  # here: the onnx extra is optional

    graph = _Graph(model.graph)
    replaced, removed = {}, set()
    for softmax in [node for node in model.graph.node if node.op_type == "Softmax"]:
        found = _match(graph, softmax)
        if found is None:
            continue
        nodes, x, weight, bias, heads, scale, y = found
        if bias is None:  # the kernel takes a bias: zeros for a projection without one
            columns = graph.initializers[weight].dims[1]
            bias = f"{weight}_zero_bias"
            model.graph.initializer.append(numpy_helper.from_array(np.zeros(columns, np.float32), bias))
        fused = helper.make_node("Attention", [x, weight, bias], [y], name=f"Attention.{len(replaced)}",
                                 domain=MS_DOMAIN, num_heads=heads, scale=scale)
        removed.update(id(node) for node in nodes)
        replaced[id(nodes[-1])] = fused  # where y was produced: every input is computed before it
    if not replaced:
        return 0
    kept = [replaced.get(id(node), node) for node in model.graph.node
            if id(node) in replaced or id(node) not in removed]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    used = {name for node in model.graph.node for name in node.input}
    initializers = [tensor for tensor in model.graph.initializer if tensor.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(initializers)
    if not any(entry.domain == MS_DOMAIN for entry in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return len(replaced)
