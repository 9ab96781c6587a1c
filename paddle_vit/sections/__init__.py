"""The sections of a recipe other than the data's, one module each: model.py (`ModelConfig`),
optimizer.py (`OptimizerConfig`, `ScheduleConfig`), train.py (`TrainConfig`,
`DistillationConfig`), evaluation.py (`EvalConfig`). The data section is paddle_vit/data/config.py's,
so that the data package needs nothing above it.

Each is a dataclass whose keys carry their checks beside them (paddle_vit/checks.py) and whose
`validate()` checks the section on its own; paddle_vit/config.py loads a recipe into them, calls
each `validate()` once, and then checks the rules that read two sections.
"""
