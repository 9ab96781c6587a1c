"""Export a trained ViT for deployment: a Paddle inference model, optionally ONNX, its weights as
.safetensors and a ``preprocess.json`` that says everything else a predictor needs.

The folder written by `export_classifier`:

- ``inference.json`` + ``inference.pdiparams``: ``paddle.jit.save`` of the eval model with a
  dynamic batch, input ``image`` float32 [N, 3, S, S] ([N, 3, H, W], any H and W, for a model
  built with ``dynamic_img_size``), output [N, K] logits (or probabilities with ``softmax=True``).
  Paddle 3 writes its PIR program as ``.json``; Paddle 2 and Paddle 3 with
  ``FLAGS_enable_pir_api=0`` wrote a ``.pdmodel`` (`paddle_vit.deploy.inference` reads both);
- ``model.onnx`` with ``formats`` including "onnx" (through paddle2onnx, an optional extra);
- ``model.safetensors``: the weights alone, in this project's names (arrays only, safe to
  share; `paddle_vit.load_pretrained` reads it into ``ViT(ViTConfig(**model_config))``);
- ``preprocess.json``: the eval preprocessing (`paddle_vit.deploy.predict.Preprocess`), the class
  names, the model name and configuration, what the output is, and which files hold what.

Everything is written to a hidden staging folder beside the target first and exchanged with it
as a whole at the end, so a failed or killed export leaves the previous one as it was.
"""
import dataclasses
import json
import logging
import os
import shutil
import sys
import tempfile

from .. import __version__, fileio
from ..errors import ConfigError, ExportError
from ..variants import traceable
from ..weights import save_weights

logger = logging.getLogger("paddle_vit")

EXPORT_FORMAT = "paddle_vit.export/1"
METADATA_FILE = "preprocess.json"
MODEL_PREFIX = "inference"  # inference.json / inference.pdmodel + inference.pdiparams
ONNX_FILE = "model.onnx"
WEIGHTS_FILE = "model.safetensors"
INPUT_NAME = "image"
FORMATS = ("paddle", "onnx")
ONNX_INSTALL_HINT = 'pip install -e ".[onnx]"'


def inference_network(model, with_softmax=False):
    """The layer that is traced: the ViT in eval mode, with a softmax on its logits if asked."""
    import paddle.nn as nn
    import paddle.nn.functional as F

    class InferenceNetwork(nn.Layer):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, image):
            logits = self.model(image)  # [N, 3, S, S] -> [N, K]
            return F.softmax(logits, axis=-1) if with_softmax else logits

    network = InferenceNetwork()
    network.eval()
    return network


def import_paddle2onnx():
    """paddle2onnx, or an ExportError saying how to install the extra."""
    try:
        import paddle2onnx
    except ImportError as error:
        raise ExportError(f"--format onnx needs paddle2onnx and onnxruntime, which are not installed "
                          f"({error}): {ONNX_INSTALL_HINT}") from None
    except Exception as error:  # installed, but e.g. built against another onnx/protobuf
        raise ExportError(f"paddle2onnx is installed but cannot be imported ({type(error).__name__}: {error}); "
                          f"reinstall it with {ONNX_INSTALL_HINT}") from None
    return paddle2onnx


# paddle2onnx runs in a child process: on an operator it cannot map it aborts the whole process
# (SIGABRT) instead of raising, which would take the caller down with a C++ traceback
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


def _write_onnx(paddle2onnx, model_file, params_file, path, opset_version, metadata):
    """Convert the saved Paddle model to ONNX at `path`, the metadata JSON in its properties."""
    import subprocess

    from ..runtime import environment_without_relaunch

    # started without the allocator a tool's relaunch preloaded: under it paddle2onnx hangs on a lock
    environment = dict(environment_without_relaunch(), GLOG_minloglevel=os.environ.get("GLOG_minloglevel", "2"))
    result = subprocess.run([sys.executable, "-c", _ONNX_CHILD, model_file, params_file, path, str(opset_version)],
                            capture_output=True, text=True, env=environment)
    if result.returncode != 0 or not os.path.isfile(path):
        how = f"exit code {result.returncode}" if result.returncode >= 0 else f"killed by signal {-result.returncode}"
        raise ExportError(f"paddle2onnx {getattr(paddle2onnx, '__version__', '?')} could not convert the model "
                          f"({how}): {_conversion_messages(result.stdout + chr(10) + result.stderr)}")
    try:
        import onnx
    except ImportError:  # onnx comes with paddle2onnx; without it the model just lacks the metadata
        return
    onnx_model = onnx.load(path)
    entry = onnx_model.metadata_props.add()
    entry.key, entry.value = "paddle_vit", json.dumps(metadata)
    onnx.save(onnx_model, path)


def input_shape(config, unknown=-1):
    """[N, C, S, S] of the traced graph, `unknown` for any batch size; a model built with
    dynamic_img_size takes any H, W as well."""
    side = unknown if config.dynamic_img_size else int(config.image_size)
    return [unknown, int(config.in_channels), side, side]


def _saved_model_file(prefix):
    for extension in (".json", ".pdmodel"):
        if os.path.isfile(prefix + extension):
            return prefix + extension
    raise ExportError(f"paddle.jit.save wrote neither {prefix}.json nor {prefix}.pdmodel")


def save_traced(model, prefix, softmax=False, dtype="float32"):
    """Trace `model` (a ViT) for any batch size and `paddle.jit.save` it at `prefix`; returns
    (program file, parameters file). The graph computes with the traceable variants
    (`paddle_vit.variants.traceable`); `model` itself stays eager and keeps its classes."""
    import paddle
    from paddle.static import InputSpec


    config = model.config
    was_training = model.training
    network = inference_network(model, softmax)
    spec = InputSpec(input_shape(config, unknown=None), dtype, name=INPUT_NAME)  # None: any batch size (and size)
    with traceable(model):
        paddle.jit.save(paddle.jit.to_static(network, input_spec=[spec], full_graph=True), prefix)
    if was_training:
        model.train()
    return _saved_model_file(prefix), prefix + ".pdiparams"


