"""A deployment-grade ONNX file of a ViT: what ONNX Runtime runs fastest and its quantizer can work on.

`export_onnx(model, path)` traces the eval model with the ONNX variants (`paddle_vit.variants.
onnx_traceable`: the attention's packed q/k/v projection as one product of the whole weight, its
activations split into the heads), converts the trace with paddle2onnx at opset 17 (one
`LayerNormalization` per LayerNorm; opset 13 spells each out in five ops), then cleans the graph
with ONNX Runtime's offline basic optimisation, which writes standard ONNX ops only: constant
subgraphs folded into initializers, Identity nodes and duplicated constants removed. The result:

- every MatMul/Gemm of the network takes its weight straight from an initializer (ONNX Runtime's
  quantizer, `paddle_vit.deploy.quantize`, quantizes only those);
- the batch is dynamic (``batch``), and H, W too (``height``, ``width``) for a model built with
  dynamic_img_size;
- `onnx.checker.check_model(full_check=True)` passes; the report gives the node counts.

paddle2onnx runs in a child process: on an operator it cannot map it aborts the whole process
(SIGABRT) instead of raising, which would take the caller down with a C++ traceback.
"""
import collections
import errno
import importlib
import json
import os
import subprocess
import sys
import tempfile

from ..errors import ExportError
from ..fileio import file_system_full, short_of_space
from ..runtime import environment_without_relaunch
from ..variants import onnx_traceable
from .tracing import INPUT_NAME, save_traced

ONNX_FILE = "model.onnx"
ONNX_INSTALL_HINT = 'pip install -e ".[onnx]"'
DEFAULT_OPSET = 17  # the first opset with LayerNormalization
METADATA_KEY = "paddle_vit"
DIMENSION_NAMES = ("batch", None, "height", "width")  # of the input [N, C, H, W]; C is fixed


def import_paddle2onnx():
    """paddle2onnx, or an ExportError saying how to install the extra."""
    try:
        import paddle2onnx  # here: the onnx extra is optional
    except ImportError as error:
        raise ExportError(f"--format onnx needs paddle2onnx and onnxruntime, which are not installed "
                          f"({error}): {ONNX_INSTALL_HINT}") from None
    except Exception as error:  # installed, but e.g. built against another onnx/protobuf
        raise ExportError(f"paddle2onnx is installed but cannot be imported ({type(error).__name__}: {error}); "
                          f"reinstall it with {ONNX_INSTALL_HINT}") from None
    return paddle2onnx


def import_onnx_extra(what, *modules):
    """The named modules of the onnx extra, or an ExportError saying that `what` needs them and
    how to install the extra."""
    try:
        return tuple(importlib.import_module(module) for module in modules)
    except ImportError as error:
        raise ExportError(f"{what} needs {' and '.join(modules)}, which cannot be imported ({error}): "
                          f"{ONNX_INSTALL_HINT}") from None


def _import_onnx_tools():
    """(onnx, onnxruntime), or an ExportError saying how to install the extra."""
    return import_onnx_extra("--format onnx", "onnx", "onnxruntime")


_ONNX_CHILD = r"""
import sys
import paddle2onnx
model_file, params_file, onnx_file, opset_version = sys.argv[1:5]
# save_file=None returns the bytes before paddle2onnx's optional optimisation step, which (with
# polygraphy) would pip-install packages at run time
onnx_bytes = paddle2onnx.export(model_file, params_file, save_file=None, opset_version=int(opset_version),
                                auto_upgrade_opset=True, enable_onnx_checker=True)
if not onnx_bytes:
    sys.exit("paddle2onnx returned an empty model")
with open(onnx_file, "wb") as stream:
    stream.write(onnx_bytes)
"""


