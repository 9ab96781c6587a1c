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


_FORMATTER = logging.Formatter("%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")


class _KeepRecords(logging.Handler):
    """Holds the lines logged before the log file may be created (see `attach_log_file`)."""

    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


class _Stdout(logging.StreamHandler):
    """Writes to whatever `sys.stdout` is at the time of each line."""

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, value):
        pass


def setup_logging(level=logging.INFO):
    """Send the library's log lines to stdout, and keep them for a log file attached later."""
    logger = logging.getLogger("paddle_vit")
    logger.setLevel(level)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    console = _Stdout()
    console.setFormatter(_FORMATTER)
    logger.addHandler(console)
    logger.addHandler(_KeepRecords())
    logger.propagate = False
    return logger


def attach_log_file(path):
    """Also write the log to `path`, starting with the lines logged so far. Called once the run
    is known to be valid, so that a rejected config leaves no output folder behind."""
    from .engine.logging_utils import LogFileHandler

    logger = logging.getLogger("paddle_vit")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    file_handler = LogFileHandler(path)
    file_handler.setFormatter(_FORMATTER)
    for handler in [h for h in logger.handlers if isinstance(h, _KeepRecords)]:
        for record in handler.records:
            file_handler.handle(record)
        logger.removeHandler(handler)
    logger.addHandler(file_handler)


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
