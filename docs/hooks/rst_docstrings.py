"""Griffe extension: the reStructuredText habits of the package's docstrings, as Markdown.

The docstrings are numpydoc, written to read well in a terminal and under Sphinx: they use
Sphinx roles (``:func:`name```), ``.. math::`` directives and doctest blocks in free text.
mkdocstrings renders docstrings as Markdown, where those would show as raw markup. Before the
docstrings are parsed, this extension rewrites

* ``:math:`x``` into ``$x$`` and a ``.. math::`` block into a ``$$ ... $$`` block (rendered by
  pymdownx.arithmatex, like the Markdown pages), its lines in an ``aligned`` environment if
  they align (``&``) or break lines (Sphinx sets them in ``split``);
* ``:func:`a.b```, ``:class:`~a.b.C``` and the other cross-reference roles into code spans (a
  leading ``~`` keeps the last component, as in Sphinx);
* doctest blocks (lines starting with ``>>>``) outside an Examples section into fenced Python
  code (the Examples sections are parsed by griffe itself).

The source files are left as they are.
"""

from __future__ import annotations

import re

import griffe

_MATH_ROLE = re.compile(r":math:`([^`]+)`")
_XREF_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|obj|exc|const|ref):`([^`]+)`")
_MATH_DIRECTIVE = re.compile(r"^(\s*)\.\. math::\s*(.*)$")
_SECTION_RULE = re.compile(r"^\s*-{3,}\s*$")


def _xref(match: re.Match) -> str:
    target = match.group(1).strip()
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return f"`{target}`"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _math_blocks(lines: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(lines):
        match = _MATH_DIRECTIVE.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        indent, body = match.group(1), [match.group(2)] if match.group(2).strip() else []
        i += 1
        block = []
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > len(indent)):
            block.append(lines[i])
            i += 1
        while block and not block[-1].strip():
            i -= 1  # the blank lines after the block stay where they were
            block.pop()
        depth = min((_indent(line) for line in block if line.strip()), default=0)
        body += [line[depth:] for line in block]
        body = [line for line in body if line.strip()]
        # Sphinx sets a directive's lines in an alignment environment (split), so docstrings
        # align with & and break with \\; bare in $$ ... $$, MathJax stops at "Misplaced &".
        if any("&" in line or "\\\\" in line for line in body) and \
                not any("\\begin{" in line for line in body):
            body = ["\\begin{aligned}", *body, "\\end{aligned}"]
        # A continuation of the directive's first line is indented like the block.
        out += [f"{indent}$$"] + [f"{indent}{line}" for line in body]
        out.append(f"{indent}$$")
    return out


def _doctests(lines: list[str]) -> list[str]:
    out, section, i = [], "", 0
    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and _SECTION_RULE.match(lines[i + 1]) and line.strip():
            section = line.strip().lower()
        if line.lstrip().startswith(">>>") and section not in ("examples", "example"):
            indent = line[: _indent(line)]
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
                i += 1
            out += [f"{indent}```python"] + [f"{indent}{b}" for b in block] + [f"{indent}```"]
            continue
        out.append(line)
        i += 1
    return out


def markdown_docstring(text: str) -> str:
    """The docstring ``text`` with its reStructuredText markup turned into Markdown."""
    lines = _doctests(_math_blocks(text.splitlines()))
    text = "\n".join(lines)
    text = _MATH_ROLE.sub(lambda m: f"${m.group(1)}$", text)
    return _XREF_ROLE.sub(_xref, text)


class RstToMarkdown(griffe.Extension):
    """Rewrite every docstring once the object tree is built, before it is parsed."""

    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None and not obj.is_alias:
            obj.docstring.value = markdown_docstring(obj.docstring.value)
