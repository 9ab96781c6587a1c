"""Where a run stands (engine/position.py): one definition, saved and restored by its fields."""
import dataclasses

from paddle_vit.config import load_config
from paddle_vit.engine.position import TrainingPosition
from paddle_vit.engine.resume import BatchGeometry, carry_position_over


def test_every_field_is_a_checkpoint_key_and_comes_back():
    position = TrainingPosition(epoch=2, batch_in_epoch=3, global_step=15, best_top1=0.5, epoch_loss_sum=4.5,
                                epoch_loss_count=3, bad_steps=1, history=[{"epoch": 1}, {"epoch": 2}])
    saved = position.to_checkpoint()
    assert list(saved) == [field.name for field in dataclasses.fields(TrainingPosition)]
    assert TrainingPosition.from_checkpoint({**saved, "model": {}, "config": {}}) == position


def test_a_checkpoint_that_predates_a_field_resumes_with_its_default():
    restored = TrainingPosition.from_checkpoint({"epoch": 1, "global_step": 6})
    assert restored == TrainingPosition(epoch=1, global_step=6)


def test_the_numbers_leave_out_the_history_and_the_step_sums_are_marked():
    position = TrainingPosition(history=[{"epoch": 1}])
    assert "history" not in position.numbers() and "global_step" in position.numbers()
    assert position.summed_over_steps() == ["epoch_loss_sum", "epoch_loss_count"]


def test_a_resume_with_half_the_images_per_step_doubles_the_step_counts():
    config = load_config(data={"train": {"batch_size": 8}})
    recorded = {"config": {"train": {"batch_size": 16, "accumulate_steps": 1}}, "world_size": 1}
    assert BatchGeometry.recorded_in(recorded).images_per_step == 16
    position = TrainingPosition(epoch=1, batch_in_epoch=2, global_step=8, epoch_loss_sum=3.0, epoch_loss_count=2)
    carried = carry_position_over(position, recorded, config, processes=1, batches_per_epoch=12)
    assert (carried.batch_in_epoch, carried.epoch_loss_sum, carried.epoch_loss_count) == (4, 6.0, 4)
    assert (carried.epoch, carried.global_step) == (1, 8)
