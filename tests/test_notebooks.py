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
import shutil
import subprocess
import sys

import nbformat
import pytest
from PIL import Image

from repo_paths import REPO, load_tool

NOTEBOOKS = os.path.join(REPO, "notebooks")
# each notebook (its path in notebooks/) and how many figures it draws; the Chinese twins in
# notebooks/zh-CN/ run the same code (tests/test_notebook_twins.py) and draw as many
ENGLISH_FIGURES = {"01_walkthrough.ipynb": 8, "02_position_embeddings.ipynb": 7, "03_data_size_and_inductive_bias.ipynb": 3}
FIGURES = {**ENGLISH_FIGURES, **{f"zh-CN/{name}": count for name, count in ENGLISH_FIGURES.items()}}
NAMES = list(FIGURES)
# the quick runs of the suite: every English notebook here, and one twin for the Chinese figures'
# path (its code is the English one's but for LANGUAGE), opened alone on an installed package
QUICK_RUNS = list(ENGLISH_FIGURES)
OPENED_ALONE = "zh-CN/01_walkthrough.ipynb"
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
    found = [os.path.relpath(os.path.join(folder, name), NOTEBOOKS) for folder in (NOTEBOOKS, os.path.join(NOTEBOOKS, "zh-CN"))
             for name in sorted(os.listdir(folder)) if name.endswith(".ipynb")]
    assert found == NAMES


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
    # the first cell reads the suite's smaller setting and finds paddle_vit in a checkout or an install
    first = cells[0].source
    assert 'os.environ.get("PADDLE_VIT_NOTEBOOK_QUICK") == "1"' in first and "PADDLE_VIT_SOURCE" in first
    assert "paddle_vit.runtime.configure()" in first
    # nothing is read from the checkout's folders: a notebook opened alone has none
    assert not any("REPO" in cell.source for cell in cells)


def first_cell_setup(name):
    """The first cell's part that finds or installs paddle_vit (up to its `invalidate_caches`)."""
    first = code_cells(read(name))[0].source
    return first[:first.index("importlib.invalidate_caches()")]


def test_the_notebooks_find_paddle_vit_with_the_same_first_cell():
    assert len({first_cell_setup(name) for name in NAMES}) == 1
    assert len(first_cell_setup(NAMES[0]).splitlines()) <= 16  # short enough to read before running


def run_first_cell_without_paddle_vit(name, folder, source=None):
    """The first cell of notebook `name` in an IPython shell (as a kernel runs it) in `folder`,
    paddle_vit made unimportable; returns what it prints."""
    environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PADDLE_VIT_SOURCE")}
    if source is not None:
        environment["PADDLE_VIT_SOURCE"] = source
    code = ("import sys\n"
            "sys.modules['paddle_vit'] = None  # an install or a checkout on the path is not found\n"
            "from IPython.core.interactiveshell import InteractiveShell\n"
            f"InteractiveShell.instance().run_cell({code_cells(read(name))[0].source!r})\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment,
                            cwd=folder, timeout=120)
    assert result.returncode == 0 and not result.stderr, result.stderr
    return result.stdout


@pytest.mark.parametrize("name", NAMES)
def test_first_cell_without_paddle_vit_or_a_source_stops_in_one_line_with_the_command(name, tmp_path):
    output = run_first_cell_without_paddle_vit(name, tmp_path)
    assert output.splitlines() == ["SetupError: paddle_vit is not installed: run `pip install "
                                   "PATH_OR_GIT_URL_OF_PADDLE_VIT`, then this cell again"]


@pytest.mark.parametrize("name", NAMES)
def test_first_cell_stops_in_one_line_when_pip_cannot_install_the_source(name, tmp_path):
    missing = str(tmp_path / "no_such_clone")  # pip fails on it at once, registry or not
    output = run_first_cell_without_paddle_vit(name, tmp_path, source=missing)
    assert output.splitlines() == [f"SetupError: paddle_vit is not installed and pip could not install {missing}: "
                                   f"run `pip install {missing}`, then this cell again"]


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
@pytest.mark.parametrize("name", QUICK_RUNS)
def test_notebook_runs_top_to_bottom_in_its_quick_setting(name, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's: the run folders a notebook makes land here
    notebook = None
    try:
        # raises nbclient's CellExecutionError, naming the cell, on the first error
        notebook = execute_notebooks.execute(os.path.join(NOTEBOOKS, name), quick=True, timeout=600)
    finally:
        if notebook is not None:
            nbformat.write(notebook, str(tmp_path / os.path.basename(name)))  # the executed copy, to look at on failure
    assert all(cell.execution_count is not None for cell in code_cells(notebook))
    assert_ran_clean(notebook)
    assert len(pngs(notebook)) == FIGURES[name]  # the figures were drawn


def install_outside_the_checkout(folder):
    """paddle_vit built from a copy of the checkout (non-editable) and installed with pip into
    `folder`/site, without its dependencies (this interpreter has them); returns that folder."""
    source, site = folder / "source", folder / "site"
    source.mkdir()
    for entry in ("setup.py", "README.md"):
        shutil.copy(os.path.join(REPO, entry), source / entry)
    for entry in ("paddle_vit", "configs"):
        shutil.copytree(os.path.join(REPO, entry), source / entry, ignore=shutil.ignore_patterns("__pycache__"))
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(site),
                             str(source)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-1500:]
    return site


@pytest.mark.slow
@pytest.mark.notebooks
def test_notebook_opened_alone_runs_on_the_installed_package_not_the_checkout(tmp_path, monkeypatch):
    # 01 is the quickest in its quick setting; it reads its recipe through recipe_path; its Chinese
    # twin, as a student who reads Chinese first opens it, draws with the Chinese figures' words
    site = install_outside_the_checkout(tmp_path)
    student = tmp_path / "student"
    student.mkdir()
    notebook = read(OPENED_ALONE)
    notebook.cells.append(nbformat.v4.new_code_cell("print(paddle_vit.__file__, recipe_path('vit_walkthrough_digits_28'))"))
    path = student / os.path.basename(OPENED_ALONE)
    nbformat.write(notebook, str(path))
    monkeypatch.setenv("PYTHONPATH", str(site))  # the kernel's; the checkout is neither on it nor its folder
    monkeypatch.delenv("PADDLE_VIT_SOURCE", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's: the run folders a notebook makes land here
    executed = execute_notebooks.execute(str(path), quick=True, timeout=600)
    assert all(cell.execution_count is not None for cell in code_cells(executed))
    assert_ran_clean(executed)
    assert len(pngs(executed)) == FIGURES[OPENED_ALONE]
    # the kernel may send one print as several stream messages (it flushes on a timer)
    where = "".join(output.get("text", "") for output in code_cells(executed)[-1].outputs).split()
    assert where == [str(site / "paddle_vit" / "__init__.py"),
                     str(site / "paddle_vit" / "configs" / "vit_walkthrough_digits_28.yaml")]