def build_metadata(classifier, softmax, files):
    """The ``preprocess.json`` content of an export."""
    import paddle

    config = classifier.model.config
    return {
        "format": EXPORT_FORMAT,
        "model_name": classifier.model_name,
        "num_classes": int(config.num_classes),
        "class_names": list(classifier.class_names) if classifier.class_names else None,
        "output": "probabilities" if softmax else "logits",
        "input_name": INPUT_NAME,
        "input_shape": input_shape(config),
        "preprocess": classifier.preprocess.to_dict(),
        "files": files,
        "model_config": dataclasses.asdict(config),
        "paddle_version": paddle.__version__,
        "paddle_vit_version": __version__,
    }


def _prepare(out_dir):
    """A staging folder beside `out_dir` (on the same file system, so that it can be renamed
    into place); `out_dir` itself must be absent, empty or an earlier export (its files are
    replaced as a whole, never mixed with others). An OS error is an ExportError."""
    if os.path.exists(out_dir):
        if not os.path.isdir(out_dir):
            kind = "a file" if os.path.isfile(out_dir) else fileio.kind_of_special_file(out_dir)
            raise ExportError(f"--out {out_dir} is {kind}; expected a folder for the export")
        if os.listdir(out_dir) and not _is_export(out_dir):
            raise ExportError(f"--out {out_dir} holds files that are not an export; give a new or empty folder, "
                              f"or an earlier export to replace")
    parent = os.path.dirname(os.path.abspath(out_dir))
    try:
        os.makedirs(parent, exist_ok=True)
        return tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(out_dir))}.export-", dir=parent)
    except OSError as error:
        raise ExportError(f"cannot write the export to {out_dir}: {error.strerror or error}") from None


def _is_export(folder):
    try:
        with open(os.path.join(folder, METADATA_FILE), encoding="utf-8") as stream:
            return json.load(stream).get("format") == EXPORT_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _exchange(staging, out_dir):
    """Put the finished `staging` folder at `out_dir`, replacing an earlier export as a whole: an
    atomic exchange of the two folders (Linux renameat2 RENAME_EXCHANGE), then the old one
    deleted. Where the exchange is not available, two renames (a kill between them leaves the
    old export beside, named .NAME.export-*)."""
    import ctypes

    out_dir = os.path.abspath(out_dir)
    if not os.path.exists(out_dir):
        os.replace(staging, out_dir)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None and renameat2(at_fdcwd, staging.encode(), at_fdcwd, out_dir.encode(),
                                           rename_exchange) == 0:
        shutil.rmtree(staging, ignore_errors=True)  # now the old export
        return
    old = staging + ".old"
    os.replace(out_dir, old)
    os.replace(staging, out_dir)
    shutil.rmtree(old, ignore_errors=True)


def export_classifier(classifier, out_dir, softmax=False, formats=("paddle",), opset_version=13):
    """Export `classifier` (a `paddle_vit.deploy.predict.Classifier`) to the folder `out_dir`.

    formats: any of "paddle" (the Paddle inference model) and "onnx" (needs paddle2onnx).
    softmax: put a softmax on the output, so the model returns probabilities.
    Returns {role: path} of the files written (``preprocess.json`` under "metadata"). Everything
    is written to a staging folder first and put in place at once: a failed or killed export
    leaves the earlier one whole.
    """

    formats = list(dict.fromkeys(formats))
    unknown = [name for name in formats if name not in FORMATS]
    if unknown or not formats:
        raise ConfigError(f"export formats are {', '.join(FORMATS)}; got {', '.join(formats) or 'none'}")
    paddle2onnx = import_paddle2onnx() if "onnx" in formats else None
    out_dir = os.fspath(out_dir)
    with fileio.provisional_folders(out_dir):  # a failed export leaves no folder it made
        staging = _prepare(out_dir)
        try:
            model_file, params_file = save_traced(classifier.model, os.path.join(staging, MODEL_PREFIX), softmax)

            files = {}
            if "paddle" in formats:
                files["paddle_model"] = os.path.basename(model_file)
                files["paddle_params"] = os.path.basename(params_file)
            if "onnx" in formats:
                files["onnx"] = ONNX_FILE
            files["weights"] = WEIGHTS_FILE
            metadata = build_metadata(classifier, softmax, files)
            if paddle2onnx is not None:
                _write_onnx(paddle2onnx, model_file, params_file, os.path.join(staging, ONNX_FILE), opset_version,
                            metadata)
            save_weights(classifier.model, os.path.join(staging, WEIGHTS_FILE))
            if "paddle" not in formats:  # traced for the ONNX conversion only: not part of this export
                os.remove(model_file)
                os.remove(params_file)
            with open(os.path.join(staging, METADATA_FILE), "w", encoding="utf-8") as stream:
                json.dump(metadata, stream, indent=2, ensure_ascii=False)
                stream.write("\n")
            os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes it private; an export is not
            _exchange(staging, out_dir)
        except OSError as error:
            raise ExportError(f"cannot write the export to {out_dir}: {error.strerror or error}") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    written = {role: os.path.join(out_dir, name) for role, name in files.items()}
    written["metadata"] = os.path.join(out_dir, METADATA_FILE)
    logger.info("exported %s to %s: %s", classifier.model_name, out_dir, ", ".join(sorted(files.values())))
    return written


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask
