"""The Chinese notebooks (notebooks/zh-CN/) are twins of the English ones: the same code cells,
line for line, but for the one line that sets the figures' language, so that the two cannot
drift; their prose is Chinese and uses the walkthrough's own terms (../shared/walkthrough/)."""
import os
import re

import nbformat
import pytest

from repo_paths import REPO

NOTEBOOKS = os.path.join(REPO, "notebooks")
TWINS = os.path.join(NOTEBOOKS, "zh-CN")
ENGLISH = sorted(name for name in os.listdir(NOTEBOOKS) if name.endswith(".ipynb"))
LANGUAGE_LINE = {"en": 'LANGUAGE = "en"', "zh-CN": 'LANGUAGE = "zh-CN"'}
# the walkthrough's terms each notebook's prose is expected to use for what its code shows
TERMS = {
    "01_walkthrough.ipynb": ("图像分块", "位置编码", "多头注意力", "类别标记"),
    "02_position_embeddings.ipynb": ("位置编码", "图像分块"),
    "03_data_size_and_inductive_bias.ipynb": ("归纳偏置", "蒸馏"),
}
CJK = re.compile(r"[\u4e00-\u9fff]")


def read(folder, name):
    return nbformat.read(os.path.join(folder, name), as_version=4)


def code(notebook):
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def without_language_line(source, language):
    lines = source.splitlines()
    marked = [line for line in lines if line.startswith(LANGUAGE_LINE[language])]
    return [line for line in lines if not line.startswith(LANGUAGE_LINE[language])], len(marked)


def test_every_english_notebook_has_a_chinese_twin_and_no_twin_is_an_orphan():
    assert sorted(name for name in os.listdir(TWINS) if name.endswith(".ipynb")) == ENGLISH


@pytest.mark.parametrize("name", ENGLISH)
def test_the_twins_run_the_same_code_but_for_the_language_line(name):
    english, chinese = code(read(NOTEBOOKS, name)), code(read(TWINS, name))
    assert len(english) == len(chinese)
    first_en, marked_en = without_language_line(english[0], "en")
    first_zh, marked_zh = without_language_line(chinese[0], "zh-CN")
    assert (marked_en, marked_zh) == (1, 1)  # the one line that differs, once in each first cell
    assert first_en == first_zh
    for number, (ours, theirs) in enumerate(zip(english[1:], chinese[1:]), start=2):
        assert ours == theirs, f"code cell {number} of {name} differs between notebooks/ and notebooks/zh-CN/"


@pytest.mark.parametrize("name", ENGLISH)
def test_the_chinese_prose_is_chinese_and_speaks_the_walkthrough_terms(name):
    english = [cell for cell in read(NOTEBOOKS, name).cells if cell.cell_type == "markdown"]
    chinese = [cell for cell in read(TWINS, name).cells if cell.cell_type == "markdown"]
    assert chinese, name
    prose = "\n".join(cell.source for cell in chinese)
    assert all(CJK.search(cell.source) for cell in chinese), "a markdown cell with no Chinese in it"
    for term in TERMS[name]:
        assert term in prose, f"{name}: the walkthrough's term {term} is not used"
    # the cells sit where the English ones do: the same number of markdown cells between code cells
    def layout(notebook):
        return [cell.cell_type for cell in notebook.cells]
    assert layout(read(TWINS, name)) == layout(read(NOTEBOOKS, name))
    assert len(chinese) == len(english)
