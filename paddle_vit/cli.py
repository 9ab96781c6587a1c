"""What the `tools/` scripts share: logging set-up and turning user mistakes into one line.

A `PaddleVitError` (bad config, path, checkpoint, model name) becomes ``error: <message>`` on
stderr and exit code 2, with no traceback unless ``--debug`` is given.
"""
import logging
import os
import sys

from .errors import PaddleVitError


def add_common_arguments(parser):
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")


def setup_logging(log_file=None, level=logging.INFO):
    """Send the library's log lines to stdout (and to `log_file`)."""
    logger = logging.getLogger("paddle_vit")
    logger.setLevel(level)
    logger.handlers.clear()
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    console = logging.StreamHandler(sys.stdout)
    console.setFormatter(formatter)
    logger.addHandler(console)
    if log_file:
        os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
        file_handler = logging.FileHandler(log_file)
        file_handler.setFormatter(formatter)
        logger.addHandler(file_handler)
    logger.propagate = False
    return logger


def run(main, argv=None):
    """Call `main(argv)` and return its exit code; user errors give one line and code 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    try:
        return main(argv) or 0
    except PaddleVitError as error:
        if debug:
            raise
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if debug:
            raise
        print("error: interrupted", file=sys.stderr)
        return 130
