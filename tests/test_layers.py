"""The layers of the package, as docs/design.md ("Imports flow one way") draws them.

The fenced block of that section names the layers, lowest first, one line each: a module of
paddle_vit/ (``config.py``) or a subpackage (``data/``). Every import statement of every file of
paddle_vit/, at the top of a file or inside a function, is read with `ast`: none may import from a
higher layer, and no modules may import each other in a circle (the same layer included). An
import of ``paddle_vit.x.y`` is an edge to that module and to the ``__init__.py`` of ``x``, which
Python runs first, unless the importing module is inside ``x`` (then it already runs).
"""
import ast
import os
import re
import subprocess
import sys

import pytest

from repo_paths import REPO

PACKAGE = os.path.join(REPO, "paddle_vit")
DESIGN = os.path.join(REPO, "docs", "design.md")

def read_layers():
    """[[name, ...], ...] of the fenced block under "## Imports flow one way", lowest first."""
    with open(DESIGN, encoding="utf-8") as stream:
        text = stream.read()
    section = re.search(r"^## Imports flow one way\n(.*?)(?=^## )", text, re.S | re.M)
    assert section, "docs/design.md has no section '## Imports flow one way'"
    block = re.search(r"^```[a-z]*\n(.*?)^```", section.group(1), re.S | re.M)
    assert block, "the section 'Imports flow one way' of docs/design.md has no fenced block of layers"
    return [line.split("#")[0].split() for line in block.group(1).splitlines() if line.split("#")[0].strip()]


def module_files():
    """{module name: path} of every .py file of paddle_vit/."""
    modules = {}
    for folder, _, files in os.walk(PACKAGE):
        for file in files:
            if file.endswith(".py"):
                path = os.path.join(folder, file)
                parts = os.path.relpath(path, REPO)[:-len(".py")].split(os.sep)
                modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def unit_of(module):
    """The layer block's name of a module: its subpackage ("data/") or its file ("config.py")."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__.py"
    return parts[1] + "/" if os.path.isdir(os.path.join(PACKAGE, parts[1])) else parts[1] + ".py"


def imports_of(module, path, modules):
    """[(line, imported module of paddle_vit)] of every import statement in `path`."""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    with open(path, encoding="utf-8") as stream:
        tree = ast.parse(stream.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for name in names:
            while name not in modules and "." in name:  # paddle_vit.preprocess.spec.Preprocess -> the module
                name = name.rpartition(".")[0]
            if name not in modules:
                continue
            parents = [".".join(name.split(".")[:end]) for end in range(2, name.count(".") + 1)]
            for target in parents + [name]:
                running = module == target or module.startswith(target + ".")
                if not running and (node.lineno, target) not in found:
                    found.append((node.lineno, target))
    return found


@pytest.fixture(scope="module")
def graph():
    modules = module_files()
    return modules, {module: imports_of(module, path, modules) for module, path in modules.items()}


def test_the_layer_block_names_every_part_of_the_package_once(graph):
    modules, _ = graph
    named = [name for layer in read_layers() for name in layer]
    units = {unit_of(module) for module in modules}
    twice = sorted(name for name in set(named) if named.count(name) > 1)
    assert not twice, f"named in two layers of docs/design.md: {', '.join(twice)}"
    unnamed = sorted(units - set(named))
    assert not unnamed, f"in no layer of docs/design.md: {', '.join(unnamed)}"
    missing = sorted(set(named) - units)
    assert not missing, f"docs/design.md's layers name what paddle_vit/ does not hold: {', '.join(missing)}"
    assert read_layers()[-1] == ["cli/"], "cli/ is the top layer"


def test_no_module_imports_from_a_higher_layer(graph):
    modules, edges = graph
    layer = {name: number for number, names in enumerate(read_layers(), 1) for name in names}  # 1: the lowest
    upward = []
    for module, imported in sorted(edges.items()):
        for line, target in imported:
            if layer[unit_of(target)] > layer[unit_of(module)]:
                upward.append(f"{os.path.relpath(modules[module], REPO)}:{line} imports {target}: "
                              f"{unit_of(module)} (layer {layer[unit_of(module)]}) from {unit_of(target)} "
                              f"(layer {layer[unit_of(target)]})")
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_no_modules_import_each_other_in_a_circle(graph):
    modules, edges = graph
    circles, state = [], {}  # state: 1 on the current path, 2 done

    def visit(module, path):
        state[module] = 1
        for line, target in edges[module]:
            if state.get(target) == 1:
                circle = path[path.index(target):] + [target]
                circles.append(" -> ".join(circle))
            elif target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not circles, "modules importing each other:\n" + "\n".join(circles)


def test_the_eval_preprocessing_imports_no_paddle():
    probe = "import sys, paddle_vit.preprocess; assert 'paddle' not in sys.modules, 'paddle imported'"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr
