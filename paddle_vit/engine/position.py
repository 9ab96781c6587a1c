"""Where a run stands, defined once: `TrainingPosition`.

Each field is a key of the same name in the run's checkpoints: `to_checkpoint` writes them all,
`from_checkpoint` reads them back (a field a checkpoint predates keeps its default),
`resume.carry_position_over` rescales the ones marked `summed_over_steps` when a resume changes
the size of a step, and `resume.check_ranks_agree` compares every number field between the
processes of a run. A new resumable counter is one field here.
"""
import dataclasses

# a field's metadata: a sum of one value per step of this epoch, rescaled by a resume that
# changes how many images a step holds
SUMMED_OVER_STEPS = {"summed_over_steps": True}


def _summed_over_steps(default):
    return dataclasses.field(default=default, metadata=SUMMED_OVER_STEPS)


@dataclasses.dataclass
class TrainingPosition:
    """Where a run stands: a fresh one at its start, a resumed one where its checkpoint was
    written."""
    epoch: int = 0  # finished epochs
    batch_in_epoch: int = 0  # batches of the current epoch trained
    global_step: int = 0  # optimizer updates made
    best_top1: float = -1.0  # the best validation top-1 so far (best.<weights_format> holds its weights)
    epoch_loss_sum: float = _summed_over_steps(0.0)  # the current epoch's so far, kept across a resume
    epoch_loss_count: int = _summed_over_steps(0)
    bad_steps: int = 0  # non-finite losses in a row
    history: list = dataclasses.field(default_factory=list)  # every finished epoch's metrics record

    @classmethod
    def from_checkpoint(cls, state):
        """The position a checkpoint's `state` records."""
        return cls(**{field.name: state[field.name] for field in dataclasses.fields(cls) if field.name in state})

    def to_checkpoint(self):
        """{checkpoint key: value}, one for each field."""
        return dataclasses.asdict(self)

    def numbers(self):
        """{name: value} of the fields that are single numbers (all but the history), in field order."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                if field.type in (int, float)}

    def summed_over_steps(self):
        """The names of the fields that are sums over the current epoch's steps."""
        return [field.name for field in dataclasses.fields(self) if field.metadata.get("summed_over_steps")]
