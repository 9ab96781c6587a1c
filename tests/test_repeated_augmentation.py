"""Repeated augmentation (data.repeated_augmentation, DeiT's RASampler): the sampler's order
against hand-written lists, the epoch length, resume, and the copies' own augmentations."""
import dataclasses

import numpy as np
import pytest

from paddle_vit import ConfigError
from paddle_vit.config import load_config
from paddle_vit.data import DataConfig, ResumableBatchSampler, build_dataloader, build_datasets
from paddle_vit.engine.trainer import Trainer

from test_failures import assert_train_refuses, write_config
from test_train import assert_resumed_equals_straight, run_straight_and_stopped, small_config, stop_after


def sampler(num_samples, batch, repeats, world=1, rank=0, shuffle=False, seed=0):
    return ResumableBatchSampler(num_samples, batch, shuffle=shuffle, drop_last=True, seed=seed, num_replicas=world,
                                 rank=rank, by_step=True, repeats=repeats)


# ---------------------------------------------------------------------------- the order

def test_order_by_hand_on_two_ranks_and_on_one():
    """8 images, 3 copies, batch 2 on 2 ranks. The repeated list is 0 0 0 1 1 1 2 2 ..., cut to the
    epoch's 8 positions; copy c of image i is handed to the dataset as c * 8 + i. Rank 0 reads the
    positions 0 2 4 6: (0,c0) (0,c2) (1,c1) (2,c0) = 0 16 9 2; rank 1 the positions 1 3 5 7:
    (0,c1) (1,c0) (1,c2) (2,c1) = 8 1 17 10."""
    assert list(sampler(8, 2, 3, world=2, rank=0)) == [[0, 16], [9, 2]]
    assert list(sampler(8, 2, 3, world=2, rank=1)) == [[8, 1], [17, 10]]
    # one process of batch 4 reads the same 8 positions in order: an image's copies side by side
    assert list(sampler(8, 4, 3)) == [[0, 8, 16, 1], [9, 17, 2, 10]]
    # the dataset indices without the copy tags
    np.testing.assert_array_equal(sampler(8, 2, 3, world=2, rank=1).local_indices(), [0, 1, 1, 2])


def test_shuffled_order_is_the_epochs_permutation_repeated_and_dealt_round_the_ranks():
    num_images, repeats, world, batch, seed, epoch = 10, 2, 3, 1, 4, 5
    # the shuffle generator as rng.py keys it: stream 2, then (seed, epoch)
    permutation = np.random.default_rng(np.random.SeedSequence([2, seed, epoch])).permutation(num_images)
    total = world * 4  # ceil(10 / 3) = 4 positions per rank
    images = np.repeat(permutation, repeats)[:total]
    copies = np.tile([0, 1], num_images)[:total]
    tagged = copies * num_images + images
    for rank in range(world):
        ranked = sampler(num_images, batch, repeats, world=world, rank=rank, shuffle=True, seed=seed)
        ranked.set_epoch(epoch)
        assert [i for b in ranked for i in b] == tagged[rank::world].tolist()


def test_every_image_read_comes_n_times_with_copies_0_to_n_minus_1():
    num_images, repeats, world = 12, 3, 2
    read = []
    for rank in range(world):
        ranked = sampler(num_images, 2, repeats, world=world, rank=rank, shuffle=True, seed=1)
        ranked.set_epoch(2)
        read += [i for b in ranked for i in b]
    images, copies = np.array(read) % num_images, np.array(read) // num_images
    counts = np.bincount(images, minlength=num_images)
    # 12 positions for 3 copies each: 4 images, each 3 times, and 8 images not this epoch
    assert sorted(counts.tolist()) == [0] * 8 + [3] * 4
    for image in np.flatnonzero(counts):
        assert sorted(copies[images == image].tolist()) == [0, 1, 2]
    # the 3 copies of an image sit at 3 consecutive positions: on 2 ranks never all on one
    for image in np.flatnonzero(counts):
        per_rank = [sum(1 for i in read[rank * 6:(rank + 1) * 6] if i % num_images == image) for rank in range(world)]
        assert sorted(per_rank) == [1, 2]


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("repeats", [2, 3])
def test_each_rank_reads_as_many_samples_as_without_repetition(world, repeats):
    plain = [sampler(50, 4, 1, world=world, rank=r, shuffle=True) for r in range(world)]
    repeated = [sampler(50, 4, repeats, world=world, rank=r, shuffle=True) for r in range(world)]
    expected_batches = (50 + world - 1) // world // 4  # ceil(50 / R) per rank, whole batches of 4
    for one, other in zip(plain, repeated):
        assert len(one) == len(other) == expected_batches
        assert sum(len(b) for b in other) == sum(len(b) for b in one) == 4 * expected_batches


