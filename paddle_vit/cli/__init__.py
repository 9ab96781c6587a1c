"""The command line: ``paddle-vit COMMAND [arguments]``, and what every command shares.

Each command is a module here: its body ``COMMAND(argv)`` parses the arguments and does the
work, and its ``main(argv=None)`` runs that body through `run` in this process and returns the
exit code. ``tools/<command>.py`` is the same command as a script (``python tools/train.py -c
...`` equals ``paddle-vit train -c ...``). Both programs go through `entry`, which makes the
process-wide settings (`paddle_vit.runtime.configure`) before the command's module, and so Paddle,
is imported: this module imports no Paddle, and every command module imports all it needs at the
top. `run` makes a user's mistake (a bad config, path, checkpoint, model name: a `PaddleVitError`)
one line ``error: <message>`` on stderr and exit code 2, with no traceback unless ``--debug``.
"""
import argparse
import importlib
import os
import sys

from .. import runtime
from ..errors import ConfigError, PaddleVitError, close_matches

# command -> (module, one line of help)
COMMANDS = {
    "train": ("train", "train a ViT from a YAML recipe (-c CONFIG -o section.key=value)"),
    "eval": ("eval", "evaluate weights on a validation split"),
    "predict": ("predict", "classify image files with weights or an exported model"),
    "export": ("export", "export weights as a Paddle inference model (and ONNX)"),
    "benchmark": ("benchmark", "time inference, a training step or the input pipeline (optionally against timm)"),
    "visualize": ("visualize", "draw attention maps, position-embedding similarity, filters, attention distance"),
    "convert": ("convert_weights", "convert a timm, Hugging Face, JAX, PaddleClas or torchvision checkpoint"),
    "data-size-experiment": ("data_size_experiment", "the paper's data-size experiment in miniature"),
    "deit-budget-experiment": ("deit_budget_experiment", "DeiT's distillation with DeiT's training budget, on the digits"),
    "scaling-estimate": ("scaling_estimate", "expected multi-GPU throughput, memory and traffic"),
}
# the long-running commands restart once with a better malloc (runtime.py: a malloc is chosen at start)
RELAUNCHED = ("train", "eval", "benchmark")


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose mistakes (an unknown option, a value of the wrong type, a missing
    argument) are a `ConfigError` like every other: one ``error:`` line and exit code 2 through
    `run`, not argparse's usage block followed by its own error line."""

    def error(self, message):
        raise ConfigError(f"{message}; see --help")

    def parse_args(self, args=None, namespace=None):
        """argparse's parse, and an empty value refused: `--out ''` would be taken for the current
        folder by the path functions (an export's --out then replaced everything in it)."""
        parsed = super().parse_args(args, namespace)
        for action in self._actions:
            value = getattr(parsed, action.dest, None)
            values = value if isinstance(value, (list, tuple)) else [value]
            if value != action.default and any(isinstance(item, str) and not item.strip() for item in values):
                expected = action.metavar or action.dest.upper()
                if not action.option_strings:
                    raise ConfigError(f"an empty {expected} was given; expected a name")
                raise ConfigError(f"{action.option_strings[-1]} is given an empty value; expected {expected}")
        return parsed


def add_common_arguments(parser):
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error, and Paddle's own log lines")


def run(body, argv=None, relaunch=False):
    """Make the process-wide settings (`runtime.configure`; with `relaunch`, first restart with
    the chosen malloc), call `body(argv)` and return its exit code; a user's mistake gives one
    line and code 2, an interruption code 130."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    try:
        runtime.configure(debug=debug, relaunch=relaunch)
        return body(argv) or 0
    except PaddleVitError as error:
        if debug:
            raise
        print(f"error: {error}", file=sys.stderr)
        return 2
    except MemoryError as error:  # Paddle's allocator failure outside a training step
        if debug:
            raise
        said = str(error).strip()  # a bare MemoryError() says nothing
        print(f"error: out of memory{': ' + said.splitlines()[0] if said else ''}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if debug:
            raise
        print("error: interrupted", file=sys.stderr)
        return 130


def entry(name, argv=None, in_process=False):
    """Run command `name` (a key of COMMANDS) as ``paddle-vit NAME`` and ``tools/NAME.py`` do: the
    settings are made before its module imports Paddle, and the long-running commands restart
    once with the chosen malloc first unless `in_process` (a script's `main`, which tests call)."""
    def body(argv):
        return importlib.import_module(f".{COMMANDS[name][0]}", __name__).COMMAND(argv)
    return run(body, argv, relaunch=not in_process and name in RELAUNCHED)


def usage():
    width = max(map(len, COMMANDS))
    lines = ["usage: paddle-vit COMMAND [arguments]   (paddle-vit COMMAND --help for its arguments)", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv=None):
    """``paddle-vit COMMAND [arguments]``: the console entry point."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name = argv[0]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}{close_matches(name, COMMANDS)}; commands are "
              f"{', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    sys.argv[0] = f"{os.path.basename(sys.argv[0])} {name}"  # argparse's usage line: paddle-vit train ...
    return entry(name, argv[1:])
