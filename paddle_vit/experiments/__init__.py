"""The experiments that measure the models rather than make them: data_size.py, the paper's
data-size experiment in miniature (Section 4.3: ViT, hybrid, ResNet and DeiT's distilled ViT on
growing fractions of the digits), deit_budget.py, DeiT's distillation given DeiT's training budget
(augmentation, hundreds of epochs; no teacher, hard and soft), resolution.py, trained models evaluated at input sizes other
than the training one (RoPE-ViT's Figure 3: each kind of position embedding resampled or
recomputed for the new grid), and scaling.py, training at scale on paper (compute, memory and
all-reduce traffic per GPU, arithmetic on a `ViTConfig`).

The data-size experiment's and resolution.py's names are this package's too (``from paddle_vit
import experiments; experiments.run_data_size_experiment(...)``, as notebooks/03 reads them;
notebooks/02 reads `accuracy_at_sizes`), imported on first use so that `scaling` stays free of
Paddle.
"""
from ..lazy import lazy_names

# public name -> the module of this package that defines it (PEP 562)
_LAZY = {name: "data_size" for name in (
    "FAMILIES", "TEACHERS", "IMAGE_SIZE", "BATCH_SIZE", "FEWSHOT_SHOTS", "FEWSHOT_L2_REG", "FEWSHOT_DRAWS",
    "FIGURE_SHOTS", "RECIPE", "experiment_config", "training_images", "train_one", "fewshot_of_trained",
    "run_data_size_experiment", "run_folder", "teacher_checkpoint", "seed_spread", "figure_shots",
    "data_size_figure", "result_rows")}
_LAZY.update({name: "resolution" for name in ("at_any_size", "accuracy_at_sizes", "resolution_figure")})
_LAZY.update({name: "deit_budget" for name in (
    "MODES", "HEADS", "run_deit_budget_experiment", "deit_budget_figure", "head_predictions", "summarise",
    "table_rows")})

__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
