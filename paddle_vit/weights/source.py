"""A weights source resolved once: what ``--weights PATH`` or ``pretrained=PATH`` names, read and
checked at the command's edge and handed down as one object.

`resolve_weights(source)` turns a path (a weights file, a Hugging Face or timm Hub folder, a
training checkpoint) or a dict of arrays into a `WeightsSource`. It reads the folder's
``config.json`` (and a Hugging Face folder's ``preprocessor_config.json``) at once, checks every
value (folder_values.py), gives the warnings, and says what model the folder is (folders.py's
`FolderModel`). The tensors are read when first needed, once: `WeightsSource.checkpoint()`,
then `reading()` (the family, the tensors in our names, the options they imply). A .pdckpt's
contents, which the recipe is read from (recipe.py), are the same read as its tensors.

Every layer below the edge (recipe.py, factory.py, loader.py, the families) takes the
`WeightsSource`, so that one ``tools/predict.py --weights FOLDER photo.jpg`` opens each file of the
folder once, the .safetensors twice (its header, then its tensors). A function that takes a
source resolves a path given to it; a `WeightsSource` passes through as it is.
"""
import dataclasses
import logging
import os
from collections.abc import Mapping
from typing import Optional

from ..checkpoint import load_checkpoint
from ..errors import WeightsError
from .family import CheckpointFamily, ConvertedCheckpoint, detect_family, options_from_tensors
from .folder_values import check_against_weights, check_folder_values
from .folders import FolderConfig, FolderModel, describe_config
from .reading import HF_CONFIG, Checkpoint, read_checkpoint, read_json

logger = logging.getLogger("paddle_vit")

PREPROCESSOR_CONFIG = "preprocessor_config.json"
TRAINING_CHECKPOINT = ".pdckpt"


@dataclasses.dataclass(frozen=True)
class Reading:
    """A checkpoint read, its family found, converted to our names, and the options it implies
    ({option: Implied})."""
    checkpoint: Checkpoint
    family: CheckpointFamily
    converted: ConvertedCheckpoint
    implied: dict


class WeightsSource:
    """One weights source, resolved (`resolve_weights`).

    Attributes:
        description: the path as given, or "<dict>" (for messages).
        path: the path, or None for arrays in memory.
        config: the `FolderConfig` of a timm Hub or Hugging Face config.json beside the weights
            (its values checked), or None.
        model: the `FolderModel` that config.json describes, or None.
    """

    def __init__(self, description, path=None, arrays=None, config=None):
        self.description = description
        self.path: Optional[str] = path
        self.arrays: Optional[Mapping] = arrays
        self.config: Optional[FolderConfig] = config
        self.model: Optional[FolderModel] = describe_config(config) if config is not None else None
        self._training_state = None
        self._checkpoint = None
        self._reading = None

    def __repr__(self):
        return f"WeightsSource({self.description!r})"

    @property
    def is_training_checkpoint(self):
        """Whether it names a training checkpoint (.pdckpt), which stores its recipe."""
        return self.path is not None and self.path.endswith(TRAINING_CHECKPOINT)

    def training_state(self):
        """The contents of the training checkpoint (.pdckpt) it names: its recipe, EMA weights,
        class names, ...; read once (`checkpoint.load_checkpoint`, which checks that it is one)."""
        if self._training_state is None:
            self._training_state = load_checkpoint(self.path)
        return self._training_state

    def checkpoint(self):
        """The `Checkpoint` (the arrays as stored, what the file records, the folder's config),
        read once; a .pdckpt whose recipe was read already is not read again."""
        if self._checkpoint is None:
            source = self.arrays if self.arrays is not None else self.path
            self._checkpoint = read_checkpoint(source, stored=self._training_state, config=self.config)
        return self._checkpoint

    def reading(self):
        """The `Reading` of the checkpoint: its family, its tensors in our names (checked against
        what the folder's config.json says), the options they imply; computed once."""
        if self._reading is None:
            checkpoint = self.checkpoint()
            family = detect_family(checkpoint)
            converted = family.convert(checkpoint)
            if self.config is not None:  # what the folder's config.json says against what the tensors are
                check_against_weights(self.config.kind, self.config.path, self.config.values, converted,
                                      checkpoint.description, family.head_is_projection(checkpoint, converted))
            implied = options_from_tensors(converted)
            implied.update(family.implied_options(checkpoint, converted))
            self._reading = Reading(checkpoint, family, converted, implied)
        return self._reading

    def ema(self):
        """The source of the EMA weights of the training checkpoint it names, with the model
        config and class names it records: a dict, no second read of the file."""
        if not self.is_training_checkpoint:
            raise WeightsError(f"--ema needs a training checkpoint (.pdckpt), got {self.description}; "
                               f"the EMA weights file (*_ema.pdparams) can be passed as --weights directly")
        state = self.training_state()
        ema = state.get("ema")
        if ema is None:
            raise WeightsError(f"checkpoint {self.description} holds no EMA weights (the run had train.ema: false)")
        return resolve_weights({"model": {name: value.numpy() for name, value in ema.items()},
                                "model_config": state.get("model_config"), "class_names": state.get("class_names")})


def resolve_weights(source):
    """The `WeightsSource` of `source`: a path (file or folder) or a dict of arrays, or a
    `WeightsSource` (returned as it is). The folder's config.json is read and checked now, its
    warnings given once; a path that does not exist is refused later, by whoever needs it, in
    their own words."""
    if isinstance(source, WeightsSource):
        return source
    if isinstance(source, Mapping):
        return WeightsSource("<dict>", arrays=source)
    if not isinstance(source, (str, os.PathLike)):
        raise WeightsError(f"weights source must be a file path, a folder or a dict of arrays, "
                           f"got {type(source).__name__}")
    path = os.fspath(source)
    config = read_folder_config(path) if os.path.exists(path) else None
    if config is not None:
        for warning in check_folder_values(config):  # every value, once, before anything is computed
            logger.warning("%s", warning)
    return WeightsSource(path, path=path, config=config)


def config_kind(values):
    """"timm", "huggingface" or None for the values of a config.json."""
    if "architecture" in values and ("pretrained_cfg" in values or "model_type" not in values):
        return "timm"
    if "model_type" in values or "architectures" in values:
        return "huggingface"
    return None


def read_folder_config(path):
    """The `FolderConfig` of the config.json beside `path` (a folder, or a weights file in one),
    with a Hugging Face folder's preprocessor_config.json; None when there is no config.json, or
    one of neither kind. A config.json that cannot be read is an error when the weights were given
    as its folder, and ignored beside a weights file given by name (it may belong to something else)."""
    given_folder = os.path.isdir(path)
    folder = path if given_folder else os.path.dirname(os.path.abspath(path))
    config_path = os.path.join(folder, HF_CONFIG)
    if not os.path.isfile(config_path):
        return None
    try:
        values = read_json(config_path, "the config of the weights beside it")
    except WeightsError:
        if given_folder:
            raise
        return None
    kind = config_kind(values)
    if kind is None:
        return None
    processor_path = os.path.join(folder, PREPROCESSOR_CONFIG)
    if kind != "huggingface" or not os.path.isfile(processor_path):
        return FolderConfig(kind, config_path, values)
    processor = read_json(processor_path, "the Hugging Face image processor config")
    return FolderConfig(kind, config_path, values, processor, processor_path)