def test_repeats_1_is_the_order_without_repetition():
    for rank in range(2):
        old = ResumableBatchSampler(20, 3, shuffle=True, drop_last=True, seed=2, num_replicas=2, rank=rank,
                                    by_step=True)
        assert list(sampler(20, 3, 1, world=2, rank=rank, shuffle=True, seed=2)) == list(old)


def test_resume_mid_epoch_yields_the_rest():
    full = sampler(30, 2, 3, world=2, rank=1, shuffle=True, seed=9)
    full.set_epoch(3)
    batches = list(full)
    resumed = sampler(30, 2, 3, world=2, rank=1, shuffle=True, seed=9)
    resumed.set_epoch(3, start_batch=4)
    assert list(resumed) == batches[4:]
    assert list(resumed) == batches  # the resume applies to one iteration only


def test_each_step_holds_the_same_copies_on_any_number_of_ranks():
    """Step k reads positions k * R * B ... (k + 1) * R * B - 1 whatever R: one process of batch 4
    and 2 ranks of batch 2 read the same (image, copy) pairs at every step, so a checkpoint that
    carries its position in images resumes on another number of processes at the same pair."""
    def steps(world, batch, start_batch=0):
        ranks = [sampler(40, batch, 3, world=world, rank=r, shuffle=True, seed=6) for r in range(world)]
        for ranked in ranks:
            ranked.set_epoch(1, start_batch=start_batch)
        per_rank = [list(ranked) for ranked in ranks]
        return [sorted(sum((batches[k] for batches in per_rank), [])) for k in range(len(per_rank[0]))]
    single = steps(1, 4)
    assert steps(2, 2) == single and steps(4, 1) == single
    assert steps(2, 2, start_batch=3) == single[3:]


def test_bad_repeats_are_refused_by_the_sampler():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="repeats"):
            sampler(10, 2, bad)


# ---------------------------------------------------------------------------- the copies' augmentations

AUGMENTED = dict(dataset="synthetic", synthetic_train_size=12, synthetic_val_size=4, synthetic_classes=4,
                 train_crop="random_resized_crop", hflip=0.5, random_erasing=0.5)


def synthetic_train(**overrides):
    settings = dataclasses.replace(DataConfig(), **{**AUGMENTED, **overrides})
    return build_datasets(settings, 16, seed=7)[0]


def keyed(*words):
    """A generator keyed as rng.py keys a sample: stream 1, then (seed, epoch, index[, copy])."""
    return np.random.default_rng(np.random.SeedSequence([1, *words]))


