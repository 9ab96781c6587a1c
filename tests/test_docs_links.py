"""docs/walkthrough.zh-CN.md, the Chinese page mapping the walkthrough to the code, cites files,
classes, methods, section anchors and notebook headings: each must exist, so that a rename shows
up here instead of in a reader's dead end; the links of the other Chinese pages (the experiments'
twin, README.zh-CN.md) are held to the same. Plain text reading."""
import ast
import json
import os
import re

import paddle.nn
import pytest

from repo_paths import REPO

PAGE = os.path.join(REPO, "docs", "walkthrough.zh-CN.md")
NOTEBOOKS = os.path.join(REPO, "notebooks")


def read(path):
    with open(path, encoding="utf-8") as stream:
        return stream.read()


def page_text():
    return read(PAGE)


def github_anchor(heading):
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
    anchor = heading.strip().lower()
    anchor = re.sub(r"[^\w\- ]", "", anchor)
    return anchor.replace(" ", "-")


def anchors_of(path):
    text = re.sub(r"```.*?```", "", read(path), flags=re.S)  # a '#' comment in a code block is no heading
    return {github_anchor(match) for match in re.findall(r"^#{1,6} +(.+?) *$", text, flags=re.M)}


def relative_links(text):
    """(target, anchor) of every Markdown link that is not a URL."""
    links = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path, _, anchor = target.partition("#")
        links.append((path, anchor))
    return links


