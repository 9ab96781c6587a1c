"""Convert a timm / JAX / paddle-vit checkpoint into paddle-vit weights for a named model.

    python tools/convert_weights.py SRC --model NAME --out OUT.pdparams|OUT.safetensors [-o key=value ...]

SRC is a timm .safetensors/.pth/.bin, a JAX .npz or a paddle-vit .pdparams/.safetensors file.
Overrides are model (ViTConfig) fields, values read as YAML: -o num_classes=10 -o image_size=384.
The position embedding is resampled and the head re-initialised as paddle_vit.load_pretrained
does; the report says what happened.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import yaml  # noqa: E402

from paddle_vit import create_model, load_pretrained  # noqa: E402
from paddle_vit.cli import add_common_arguments, run  # noqa: E402
from paddle_vit.errors import ConfigError  # noqa: E402
from paddle_vit.weights import save_weights  # noqa: E402


def parse_override(text):
    """"key=value" -> (key, value), the value read as YAML (10 -> int, null -> None)."""
    key, separator, value = text.partition("=")
    if not separator or not key.strip():
        raise ConfigError(f"override {text!r} is not key=value, e.g. -o num_classes=10")
    try:
        return key.strip(), yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError as error:
        raise ConfigError(f"override {text!r}: the value is not valid YAML ({error.problem})") from None


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", metavar="SRC", help="checkpoint to convert")
    parser.add_argument("--model", required=True, help="registered model name, e.g. vit_base_patch16_224")
    parser.add_argument("--out", required=True, help="output file, .pdparams or .safetensors")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                        help="model argument override (repeatable), e.g. -o num_classes=10")
    parser.add_argument("--non-strict", action="store_true",
                        help="leave tensors the checkpoint lacks at their initial values, ignore extra ones")
    add_common_arguments(parser)
    return parser


def convert(argv):
    args = build_parser().parse_args(argv)
    overrides = dict(parse_override(text) for text in args.override)
    model = create_model(args.model, **overrides)
    report = load_pretrained(model, args.source, strict=not args.non_strict)
    save_weights(model, args.out)
    print(report)
    print(f"wrote {args.out}")
    return 0


def main(argv=None):
    """Run the conversion; returns the exit code (2 with one `error:` line on a user mistake)."""
    return run(convert, argv)


if __name__ == "__main__":
    sys.exit(main())
