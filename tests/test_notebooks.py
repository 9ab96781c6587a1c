"""The notebooks run top to bottom without an error, and are committed without outputs.

Each is executed from notebooks/ (so that it finds the repository as a student's Jupyter does)
into a copy under tmp_path; the committed file is never written.
"""
import os

import nbformat
import pytest
from nbclient import NotebookClient

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(REPO, "notebooks")
# each notebook and how many figures it draws at least
FIGURES = {"01_walkthrough.ipynb": 4, "02_position_embeddings.ipynb": 4, "03_data_size_and_inductive_bias.ipynb": 2}
NAMES = list(FIGURES)


def read(name):
    return nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)


def test_the_notebooks_listed_here_are_all_there_are():
    assert sorted(name for name in os.listdir(NOTEBOOKS) if name.endswith(".ipynb")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_committed_without_outputs(name):
    notebook = read(name)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(name, tmp_path):
    notebook = read(name)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": NOTEBOOKS}})
    try:
        client.execute()  # raises CellExecutionError, naming the cell, on the first error
    finally:
        nbformat.write(notebook, str(tmp_path / name))  # the executed copy, to look at on failure
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.outputs:
            assert output.output_type != "error", cell.source[:60]
            if output.output_type == "stream" and output.name == "stderr":
                assert "Traceback" not in output.text and "Error" not in output.text, output.text
    images = sum("image/png" in output.get("data", {}) for cell in notebook.cells if cell.cell_type == "code"
                 for output in cell.outputs)
    assert images >= FIGURES[name]  # the figures were drawn
