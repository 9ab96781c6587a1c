"""The figures' words in Chinese: every phrase the notebooks and the library's figures draw has an
entry, each entry keeps its phrase's {fields}, and a machine without a CJK font gets English
figures and one line that says what to install."""
import ast
import logging
import os
import re
import string

import matplotlib
import nbformat
import numpy as np
import pytest

import paddle_vit
from paddle_vit import figure_text, viz
from paddle_vit.experiments import data_size_figure, deit_budget_figure, resolution_figure
from repo_paths import REPO

NOTEBOOKS = os.path.join(REPO, "notebooks")
CJK = re.compile(r"[\u4e00-\u9fff]")


def fields(phrase):
    return {name for _, name, _, _ in string.Formatter().parse(phrase) if name}


@pytest.fixture
def strict_chinese(monkeypatch):
    """The library's figures in Chinese, a phrase without an entry an error (no font needed:
    the words are checked, not drawn with a CJK font)."""
    monkeypatch.setattr(figure_text, "_current", figure_text.FigureText("zh-CN", strict=True))


@pytest.fixture
def restore_fonts():
    saved = {key: matplotlib.rcParams[key] for key in ("font.sans-serif", "axes.unicode_minus")}
    current = figure_text._current
    yield
    matplotlib.rcParams.update(saved)
    figure_text._current = current


def texts_of(figure):
    figure.canvas.draw()
    return [text.get_text() for text in figure.findobj(matplotlib.text.Text) if text.get_text().strip()]


def test_every_entry_keeps_the_fields_of_its_english_phrase():
    for english, chinese in figure_text.ZH_CN.items():
        assert fields(english) == fields(chinese), english
        assert CJK.search(chinese), english


def phrases_in_notebook_code():
    """Every T("...") literal in the English notebooks' code cells."""
    found = set()
    for name in sorted(os.listdir(NOTEBOOKS)):
        if not name.endswith(".ipynb"):
            continue
        for cell in nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4).cells:
            if cell.cell_type != "code":
                continue
            source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith("%"))
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "T" and node.args:
                    assert isinstance(node.args[0], ast.Constant), ast.unparse(node)  # a literal, so it can be looked up
                    found.add(node.args[0].value)
    return found


def test_every_phrase_the_notebooks_draw_has_chinese_words():
    phrases = phrases_in_notebook_code()
    assert len(phrases) >= 20  # the notebooks' figure words go through T
    missing = sorted(phrase for phrase in phrases if phrase not in figure_text.ZH_CN)
    assert not missing


def test_a_phrase_is_formatted_in_the_language_and_unknown_ones_stay_english():
    chinese = figure_text.FigureText("zh-CN")
    assert chinese("head {head}", head=3) == "第 3 个头"
    assert chinese("no such phrase {n}", n=1) == "no such phrase 1"
    assert figure_text.FigureText("en")("head {head}", head=3) == "head 3"
    with pytest.raises(KeyError, match="no such phrase"):
        figure_text.FigureText("zh-CN", strict=True)("no such phrase")
    with pytest.raises(ValueError, match="zh-CN"):
        figure_text.FigureText("fr")


def tiny_model(**fields):
    return paddle_vit.create_model("vit_walkthrough", image_size=16, patch_size=4, embed_dim=16, depth=2, num_heads=2,
                                   num_classes=10, **fields)


@pytest.mark.filterwarnings("ignore:Glyph")  # drawn with matplotlib's own font: the words are checked, not the glyphs
def test_the_library_figures_have_chinese_words_for_everything_they_draw(strict_chinese):
    images = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype("float32")
    model = tiny_model(pool="cls")
    figures = [viz.attention_figure(model, images, [0.5] * 3, [0.5] * 3)[0],
               viz.confusion_matrix_figure(np.eye(3, dtype=int), ["a", "b", "c"]),
               viz.position_similarity_figure(model)[0],
               viz.embedding_filters_figure(model, grey=True)[0],
               viz.attention_distance_figure(model, images)[0],
               viz.attention_distance_figure(model, images[:1])[0],
               resolution_figure({"learned": {12: 0.8, 16: 0.5}}, train_size=12)]
    figures.append(data_size_figure({
        "accuracy": {"ViT": [[0.5, 0.6], [0.7, 0.8]]}, "fewshot": {"ViT": {"5": [[0.4, 0.5], [0.6, 0.7]]}},
        "train_images": [359, 1438], "parameters": {"ViT": 70000}, "shots": [5], "seeds": [0, 1], "steps": 150,
        "batch_size": 32, "fewshot_draw_seeds": [0, 1, 2]}))
    figures.append(deit_budget_figure(fake_results()))
    for figure in figures:  # every phrase was found (strict), and each figure has Chinese words
        assert any(CJK.search(text) for text in texts_of(figure))


def fake_results():
    rows = [[0.5, 0.6], [0.7, 0.8]]
    return {"modes": ["no teacher", "hard", "soft"], "train_images": [359, 1438], "epochs": [1000, 250],
            "steps": 5500, "batch_size": 64, "seeds": [0, 1], "parameters": {"teacher": 90000, "student": 70000},
            "teacher": {"val_top1": rows},
            "students": {mode: {"mean": rows, "agreement_mean": rows} for mode in ("no teacher", "hard", "soft")}}


def test_use_language_sets_a_cjk_font_first_and_english_restores_matplotlib(monkeypatch, restore_fonts):
    original = list(matplotlib.rcParams["font.sans-serif"])
    monkeypatch.setattr(figure_text, "find_cjk_font", lambda: "Some CJK Sans")
    text = viz.use_language("zh-CN")
    assert (text.language, text.font) == ("zh-CN", "Some CJK Sans")
    assert figure_text.current() is text
    assert matplotlib.rcParams["font.sans-serif"][0] == "Some CJK Sans"
    assert matplotlib.rcParams["font.sans-serif"][1:] == [name for name in original if name != "Some CJK Sans"]
    english = viz.use_language("en")
    assert english.language == "en" and figure_text.current() is english
    assert list(matplotlib.rcParams["font.sans-serif"]) == original


def test_without_a_cjk_font_the_figures_stay_english_with_one_line_naming_what_to_install(
        monkeypatch, restore_fonts, caplog):
    monkeypatch.setattr(figure_text, "find_cjk_font", lambda: None)
    original = list(matplotlib.rcParams["font.sans-serif"])
    with caplog.at_level(logging.WARNING, logger="paddle_vit"):
        text = viz.use_language("zh-CN")
    assert text.language == "en" and text("head {head}", head=1) == "head 1"
    assert list(matplotlib.rcParams["font.sans-serif"]) == original
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1 and "no Chinese font" in lines[0] and "fonts-noto-cjk" in lines[0]


def test_use_language_refuses_an_unknown_language(restore_fonts):
    with pytest.raises(ValueError, match="en, zh-CN"):
        viz.use_language("zh")


@pytest.mark.slow  # a child Python that imports the library and matplotlib: 2-3 s
def test_importing_the_library_leaves_matplotlib_fonts_alone():
    import subprocess
    import sys
    code = ("import matplotlib; before = list(matplotlib.rcParams['font.sans-serif']);"
            "import paddle_vit.viz, paddle_vit.figure_text, paddle_vit.experiments;"
            "assert list(matplotlib.rcParams['font.sans-serif']) == before; print('same')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "same", result.stderr[-800:]
