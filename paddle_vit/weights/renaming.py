"""Renaming tables read both ways, so that each family's table is written once.

A rename is a full-match regex of a checkpoint's names (escaped literal text and groups) and a
template of ours (its groups as ``\\1`` or ``\\g<name>``). Read forwards it loads a checkpoint
(timm.py, hf_*.py); `invert` turns it around, our name's regex and the checkpoint's template, so
that publishing (publish_timm.py, publish_hf.py) writes the names the reading takes.
"""
import re
from typing import NamedTuple

_REFERENCE = re.compile(r"\\g<(\w+)>|\\(\d+)")


class Inverse(NamedTuple):
    """A rename turned around: `ours` (a compiled full-match regex of our names) -> `theirs` (a
    template of its groups)."""
    ours: re.Pattern
    theirs: str

    def apply(self, name):
        """The checkpoint's name for our `name`, or None when `ours` does not match it."""
        match = self.ours.fullmatch(name)
        return match.expand(self.theirs) if match else None


def invert(pattern, template, fixed=None):
    """The `Inverse` of the rename `pattern` -> `template`. `fixed` ({group: text}) writes a
    group of `pattern` the template does not carry as that text (a part of a fused tensor)."""
    groups, theirs = _split_pattern(pattern, fixed or {})
    missing = set(groups) - set(_template_keys(template))
    if missing:
        raise ValueError(f"{pattern!r} -> {template!r}: groups {sorted(missing)} are not in the template")
    ours, seen, position = [], set(), 0
    for match in _REFERENCE.finditer(template):
        ours.append(re.escape(template[position:match.start()]))
        key = _key(match.group(1) or match.group(2))
        ours.append(f"(?P={key})" if key in seen else f"(?P<{key}>{groups[key]})")
        seen.add(key)
        position = match.end()
    ours.append(re.escape(template[position:]))
    return Inverse(re.compile("".join(ours)), theirs)


def invert_all(renames):
    """The `Inverse` of each (pattern, template) pair, in order (the first that matches wins)."""
    return [invert(pattern, template) for pattern, template in renames]


def rename_back(name, inverses):
    """The checkpoint's name for our `name` by the first of `inverses` that matches, or None."""
    for inverse in inverses:
        theirs = inverse.apply(name)
        if theirs is not None:
            return theirs
    return None


def group_alternatives(pattern, group):
    """The alternatives of the named `group` of `pattern` (``(?P<part>q|k|v)``: q, k, v)."""
    start = pattern.index(f"(?P<{group}>") + len(f"(?P<{group}>")
    return pattern[start:_closing(pattern, start - len(f"(?P<{group}>"))].split("|")


def _template_keys(template):
    return [_key(match.group(1) or match.group(2)) for match in _REFERENCE.finditer(template)]


def _key(group):
    """A group's name in the inverse regex: its own, or g<N> for the N-th unnamed one."""
    return f"g{group}" if group.isdigit() else group


def _split_pattern(pattern, fixed):
    """({group key: its regex}, the template that writes `pattern`'s names back) of a pattern
    made of escaped literal text and top-level groups."""
    groups, template, index, number = {}, [], 0, 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            if pattern[index + 1] not in ".-_/":
                raise ValueError(f"{pattern!r}: only escaped punctuation may stand outside a group")
            template.append(pattern[index + 1])
            index += 2
        elif char == "(":
            end = _closing(pattern, index)
            inner = pattern[index + 1:end]
            named = re.match(r"\?P<(\w+)>", inner)
            if named:
                key, inner = named.group(1), inner[named.end():]
            elif inner.startswith("?"):
                raise ValueError(f"{pattern!r}: a top-level group must capture")
            else:
                number += 1
                key = _key(str(number))
            if end + 1 < len(pattern) and pattern[end + 1] in "?*+{":
                raise ValueError(f"{pattern!r}: a top-level group may not repeat")
            groups[key] = inner
            template.append(fixed[key] if key in fixed else f"\\g<{key}>")
            index = end + 1
        elif char in ".^$*+?{}[]|)":
            raise ValueError(f"{pattern!r}: {char!r} outside a group has no single name to write back")
        else:
            template.append(char)
            index += 1
    return {key: regex for key, regex in groups.items() if key not in fixed}, "".join(template)


def _closing(pattern, start):
    """The index of the parenthesis that closes the one at `start`."""
    depth, index = 0, start
    while index < len(pattern):
        if pattern[index] == "\\":
            index += 2
            continue
        depth += {"(": 1, ")": -1}.get(pattern[index], 0)
        if depth == 0:
            return index
        index += 1
    raise ValueError(f"{pattern!r}: unbalanced parentheses")
