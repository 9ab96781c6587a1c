"""Execute the notebooks top to bottom and keep their outputs, so that a reader sees the figures
without running anything (on GitHub, AI Studio or any notebook viewer).

    python tools/execute_notebooks.py                  # all of notebooks/ and notebooks/zh-CN/, in place
    python tools/execute_notebooks.py 02_position_embeddings.ipynb zh-CN/02_position_embeddings.ipynb
    python tools/execute_notebooks.py --check          # execute and check, write nothing
    python tools/execute_notebooks.py --check --quick  # the same in the test suite's smaller setting

Each notebook runs in a fresh Jupyter kernel with notebooks/ as its working folder, as a student's
Jupyter runs it (nbclient and ipykernel: `pip install -e ".[test]"`). Then:
- every PNG output wider than --max-width pixels (900) is scaled down to it, and every PNG is saved
  again with at most 256 colours (Pillow), so the committed notebook stays a few hundred KB;
- the volatile metadata is dropped: the timing of each cell's execution, which changes on every
  run and says nothing to a reader;
- the notebook is written back atomically (a temporary file renamed over it): an interrupted run
  leaves the previous version whole.
A notebook that fails (an error output, a traceback on stderr) is reported in one line and not
written; the exit code is then 1.

`--quick` sets PADDLE_VIT_NOTEBOOK_QUICK=1 for the kernel: each notebook's first cell reads it
and cuts epochs, seeds and data sizes so that it runs in well under a minute. Those outputs show
that the notebook runs, not what it finds, so `--quick` never writes (it implies `--check`).
The full run takes about six minutes on two cores.
"""
import argparse
import base64
import io
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(REPO, "notebooks")
QUICK_VARIABLE = "PADDLE_VIT_NOTEBOOK_QUICK"
MAX_WIDTH = 900  # pixels: wider than a notebook viewer's column, so nothing a reader sees is lost
VOLATILE_CELL_METADATA = ("execution", "ExecuteTime")  # nbclient's and the classic extension's timings


def notebook_paths(names=()):
    """The notebooks to run: the given names (in notebooks/, or paths), else all of notebooks/ and
    their Chinese twins in notebooks/zh-CN/."""
    if not names:
        return [os.path.join(folder, name) for folder in (NOTEBOOKS, os.path.join(NOTEBOOKS, "zh-CN"))
                for name in sorted(os.listdir(folder)) if name.endswith(".ipynb")]
    paths = [name if os.path.exists(name) else os.path.join(NOTEBOOKS, name) for name in names]
    missing = [name for name, path in zip(names, paths) if not os.path.isfile(path)]
    if missing:
        raise ValueError(f"no notebook {', '.join(missing)} in notebooks/ (expected one of "
                         f"{', '.join(os.path.relpath(path, NOTEBOOKS) for path in notebook_paths())})")
    return paths


