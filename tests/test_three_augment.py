"""3-Augment (data.auto_augment: three_augment, DeiT III): each operation against a hand
computation on a tiny image, one operation per image drawn from the keyed generator, the colour
jitter, and the recipe keys."""
import dataclasses

import numpy as np
import pytest
from PIL import Image

from paddle_vit.data import DataConfig, build_transforms
from paddle_vit.data.three_augment import ThreeAugment, gaussian_blur, gaussian_kernel, grayscale, solarize
from paddle_vit.data.transforms import ColorJitter

from test_failures import assert_train_refuses, write_config


def rgb(pixels):
    return Image.fromarray(np.asarray(pixels, dtype=np.uint8), "RGB")


def keyed(*words):
    return np.random.default_rng(np.random.SeedSequence(list(words)))


TINY = rgb([[[10, 200, 30], [255, 0, 0], [0, 0, 255]],
            [[128, 127, 129], [255, 255, 255], [60, 90, 120]]])  # [2, 3, 3]


def test_grayscale_is_the_601_luma_in_every_channel():
    # 0.299 R + 0.587 G + 0.114 B, worked out by hand and rounded half up
    luma = [[124, 76, 29],  # 2.99 + 117.4 + 3.42 = 123.81; 76.245; 29.07
            [128, 255, 84]]  # 38.272 + 74.549 + 14.706 = 127.527; 255; 17.94 + 52.83 + 13.68 = 84.45
    out = np.asarray(grayscale(TINY))
    np.testing.assert_array_equal(out, np.repeat(np.array(luma)[..., None], 3, axis=2))


def test_solarize_inverts_every_value_from_128_up():
    out = np.asarray(solarize(TINY))
    expected = [[[10, 55, 30], [0, 0, 0], [0, 0, 0]],
                [[127, 127, 126], [0, 0, 0], [60, 90, 120]]]
    np.testing.assert_array_equal(out, expected)


def test_gaussian_kernel_of_sigma_half():
    # radius ceil(3 * 0.5) = 2; exp(-t^2 / 0.5) at t = 0, 1, 2 is 1, e^-2, e^-8, then / the sum
    raw = np.array([np.exp(-8), np.exp(-2), 1.0, np.exp(-2), np.exp(-8)])
    np.testing.assert_allclose(gaussian_kernel(0.5), raw / raw.sum(), rtol=1e-12)
    np.testing.assert_allclose(gaussian_kernel(0.5)[2], 0.78657, atol=1e-5)
    assert len(gaussian_kernel(1.2)) == 2 * 4 + 1  # ceil(3.6) = 4


def test_gaussian_blur_of_a_point_and_of_an_edge():
    weights = np.array([0.000264, 0.106450, 0.786570, 0.106450, 0.000264])  # sigma 0.5, from the test above
    point = np.zeros((5, 5, 3), np.uint8)
    point[2, 2] = 255
    out = np.asarray(gaussian_blur(rgb(point), 0.5)).astype(float)
    np.testing.assert_array_equal(out[..., 0], np.floor(255 * np.outer(weights, weights) + 0.5))
    assert out[2, 2, 0] == 158  # 255 * 0.78657^2 = 157.8
    # a vertical edge: the border columns repeat outwards, so the outer ones keep their values
    edge = np.zeros((3, 6, 3), np.uint8)
    edge[:, 3:] = 255
    row = np.asarray(gaussian_blur(rgb(edge), 0.5))[1, :, 1]
    # column 2 sees 255 at offsets +1, +2; column 3 at 0, +1, +2
    assert row.tolist() == [0, 0, 27, 228, 255, 255]  # 255 * 0.106714 = 27.2; 255 * 0.893284 = 227.8