def class_index():
    """Every class defined under paddle_vit/: name -> (file, names defined in its body)."""
    index = {}
    for folder, _, files in os.walk(os.path.join(REPO, "paddle_vit")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            for node in ast.walk(ast.parse(read(path))):
                if isinstance(node, ast.ClassDef):
                    members = set()
                    for item in node.body:
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            members.add(item.name)
                        elif isinstance(item, ast.Assign):
                            members.update(t.id for t in item.targets if isinstance(t, ast.Name))
                    index.setdefault(node.name, []).append((os.path.relpath(path, REPO), members))
    return index


def module_constants():
    """The names assigned at module level under paddle_vit/."""
    names = set()
    for folder, _, files in os.walk(os.path.join(REPO, "paddle_vit")):
        for name in files:
            if name.endswith(".py"):
                for node in ast.parse(read(os.path.join(folder, name))).body:
                    if isinstance(node, ast.Assign):
                        names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def notebook_names():
    return sorted(name for name in os.listdir(NOTEBOOKS) if name.endswith(".ipynb"))


def notebook_headings():
    headings = set()
    for name in os.listdir(NOTEBOOKS):
        if name.endswith(".ipynb"):
            for cell in json.loads(read(os.path.join(NOTEBOOKS, name)))["cells"]:
                if cell["cell_type"] == "markdown":
                    headings.update(re.findall(r"^#{1,6} +(.+?) *$", "".join(cell["source"]), flags=re.M))
    return headings


# the pages written for the walkthrough's readers, each link of which is checked
CHINESE_PAGES = ("docs/walkthrough.zh-CN.md", "docs/experiments.zh-CN.md", "README.zh-CN.md")


@pytest.mark.parametrize("page", CHINESE_PAGES)
def test_relative_links_and_their_anchors_exist(page):
    page = os.path.join(REPO, page)
    links = relative_links(read(page))
    assert len(links) > 10, "the page links the code, the notebooks and the docs"
    broken = []
    for path, anchor in links:
        target = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(target):
            broken.append(f"{path}: no such file")
        elif anchor and target.endswith(".md") and anchor not in anchors_of(target):
            broken.append(f"{path}#{anchor}: no such heading")
    assert not broken, f"{os.path.relpath(page, REPO)} links to what is not there: " + "; ".join(broken)


def test_cited_source_paths_exist():
    paths = set(re.findall(r"(?:paddle_vit|configs|tools|notebooks)/[\w/.\-]*\w", page_text()))
    assert "paddle_vit/models/attention.py" in paths
    missing = sorted(path for path in paths if not os.path.exists(os.path.join(REPO, path)))
    assert not missing, f"docs/walkthrough.zh-CN.md cites paths that do not exist: {missing}"


# names the page cites from other codes, not classes of ours or of paddle.nn
FOREIGN_NAMES = {"ViT_small",  # PaddleClas's model, whose q.k scale `qk_scale` reproduces
                 "PADDLE_VIT_SOURCE"}  # the environment variable the notebooks' first cell reads


def test_cited_class_names_exist():
    """Every capitalised name opening a code span is a class of paddle_vit (or a layer of
    paddle.nn: the walkthrough's Conv2D, AdaptiveAvgPool1D); `Class.member` names a member of it."""
    index = class_index()
    cited = re.findall(r"`([A-Z][A-Za-z0-9_]*)(?:\.(\w+))?[`(]", page_text())
    assert ("PatchEmbedding", "") in cited and ("ViT", "reset_classifier") in cited
    constants = module_constants()
    missing = []
    for name, member in cited:
        if name in FOREIGN_NAMES:
            continue
        if name.isupper():  # a module constant such as LAYER_NORM_EPSILON
            if name not in constants:
                missing.append(name)
            continue
        if name in index:
            if member and not any(member in members for _, members in index[name]):
                missing.append(f"{name}.{member}")
        elif not hasattr(paddle.nn, name):
            missing.append(name)
    assert not missing, f"docs/walkthrough.zh-CN.md cites classes or members that do not exist: {missing}"


@pytest.mark.parametrize("module, names", [
    ("patch_embed.py", ["PatchEmbedding"]),
    ("attention.py", ["Attention"]),
    ("encoder.py", ["Mlp", "EncoderLayer", "Encoder", "DropPath"]),
    ("vit.py", ["ViT", "PreLogits"]),
    ("token_embed.py", ["TokenEmbedding", "HybridEmbedding"]),
    ("rope.py", ["AxialRope", "MixedRope"]),
])
def test_classes_are_in_the_files_the_page_names(module, names):
    """The page says which file holds each class: it must be that file."""
    text = page_text()
    index = class_index()
    for name in names:
        assert f"paddle_vit/models/{module}` 的 `{name}`" in text or f"`{name}`" in text
        files = [path for path, _ in index.get(name, [])]
        assert os.path.join("paddle_vit", "models", module) in files, f"{name} is not in {module}: {files}"


def test_cited_notebook_headings_exist():
    headings = notebook_headings()
    cited = set(re.findall(r"「([\x20-\x7e]+)」", page_text()))
    assert "4. One attention layer" in cited
    missing = sorted(cited - headings)
    assert not missing, f"docs/walkthrough.zh-CN.md cites notebook headings that do not exist: {missing}"


def test_cited_code_lines_are_in_the_code():
    """The lines the page quotes as ours are in the files (the qkv bias fix above all)."""
    attention = read(os.path.join(REPO, "paddle_vit", "models", "attention.py"))
    patch_embed = read(os.path.join(REPO, "paddle_vit", "models", "patch_embed.py"))
    for line in ["bias_attr=None if qkv_bias else False", "self.head_dim = embed_dim // num_heads",
                 "x.reshape([0, 0, self.num_heads, self.head_dim])",
                 "attention = self.attention_dropout(attention)", "out = self.dropout(out)",
                 "nn.Linear(self.all_head_dim, embed_dim)", "qkv = self.qkv(x).chunk(3, axis=-1)"]:
        assert line in attention, line
    assert "walkthrough bug fixed: its `bias_attr=False if qkv_bias is True else None`" in attention
    for line in ["x = paddle.concat([class_token.astype(x.dtype), x], axis=1)",
                 "x = x + self.position_embedding.astype(x.dtype)", "x = self.dropout(x)"]:
        assert line in patch_embed, line


def test_readmes_point_to_the_page():
    chinese = read(os.path.join(REPO, "README.zh-CN.md"))
    english = read(os.path.join(REPO, "README.md"))
    # the Chinese README opens with the Chinese notebooks, then this page, before any English page
    first_links = [target for target, _ in relative_links(chinese.split("\n## ", 1)[0])]
    assert first_links[0] == "notebooks/zh-CN/", f"README.zh-CN.md's first link is {first_links[0]}"
    chinese_first = first_links[:first_links.index("docs/walkthrough.zh-CN.md") + 1]
    assert all("zh-CN" in target for target in chinese_first), chinese_first
    assert {f"notebooks/zh-CN/{name}" for name in notebook_names()} <= set(chinese_first)
    assert "(docs/walkthrough.zh-CN.md)" in english
    # the page sends its reader to the Chinese notebooks
    assert all(f"../notebooks/zh-CN/{name}" in page_text() for name in notebook_names())