def test_copies_get_their_own_augmentations_and_copy_0_is_the_plain_keyed_draw():
    dataset = synthetic_train()
    dataset.set_epoch(2)
    index, num_images = 5, 12
    image, label = dataset.source.load(index)
    plain, _ = dataset[index]
    # copy 0 (repeated_augmentation 1) is bit-identical to the (seed, epoch, index) draw
    np.testing.assert_array_equal(plain, dataset.transform(image, keyed(7, 2, index)))
    copies = [dataset[copy * num_images + index] for copy in (1, 2)]
    for copy, (array, copy_label) in zip((1, 2), copies):
        assert copy_label == label
        np.testing.assert_array_equal(array, dataset.transform(image, keyed(7, 2, index, copy)))
        assert not np.array_equal(array, plain)
    assert not np.array_equal(copies[0][0], copies[1][0])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_serves_each_copy_with_its_label_and_resumes(num_workers):
    dataset = synthetic_train()
    loader = build_dataloader(dataset, 4, shuffle=True, drop_last=True, num_workers=num_workers, seed=3,
                              by_step=True, repeats=3)
    loader.set_epoch(1)
    full = [(images.numpy(), labels.numpy()) for images, labels in loader]
    assert len(full) == 3  # 12 images, batch 4: the length without repetition
    tagged = np.concatenate(list(loader.batch_sampler))
    dataset.set_epoch(1)
    expected = np.stack([dataset[int(t)][0] for t in tagged])
    np.testing.assert_array_equal(np.concatenate([images for images, _ in full]), expected)
    np.testing.assert_array_equal(np.concatenate([labels for _, labels in full]), dataset.labels[tagged % 12])
    loader.set_epoch(1, start_batch=2)
    tail = [(images.numpy(), labels.numpy()) for images, labels in loader]
    assert len(tail) == 1
    np.testing.assert_array_equal(tail[0][0], full[2][0])


# ---------------------------------------------------------------------------- the recipe key

@pytest.mark.parametrize("value, fragment", [
    ("0", "got 0"), ("-1", "got -1"), ("2.5", "must be an integer, got 2.5"), ("three", "got 'three'"),
    ("true", "got True"), ("inf", "got 'inf'"), (".inf", "got inf"), ("nan", "got 'nan'"), (".nan", "got nan"),
])
def test_bad_repeated_augmentation_is_one_line_and_leaves_nothing_behind(tmp_path, capsys, value, fragment):
    assert_train_refuses(tmp_path, capsys, write_config(tmp_path), [f"data.repeated_augmentation={value}"],
                         "data.repeated_augmentation", fragment)


def test_more_repeats_than_training_images_is_one_line_and_leaves_nothing_behind(tmp_path, capsys):
    """The synthetic set of test_failures' recipe has 48 training images: 49 copies of each would
    leave an epoch less than one distinct image; 48 still runs."""
    assert_train_refuses(tmp_path, capsys, write_config(tmp_path), ["data.repeated_augmentation=49"],
                         "data.repeated_augmentation 49 is more than the 48 training images")


def test_the_trainer_builds_its_train_loader_with_the_repeats(tmp_path):
    config = load_config(data={"data": {"dataset": "synthetic", "repeated_augmentation": 3},
                               "model": {"name": "vit_walkthrough", "image_size": 14, "embed_dim": 16, "depth": 1,
                                         "num_heads": 2},
                               "train": {"device": "cpu", "batch_size": 16, "output_dir": str(tmp_path / "run")}})
    trainer = Trainer(config)
    assert trainer.parts.train_loader.batch_sampler.repeats == 3
    assert trainer.parts.val_loader.batch_sampler.repeats == 1  # evaluation reads every image once
    assert len(trainer.parts.train_loader) == 64 // 16  # the synthetic set's 64 images: the length kept


@pytest.mark.slow
def test_resume_mid_epoch_with_repeats_3_augment_and_mixup_equals_the_uninterrupted_run(tmp_path):
    augment = {"repeated_augmentation": 3, "auto_augment": "three_augment", "mixup_alpha": 0.8, "cutmix_alpha": 1.0}

    def config(name, **train):
        return small_config(tmp_path / name, data=dict(augment), train=train)

    assert_resumed_equals_straight(*run_straight_and_stopped(config, tmp_path), keys=("train_loss",))


def test_a_resume_with_another_repetition_is_refused_in_one_line(tmp_path):
    def config(repeats, **train):
        return small_config(tmp_path / "run", data={"repeated_augmentation": repeats}, train=train)

    first = Trainer(config(3))
    stop_after(first, 2)
    assert first.fit()["interrupted"]
    with pytest.raises(ConfigError, match=r"data.repeated_augmentation 3 \(the config: 2\)"):
        Trainer(config(2, resume="auto"))