def test_one_operation_per_image_drawn_operation_first_then_sigma():
    augment = ThreeAugment()
    candidates = {"grayscale": np.asarray(grayscale(TINY)), "solarize": np.asarray(solarize(TINY))}
    seen = set()
    for key in range(12):
        out = np.asarray(augment(TINY, keyed(1, 0, 0, key)))
        draws = keyed(1, 0, 0, key)  # the documented order: the operation (of 3), then sigma in [0.1, 2]
        which = int(draws.integers(3))
        expected = ([candidates["grayscale"], candidates["solarize"]][which] if which < 2
                    else np.asarray(gaussian_blur(TINY, draws.uniform(0.1, 2.0))))
        np.testing.assert_array_equal(out, expected)
        matches = [name for name, image in candidates.items() if np.array_equal(out, image)]
        assert len(matches) <= 1
        seen.add(which)
    assert seen == {0, 1, 2}


def test_same_key_same_image_other_key_may_differ():
    augment = ThreeAugment()
    image = rgb(np.arange(4 * 4 * 3).reshape(4, 4, 3) * 5)
    for key in range(6):
        np.testing.assert_array_equal(np.asarray(augment(image, keyed(1, 3, 2, key))),
                                      np.asarray(augment(image, keyed(1, 3, 2, key))))


def test_the_choice_is_uniform_over_many_keys():
    augment = ThreeAugment()
    names = [augment.choose(keyed(1, 0, 5, key))[0] for key in range(3000)]
    counts = [names.count(name) for name in ("grayscale", "solarize", "gaussian_blur")]
    # 1000 expected each, standard deviation sqrt(3000 / 3 * 2 / 3) = 25.8: five of them
    assert all(abs(count - 1000) < 130 for count in counts), counts
    sigmas = [augment.choose(keyed(1, 0, 6, key))[1] for key in range(300)]
    sigmas = [s for s in sigmas if s is not None]
    assert 0.1 <= min(sigmas) and max(sigmas) <= 2.0


def test_colour_jitter_scales_a_grey_image_by_the_brightness_factor():
    # on a uniform grey image contrast (blend with its mean) and saturation (with its grey) change nothing
    grey = rgb(np.full((3, 3, 3), 100))
    out = np.asarray(ColorJitter(0.3)(grey, keyed(9)))
    draws = keyed(9)
    draws.permutation(3)
    brightness = draws.uniform(0.7, 1.3, size=3)[0]
    assert np.all(np.abs(out.astype(float) - 100 * brightness) <= 1), (out[0, 0], 100 * brightness)


def config(**overrides):
    return dataclasses.replace(DataConfig(), **overrides)


def test_the_train_pipeline_places_3_augment_and_its_jitter_after_the_crop_and_flip():
    steps = build_transforms(config(auto_augment="three_augment", train_crop="random_resized_crop", hflip=0.5),
                             16, train=True).transforms
    assert [type(step).__name__ for step in steps] == ["RandomResizedCrop", "RandomHorizontalFlip", "ThreeAugment",
                                                       "ColorJitter", "ToNormalizedArray"]
    assert steps[3].strength == 0.3  # color_jitter null: DeiT III's 0.3
    off = build_transforms(config(auto_augment="three_augment", color_jitter=0.0), 16, train=True).transforms
    assert "ColorJitter" not in [type(step).__name__ for step in off]
    default = build_transforms(config(), 16, train=True).transforms
    assert [type(step).__name__ for step in default] == ["Resize", "ToNormalizedArray"]


@pytest.mark.parametrize("overrides, fragments", [
    (["data.auto_augment=three_augments"], ["data.auto_augment must be one of none, three_augment",
                                            "did you mean: three_augment"]),
    (["data.auto_augment=three_augment", "data.randaugment_num_ops=2"],
     ["data.auto_augment three_augment and data.randaugment_num_ops 2", "data.randaugment_num_ops=0"]),
    (["data.color_jitter=-0.1"], ["data.color_jitter must be a finite number >= 0", "-0.1"]),
    (["data.color_jitter=.inf"], ["data.color_jitter must be a finite number", "inf"]),
    (["data.color_jitter=.nan"], ["data.color_jitter must be a finite number", "nan"]),
])
def test_bad_3_augment_keys_are_one_line_and_leave_nothing_behind(tmp_path, capsys, overrides, fragments):
    assert_train_refuses(tmp_path, capsys, write_config(tmp_path), overrides, *fragments)
