"""A config section's keys declared with their checks beside them.

A section of a recipe is a dataclass. A key whose value must lie in a range or among choices is
declared with `setting(default, *checks)`, so that its rule stands on its own line; the section's
`validate()` runs them all with `check_settings` and then checks what reads several keys at once.
A check is called as ``check(key, value)`` and raises ConfigError, one line naming the key, what
was expected and what was given. Only the standard library and errors.py: the data section uses
it below Paddle.
"""
import dataclasses
import typing

from .errors import ConfigError, check_choice


def setting(default, *checks, **metadata):
    """A dataclass field of `default` whose value `check_settings` passes through `checks`, in
    order; a list default is copied for each instance."""
    metadata = dict(metadata, checks=checks)
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def check_settings(section, prefix):
    """Run the checks of every field of the dataclass `section` in the order the fields are
    declared, each key named `prefix.field`. A null value of an Optional field is not checked:
    null means off, or the value that comes from elsewhere (the registered model's)."""
    for field in dataclasses.fields(section):
        value = getattr(section, field.name)
        if value is None and type(None) in typing.get_args(field.type):
            continue
        for check in field.metadata.get("checks", ()):
            check(f"{prefix}.{field.name}", value)


def one_of(choices):
    def check(key, value):
        check_choice(key, value, choices)
    return check


def at_least(low):
    """value >= low; `low` is shown as written (1 for an integer key, 0.0 for a number)."""
    def check(key, value):
        if value < low:
            raise ConfigError(f"{key} must be >= {low}, got {value!r}")
    return check


def above(low):
    def check(key, value):
        if value <= low:
            raise ConfigError(f"{key} must be > {low}, got {value!r}")
    return check


def within(low, high, low_open=False, high_open=False, note="", shown=None):
    """low <= value <= high, either end excluded when open. The message shows the range as
    `shown`, by default as the numbers are written, followed by `note` (an example, what null
    means)."""
    shown = shown or f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"

    def check(key, value):
        inside = (low < value if low_open else low <= value) and (value < high if high_open else value <= high)
        if not inside:
            raise ConfigError(f"{key} must be in {shown}{note}, got {value!r}")
    return check


FRACTION = within(0, 1, high_open=True)  # a share that cannot be the whole (a split, a decay, a momentum)
PROBABILITY = within(0, 1)
SEED = within(0, 2 ** 32 - 1, shown="[0, 2**32 - 1]")  # numpy's and Paddle's seeds, and the data's keyed generators
