"""The project's exceptions.

Everything a user can get wrong (a config key, a path, a checkpoint, a model name) raises a
subclass of `PaddleVitError` with a one-line message naming the thing and what was expected.
The `tools/` scripts turn these into ``error: ...`` on stderr and exit code 2.
"""
import difflib


class PaddleVitError(Exception):
    """Base class: a mistake in what the user asked for, explained in one line."""


class ConfigError(PaddleVitError, ValueError):
    """A config value, override or model argument that cannot be used."""


class WeightsError(PaddleVitError, ValueError):
    """A checkpoint that is missing, corrupt or does not fit the model."""


class DataError(PaddleVitError, ValueError):
    """A data set folder, archive or image that cannot be read."""


def close_matches(word, candidates, n=3):
    """A ` (did you mean: a, b?)` suffix naming the closest candidates, or ''."""
    matches = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=n, cutoff=0.5)
    return f" (did you mean: {', '.join(matches)}?)" if matches else ""


def check_choice(name, value, choices, error=ConfigError):
    """`value` when it is one of `choices`; otherwise `error` (a `PaddleVitError` class) with the
    one line ``NAME must be one of A, B, got 'V' (did you mean: A?)``."""
    if value not in choices:
        raise error(f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}"
                    f"{close_matches(value, choices)}")
    return value


class TrainingError(PaddleVitError, RuntimeError):
    """A run that cannot go on: out of memory, a diverged loss, an output it cannot write."""


class ExportError(PaddleVitError):
    """An export that cannot be written or converted, or an exported folder that cannot be read."""
