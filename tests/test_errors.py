"""The one rule for "must be one of": the value back, or one line naming the key, the choices,
the value given and the nearest choices."""
import pytest

from paddle_vit.errors import ConfigError, WeightsError, check_choice


def test_a_valid_choice_is_returned():
    assert check_choice("data.interpolation", "bicubic", ("bilinear", "bicubic")) == "bicubic"


def test_a_wrong_choice_names_key_choices_value_and_the_nearest():
    with pytest.raises(ConfigError) as raised:
        check_choice("model.pool", "men", ("cls", "mean", "map"))
    assert str(raised.value) == "model.pool must be one of cls, mean, map, got 'men' (did you mean: mean?)"


def test_the_error_class_is_the_callers_and_non_strings_are_named():
    with pytest.raises(WeightsError, match=r"^resample must be one of 1, 2, got 3$"):
        check_choice("resample", 3, (1, 2), error=WeightsError)
