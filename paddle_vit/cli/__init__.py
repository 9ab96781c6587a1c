"""The command line: ``paddle-vit COMMAND [arguments]``, and what every command shares.

Each command is a module here whose ``main(argv=None)`` runs it and returns the exit code;
``tools/<command>.py`` is the same command as a script (``python tools/train.py -c ...`` equals
``paddle-vit train -c ...``). `run` makes a user's mistake (a bad config, path, checkpoint, model
name: a `PaddleVitError`) one line ``error: <message>`` on stderr and exit code 2, with no
traceback unless ``--debug`` is given, and first makes the process-wide settings
(`paddle_vit.runtime.configure`), before Paddle is imported or computes.
"""
import argparse
import importlib
import os
import sys

from .. import runtime
from ..engine.logging_utils import attach_log_file, setup_logging  # noqa: F401  (the commands')
from ..errors import ConfigError, PaddleVitError

# command -> (module, one line of help); the long-running ones restart once with a better malloc
COMMANDS = {
    "train": ("train", "train a ViT from a YAML recipe (-c CONFIG -o section.key=value)"),
    "eval": ("eval", "evaluate weights on a validation split"),
    "predict": ("predict", "classify image files with weights or an exported model"),
    "export": ("export", "export weights as a Paddle inference model (and ONNX)"),
    "benchmark": ("benchmark", "time inference, a training step or the input pipeline (optionally against timm)"),
    "visualize": ("visualize", "draw attention maps, position-embedding similarity, filters, attention distance"),
    "convert": ("convert_weights", "convert a timm, Hugging Face, JAX, PaddleClas or torchvision checkpoint"),
    "data-size-experiment": ("data_size_experiment", "the paper's data-size experiment in miniature"),
    "scaling-estimate": ("scaling_estimate", "expected multi-GPU throughput, memory and traffic"),
}
RELAUNCHED = ("train", "eval", "benchmark")  # runtime.py: the allocator a whole process keeps


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose mistakes (an unknown option, a value of the wrong type, a missing
    argument) are a `ConfigError` like every other: one ``error:`` line and exit code 2 through
    `run`, not argparse's usage block followed by its own error line."""

    def error(self, message):
        raise ConfigError(f"{message}; see --help")


def add_common_arguments(parser):
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error, and Paddle's own log lines")


def run(main, argv=None, relaunch=False):
    """Make the process-wide settings (`runtime.configure`; with `relaunch`, first restart with
    the chosen malloc), call `main(argv)` and return its exit code; a user's mistake gives one
    line and code 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    try:
        runtime.configure(debug=debug, relaunch=relaunch)
        return main(argv) or 0
    except PaddleVitError as error:
        if debug:
            raise
        print(f"error: {error}", file=sys.stderr)
        return 2
    except MemoryError as error:  # Paddle's allocator failure outside a training step
        if debug:
            raise
        print(f"error: out of memory: {str(error).splitlines()[0]}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if debug:
            raise
        print("error: interrupted", file=sys.stderr)
        return 130


def in_process(body):
    """A command's `main(argv=None)`: `run(body, argv)` in this process (no restart), returning
    the exit code; what tests and tools/*.py call."""
    def main(argv=None):
        return run(body, argv)
    main.__doc__ = f"`{body.__module__}` in this process; returns the exit code (2 with one `error:` line)."
    return main


def command(name):
    """The module of command `name` (a key of COMMANDS)."""
    return importlib.import_module(f".{COMMANDS[name][0]}", __name__)


def entry(name, argv=None):
    """Run command `name` as a program does (``paddle-vit NAME``, ``tools/NAME.py``): the
    long-running commands restart once with the chosen malloc first (runtime.py)."""
    module = command(name)
    return run(module.COMMAND, argv, relaunch=name in RELAUNCHED)


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
        from ..errors import close_matches
        print(f"error: unknown command {name!r}{close_matches(name, COMMANDS)}; commands are "
              f"{', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    sys.argv[0] = f"{os.path.basename(sys.argv[0])} {name}"  # argparse's usage line: paddle-vit train ...
    return entry(name, argv[1:])
