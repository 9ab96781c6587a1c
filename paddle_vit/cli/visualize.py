"""Draw what a trained ViT learned (paper Fig. 6 and 7):
paddle-vit visualize --weights PATH [-c CONFIG | --model NAME] --image FILE [FILE ...] --out DIR [--vdl]

Writes to DIR (created; checked writable before any work): attention_maps.png (attention rollout and the last layer's class-token attention
per head over the first --rows images), position_embedding_similarity.png, embedding_filters.png
and attention_distance.png (averaged over all the given images). --vdl also logs them to DIR/vdl for
VisualDL's image tab. --weights takes what tools/eval.py takes, and the recipe is found as there:
-c, else --model, else the one a .pdckpt stores, else the model a timm or Hugging Face folder names.
"""
import os

from visualdl import LogWriter

from . import ArgumentParser, add_common_arguments, run
from .numbers import integer
from .. import fileio, viz
from ..deploy.predict import list_images, model_for_weights
from ..device import select_device
from ..engine.logging_utils import setup_logging
from ..recipe import config_for_weights
from ..weights.source import resolve_weights

MAX_DPI = 1000  # 1000 dpi is already a poster; more only exhausts memory


def visualize(argv):
    parser = ArgumentParser(description="Draw the attention maps, position-embedding similarity, "
                            "embedding filters and attention distance of a ViT.")
    parser.add_argument("-c", "--config", help="the YAML recipe the weights were trained with (a .pdckpt stores "
                                               "its own)")
    parser.add_argument("--model", metavar="NAME", help="a registered model name instead of a recipe (optional for "
                                                        "a timm Hub or Hugging Face folder, which says what it is)")
    parser.add_argument("--weights", required=True, help=".pdckpt, .pdparams, .safetensors or .npz weights")
    parser.add_argument("--image", required=True, nargs="+", metavar="FILE",
                        help="images (or folders of images) to look at; unreadable ones are skipped with a warning")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder for the PNGs")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--ema", action="store_true", help="use the EMA weights of a .pdckpt")
    parser.add_argument("--vdl", action="store_true", help="also log the figures to DIR/vdl (VisualDL images)")
    parser.add_argument("--rows", type=integer(1), default=8, metavar="N",
                        help="draw the attention maps of the first N images (the distance uses all)")
    parser.add_argument("--dpi", type=integer(1, MAX_DPI), default=100, help="resolution of the PNGs")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    setup_logging()
    source = resolve_weights(args.weights)  # read once: the recipe, then the model, from it
    config = config_for_weights(source, args.config, args.model, args.override)
    paths = list_images(args.image)
    with fileio.output_folder(args.out, "--out"):  # checked before the model is loaded and run; gone on failure
        draw(args, config, source, paths)
    return 0


def draw(args, config, source, paths):
    """Load the weights (`source`), draw every figure into args.out and print where they went."""
    select_device(config.train.device)
    model = model_for_weights(config, source, use_ema=args.ema)
    images, paths = viz.prepare_images(paths, config, model.patch_embed.image_size[0])
    titles = [os.path.basename(path) for path in paths]
    paths, numbers, figures = viz.write_figures(model, images, config.data.mean, config.data.std, args.out,
                                                titles=titles, max_rows=args.rows, dpi=args.dpi)
    if args.vdl:
        with LogWriter(logdir=os.path.join(args.out, "vdl")) as writer:
            for name, figure in figures.items():
                writer.add_image(tag=f"viz/{name}", img=viz.figure_to_array(figure, args.dpi), step=0)
        print(f"VisualDL: visualdl --logdir {os.path.join(args.out, 'vdl')}")
    for path in paths.values():
        print(path)
    distance = numbers["attention_distance"]["distance"]
    print("mean attention distance (pixels) per layer, averaged over heads: "
          + ", ".join(f"{value:.1f}" for value in distance.mean(axis=1)))


COMMAND = visualize


def main(argv=None):
    """``paddle-vit visualize`` in this process: the exit code (2 with one ``error:`` line)."""
    return run(COMMAND, argv)
