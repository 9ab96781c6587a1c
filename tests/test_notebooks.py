"""The notebooks are committed executed, figures included and small, so a reader sees them without
running anything; and they still run top to bottom without an error.

The committed outputs come from the full run (`python tools/execute_notebooks.py`). The suite
executes each notebook in its smaller setting (PADDLE_VIT_NOTEBOOK_QUICK=1, read by its first
cell) from notebooks/, as a student's Jupyter runs it, into a copy under tmp_path; the committed
file is never written.
"""
import base64
import io
import os

import nbformat
import pytest
from PIL import Image

from repo_paths import REPO, load_tool

NOTEBOOKS = os.path.join(REPO, "notebooks")
# each notebook and how many figures it draws
FIGURES = {"01_walkthrough.ipynb": 8, "02_position_embeddings.ipynb": 7, "03_data_size_and_inductive_bias.ipynb": 2}
NAMES = list(FIGURES)
MAX_WIDTH = 900  # pixels, a figure as committed
MAX_FIGURE_BYTES = 150_000
MAX_NOTEBOOK_BYTES = 600_000

execute_notebooks = load_tool("execute_notebooks")


def read(name):
    return nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)


def code_cells(notebook):
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def pngs(notebook):
    return [base64.b64decode(output["data"]["image/png"]) for cell in code_cells(notebook)
            for output in cell.outputs if "image/png" in output.get("data", {})]


def assert_ran_clean(notebook):
    for cell in code_cells(notebook):
        for output in cell.outputs:
            assert output.output_type != "error", cell.source[:60]
            if output.output_type == "stream" and output.name == "stderr":
                assert "Traceback" not in output.text and "Error" not in output.text, output.text


def test_the_notebooks_listed_here_are_all_there_are():
    assert sorted(name for name in os.listdir(NOTEBOOKS) if name.endswith(".ipynb")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_committed_executed_in_order_with_its_figures(name):
    notebook = read(name)
    nbformat.validate(notebook)
    cells = code_cells(notebook)
    # every code cell ran, once, top to bottom in one kernel
    assert [cell.execution_count for cell in cells] == list(range(1, len(cells) + 1))
    assert_ran_clean(notebook)
    assert len(pngs(notebook)) == FIGURES[name]
    # the run's timings are not committed (they change on every run)
    assert not any(key in cell.metadata for cell in cells for key in execute_notebooks.VOLATILE_CELL_METADATA)
    # the first cell reads the suite's smaller setting and finds the repository without an install
    first = cells[0].source
    assert 'os.environ.get("PADDLE_VIT_NOTEBOOK_QUICK") == "1"' in first and "sys.path.insert(0, REPO)" in first
    assert "paddle_vit.runtime.configure()" in first


@pytest.mark.parametrize("name", NAMES)
def test_committed_figures_are_downscaled_and_the_notebook_small(name):
    for png in pngs(read(name)):
        image = Image.open(io.BytesIO(png))
        assert image.format == "PNG" and image.width <= MAX_WIDTH, image.size
        assert len(png) <= MAX_FIGURE_BYTES, len(png)
    assert os.path.getsize(os.path.join(NOTEBOOKS, name)) <= MAX_NOTEBOOK_BYTES


def test_shrink_scales_a_wide_png_to_the_width_and_keeps_its_aspect():
    stream = io.BytesIO()
    Image.new("RGBA", (1800, 600), (255, 0, 0, 255)).save(stream, format="PNG")
    data, width, height = execute_notebooks.shrink_png(base64.b64encode(stream.getvalue()).decode(), max_width=900)
    image = Image.open(io.BytesIO(base64.b64decode(data)))
    assert (width, height) == image.size == (900, 300)
    assert image.convert("RGB").getpixel((450, 150)) == (255, 0, 0)


def test_shrink_leaves_a_narrow_png_its_size():
    stream = io.BytesIO()
    Image.new("RGB", (320, 200), (0, 0, 255)).save(stream, format="PNG")
    data, width, height = execute_notebooks.shrink_png(base64.b64encode(stream.getvalue()).decode(), max_width=900)
    assert (width, height) == Image.open(io.BytesIO(base64.b64decode(data))).size == (320, 200)


def test_strip_volatile_drops_the_cell_timings_and_keeps_the_rest():
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    notebook.cells[0].metadata.update(execution={"iopub.execute_input": "2026-12-01T00:00:00Z"}, tags=["keep"])
    execute_notebooks.strip_volatile(notebook)
    assert notebook.cells[0].metadata == {"tags": ["keep"]}


def test_execute_notebooks_refuses_an_unknown_notebook_in_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        execute_notebooks.main(["no_such_notebook.ipynb"])
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: no notebook no_such_notebook.ipynb") and "01_walkthrough.ipynb" in error
    assert len(error.splitlines()) == 1


@pytest.mark.slow
@pytest.mark.notebooks
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom_in_its_quick_setting(name, tmp_path):
    notebook = None
    try:
        # raises nbclient's CellExecutionError, naming the cell, on the first error
        notebook = execute_notebooks.execute(os.path.join(NOTEBOOKS, name), quick=True, timeout=600)
    finally:
        if notebook is not None:
            nbformat.write(notebook, str(tmp_path / name))  # the executed copy, to look at on failure
    assert all(cell.execution_count is not None for cell in code_cells(notebook))
    assert_ran_clean(notebook)
    assert len(pngs(notebook)) == FIGURES[name]  # the figures were drawn