def execute(path, quick=False, timeout=1200):
    """Run the notebook at `path` top to bottom in a new kernel, from notebooks/; returns the
    executed notebook (nbformat's node), the file untouched. Raises nbclient's
    CellExecutionError, naming the cell, on the first cell that fails."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    environment = {key: value for key, value in os.environ.items() if key != QUICK_VARIABLE}
    if quick:
        environment[QUICK_VARIABLE] = "1"
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}})
    client.execute(env=environment)
    return notebook


def code_outputs(notebook):
    """(cell, output) for every output of every code cell, in order."""
    return [(cell, output) for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]


def problems(notebook):
    """What is wrong with an executed notebook, one line each: error outputs, tracebacks or
    errors written to stderr, code cells that did not run."""
    found = []
    for cell, output in code_outputs(notebook):
        first_line = cell.source.splitlines()[0] if cell.source else ""
        if output.output_type == "error":
            found.append(f"cell '{first_line}': {output.ename}: {output.evalue}")
        elif output.output_type == "stream" and output.name == "stderr" and (
                "Traceback" in output.text or "Error" in output.text):
            found.append(f"cell '{first_line}' wrote to stderr: {output.text.strip().splitlines()[-1]}")
    found += [f"cell '{cell.source.splitlines()[0] if cell.source else ''}' did not run"
              for cell in notebook.cells if cell.cell_type == "code" and cell.execution_count is None]
    return found


def shrink_png(data, max_width=MAX_WIDTH):
    """A base64 PNG at most `max_width` pixels wide (scaled down with its aspect kept) and saved
    again with at most 256 colours; returns (base64 PNG, width, height). Most figures have fewer
    colours than that and lose nothing; a photograph or a heat map over an image keeps 256
    (octree, no dithering, which would only add noise that compresses badly), a third of the
    bytes at no visible cost."""
    from PIL import Image

    original = base64.b64decode(data)
    image = Image.open(io.BytesIO(original))
    image.load()
    if image.mode not in ("RGB", "L", "P"):  # matplotlib's opaque RGBA: the alpha channel is all 255
        background = Image.new("RGB", image.size, "white")
        background.paste(image, mask=image.getchannel("A") if "A" in image.getbands() else None)
        image = background
    if image.width > max_width:
        height = max(1, round(image.height * max_width / image.width))
        image = image.resize((max_width, height), Image.Resampling.LANCZOS)
    if image.mode == "RGB":
        image = image.quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    stream = io.BytesIO()
    image.save(stream, format="PNG", optimize=True)
    shrunk = stream.getvalue()
    if len(original) <= len(shrunk) and Image.open(io.BytesIO(original)).width <= max_width:
        return data, image.width, image.height  # already as small: keep the bytes as they were
    return base64.b64encode(shrunk).decode("ascii"), image.width, image.height


def shrink_figures(notebook, max_width=MAX_WIDTH):
    """Every PNG output of `notebook` through `shrink_png`, in place; returns the notebook."""
    for _, output in code_outputs(notebook):
        data = output.get("data", {})
        if "image/png" not in data:
            continue
        data["image/png"], width, height = shrink_png(data["image/png"], max_width)
        sizes = output.get("metadata", {}).get("image/png")
        if sizes is not None:  # a viewer draws the image at the size given here
            sizes.update(width=width, height=height)
    return notebook


def strip_volatile(notebook):
    """Drop what changes on every run without meaning anything to a reader (cell timings)."""
    for cell in notebook.cells:
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
    return notebook


def write(notebook, path):
    """Write `notebook` to `path` atomically: a reader never sees half a notebook."""
    import nbformat

    from paddle_vit.fileio import atomic_write

    atomic_write(path, lambda temporary: nbformat.write(notebook, temporary))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", help="notebook names in notebooks/ (default: all of them)")
    parser.add_argument("--check", action="store_true", help="execute and check only; write nothing")
    parser.add_argument("--quick", action="store_true",
                        help=f"the test suite's smaller setting ({QUICK_VARIABLE}=1); implies --check")
    parser.add_argument("--max-width", type=int, default=MAX_WIDTH, help="widest PNG kept, in pixels (900)")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds one cell may take (1200)")
    args = parser.parse_args(argv)
    if args.max_width < 1:
        parser.exit(2, f"error: --max-width must be >= 1, got {args.max_width}\n")
    try:
        import nbclient  # noqa: F401
        import nbformat  # noqa: F401
        import PIL  # noqa: F401
    except ImportError as error:
        parser.exit(2, f"error: executing notebooks needs {error.name}: pip install -e \".[test]\"\n")
    try:
        paths = notebook_paths(args.notebooks)
    except ValueError as error:
        parser.exit(2, f"error: {error}\n")
    write_back = not (args.check or args.quick)
    failed = 0
    for path in paths:
        from nbclient.exceptions import CellExecutionError

        name, start = os.path.basename(path), time.time()
        try:
            notebook = execute(path, quick=args.quick, timeout=args.timeout)
            found = problems(notebook)
        except CellExecutionError as error:
            found = [str(error).strip().splitlines()[-1]]
        if found:
            failed += 1
            print(f"{name}: FAILED after {time.time() - start:.0f} s: {found[0]}", file=sys.stderr)
            continue
        strip_volatile(shrink_figures(notebook, args.max_width))
        if write_back:
            write(notebook, path)
        figures = sum("image/png" in output.get("data", {}) for _, output in code_outputs(notebook))
        print(f"{name}: ran clean in {time.time() - start:.0f} s, {figures} figures"
              + (f", written ({os.path.getsize(path) // 1024} KB)" if write_back else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