def _conversion_messages(output):
    """paddle2onnx's error lines (or the last lines) of a failed conversion, as one line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() and "warnings.warn" not in line]
    return " | ".join((errors or lines)[-3:])[:500]


def convert_with_paddle2onnx(model_file, params_file, path, opset_version, *, written_for=None):
    """paddle2onnx's conversion of a saved Paddle model to `path`, in a child process; a failure
    (or an abort) is an ExportError with paddle2onnx's own message, or, on a full disk, one that
    says so, naming `written_for` (the file `path` is a step towards) or `path`."""
    paddle2onnx = import_paddle2onnx()
    # started without the allocator a tool's relaunch preloaded: under it paddle2onnx hangs on a lock
    environment = dict(environment_without_relaunch(), GLOG_minloglevel=os.environ.get("GLOG_minloglevel", "2"))
    result = subprocess.run([sys.executable, "-c", _ONNX_CHILD, model_file, params_file, path, str(opset_version)],
                            capture_output=True, text=True, env=environment)
    if result.returncode != 0 or not os.path.isfile(path):
        _raise_if_short_of_space(path, _size(params_file), written_for)
        how = f"exit code {result.returncode}" if result.returncode >= 0 else f"killed by signal {-result.returncode}"
        raise ExportError(f"paddle2onnx {getattr(paddle2onnx, '__version__', '?')} could not convert the model "
                          f"({how}): {_conversion_messages(result.stdout + chr(10) + result.stderr)}")


def fold_with_onnxruntime(source, target, *, written_for=None):
    """ONNX Runtime's offline basic optimisation of `source`, written to `target`: constant
    folding, redundant node elimination (Identity, duplicated constants), standard ops only (the
    extended level would write Microsoft's fused ops, which only ONNX Runtime runs). On a full
    disk the error says so, naming `written_for` (the file `target` is a step towards) or `target`."""
    _, onnxruntime = _import_onnx_tools()
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = target
    options.log_severity_level = 3  # its notes on removed unused initializers are expected
    try:
        onnxruntime.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime raises its own Fail/InvalidGraph types
        _raise_if_short_of_space(target, _size(source), written_for)
        raise ExportError(f"onnxruntime could not load the converted model: {error}") from None


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _raise_if_short_of_space(path, size, written_for=None):
    """After a library's failure to write `path` (about `size` bytes): when its file system has
    less room than that, the write was cut short, whatever the library then said (paddle2onnx's
    "parse error" or "nodes must be topologically sorted", ONNX Runtime's "INVALID_PROTOBUF"):
    an ExportError naming the file the user asked for (`written_for`), not a step's temporary."""
    if short_of_space(path, size) or file_system_full(path):
        raise ExportError(f"{os.strerror(errno.ENOSPC)} (writing {written_for or path})")


def drop_identities(graph):
    """Remove every Identity node of `graph` (onnx GraphProto) in place: its consumers read its
    input instead; one that produces a graph output hands the output name to its producer."""
    outputs = {value.name for value in graph.output}
    for node in [node for node in graph.node if node.op_type == "Identity"]:
        source, target = node.input[0], node.output[0]
        producers = [other for other in graph.node if source in other.output]
        if target in outputs:
            if not producers or source in outputs or source in {value.name for value in graph.input}:
                continue  # an output that is an input or an initializer: the Identity must stay
            producers[0].output[list(producers[0].output).index(source)] = target
            for other in graph.node:
                other.input[:] = [target if name == source else name for name in other.input]
        else:
            for other in graph.node:
                other.input[:] = [source if name == target else name for name in other.input]
        graph.node.remove(node)


def _name_dimensions(model):
    """Readable names for the dynamic dimensions (paddle2onnx calls them DynamicDimension.i):
    batch, and height and width where the size is dynamic."""
    renamed = {}
    for dimension, name in zip(model.graph.input[0].type.tensor_type.shape.dim, DIMENSION_NAMES):
        if name and dimension.dim_param:
            renamed[dimension.dim_param] = name
    for value in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        for dimension in value.type.tensor_type.shape.dim:
            if dimension.dim_param in renamed:
                dimension.dim_param = renamed[dimension.dim_param]


def _keep_used_domains(model):
    """ONNX Runtime's written model imports every operator set it knows; keep the ones used."""
    used = {node.domain for node in model.graph.node}
    kept = [entry for entry in model.opset_import if entry.domain in used or entry.domain in ("", "ai.onnx")]
    del model.opset_import[:]
    model.opset_import.extend(kept)


def graph_report(model):
    """{opset, nodes, node_counts, initializers, ...} of an onnx ModelProto."""
    counts = collections.Counter(node.op_type for node in model.graph.node)
    initializers = {tensor.name for tensor in model.graph.initializer}
    products = [node for node in model.graph.node if node.op_type in ("MatMul", "Gemm")]
    opset = next(entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx"))
    return {
        "opset": int(opset),
        "nodes": len(model.graph.node),
        "node_counts": dict(sorted(counts.items(), key=lambda item: (-item[1], item[0]))),
        "initializers": len(initializers),
        "weight_products": sum(node.input[1] in initializers for node in products),  # MatMul/Gemm on a weight
        "activation_products": sum(node.input[1] not in initializers for node in products),  # attention's two
        "input_shape": [dimension.dim_param or dimension.dim_value
                        for dimension in model.graph.input[0].type.tensor_type.shape.dim],
    }


def export_onnx(model, path, *, opset=DEFAULT_OPSET, dynamic_size=None, softmax=False, metadata=None):
    """Write a deployment-grade float32 ONNX file of `model` (a `ViT`) at `path` and return its
    report: {"opset", "nodes", "node_counts": {op_type: n}, "initializers", "weight_products",
    "activation_products", "input_shape"}.

    dynamic_size: None follows the model (H, W dynamic when it is built with dynamic_img_size);
        False fixes them at the model's image size; True needs a model built with dynamic_img_size.
    softmax: end with a softmax (probabilities instead of logits).
    metadata: a JSON-able dict stored in the file's metadata properties under "paddle_vit".
    The file is written whole or not at all.
    """
    onnx, _ = _import_onnx_tools()
    import_paddle2onnx()
    config = model.config
    if dynamic_size and not config.dynamic_img_size:
        raise ExportError("an ONNX export with a dynamic image size needs a model built with "
                          "model.dynamic_img_size: true")
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    with work_folder(folder, ".onnx-export-") as work:
        was_training = model.training
        model.eval()
        try:
            model_file, params_file = save_traced(model, os.path.join(work, "traced"), softmax=softmax,
                                                  variants=onnx_traceable, dynamic_size=dynamic_size)
        finally:
            if was_training:
                model.train()
        converted, folded = os.path.join(work, "converted.onnx"), os.path.join(work, "folded.onnx")
        convert_with_paddle2onnx(model_file, params_file, converted, opset, written_for=path)
        fold_with_onnxruntime(converted, folded, written_for=path)
        onnx_model = onnx.load(folded)
        drop_identities(onnx_model.graph)
        _keep_used_domains(onnx_model)
        _name_dimensions(onnx_model)
        if onnx_model.graph.input[0].name != INPUT_NAME:
            _rename_input(onnx_model, INPUT_NAME)
        if metadata is not None:
            entry = onnx_model.metadata_props.add()
            entry.key, entry.value = METADATA_KEY, json.dumps(metadata)
        try:
            onnx.checker.check_model(onnx_model, full_check=True)
        except Exception as error:  # onnx's ValidationError / InferenceError
            raise ExportError(f"the cleaned ONNX graph fails onnx.checker: {str(error).splitlines()[0]}") from None
        staged = os.path.join(work, "model.onnx")
        onnx.save(onnx_model, staged)
        os.replace(staged, path)
    return graph_report(onnx_model)


def work_folder(folder, prefix):
    """A temporary folder inside `folder` (the target's, so that the finished file is renamed into
    place); a folder that does not exist or cannot be written is an ExportError."""
    try:
        return tempfile.TemporaryDirectory(prefix=prefix, dir=folder)
    except OSError as error:
        raise ExportError(f"cannot write to {folder}: {error.strerror or error}") from None


def _rename_input(model, name):
    old = model.graph.input[0].name
    model.graph.input[0].name = name
    for node in model.graph.node:
        node.input[:] = [name if value == old else value for value in node.input]
