"""Numbers on the command line: the one parser of every numeric option.

`integer(...)`, `number(...)` and `integer_list(...)` are argparse types. They accept what
Python's ``int()`` and ``float()`` accept (" 12", "+3", "1_000", "1e-4") and nothing else, then
check the range, so that a mistake is one line naming the option (argparse adds
"argument --topk:", `ArgumentParser.error` makes it a ConfigError):

    error: argument --topk: expected an integer >= 1, got '0'; see --help

A string that looks like digits but that ``int()`` refuses ("²", which ``str.isdigit`` accepts)
is refused the same way, never a traceback; so are nan, inf and numbers beyond a float.
"""
import argparse
import math


def _bounds(minimum, maximum, above):
    """">= 1", "> 0", "in [1, 1000]", "in (0, 1]" for the messages."""
    low = f"[{minimum}" if minimum is not None else f"({above}" if above is not None else None
    if low is not None and maximum is not None:
        return f"in {low}, {maximum}]"
    if low is not None:
        return f"{'>=' if minimum is not None else '>'} {low[1:]}"
    return f"<= {maximum}" if maximum is not None else ""


def _check(value, minimum, maximum, above):
    return ((minimum is None or value >= minimum) and (maximum is None or value <= maximum)
            and (above is None or value > above))


def _parser(kind, expected, minimum, maximum, above):
    def parse(text):
        try:
            value = kind(text)
        except (ValueError, OverflowError):  # int("²"), int("1.5"), float("x"), int of 5000 digits
            value = None
        if value is None or (kind is float and not math.isfinite(value)) or not _check(value, minimum, maximum,
                                                                                        above):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type by it in its own messages
    return parse


def integer(minimum=None, maximum=None, *, above=None):
    """An argparse type: an int in the range (`minimum` and `maximum` inclusive, `above` exclusive)."""
    expected = " ".join(part for part in ("an integer", _bounds(minimum, maximum, above)) if part)
    return _parser(int, expected, minimum, maximum, above)


def number(minimum=None, maximum=None, *, above=None):
    """An argparse type: a finite float in the range (`minimum`/`maximum` inclusive, `above` exclusive)."""
    expected = " ".join(part for part in ("a finite number", _bounds(minimum, maximum, above)) if part)
    return _parser(float, expected, minimum, maximum, above)


def integer_list(minimum=None, *, distinct=False, example="1,5,10"):
    """An argparse type: comma-separated ints, each >= `minimum`, all different with `distinct`."""
    one = integer(minimum)
    expected = (f"{'different ' if distinct else ''}integers{' >= ' + str(minimum) if minimum is not None else ''} "
                f"separated by commas, e.g. {example}")

    def parse(text):
        try:
            values = [one(part) for part in text.split(",")]
        except argparse.ArgumentTypeError:
            values = None
        if not values or (distinct and len(set(values)) != len(values)):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return values
    parse.__name__ = "integer list"
    return parse
