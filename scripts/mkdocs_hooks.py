"""mkdocs hook (mkdocs.yml ``hooks:``): the package's docstrings use Sphinx roles (:class:`~x.Y`),
which mkdocstrings leaves as literal text; render them as plain code, ``~`` keeping the last name."""

from __future__ import annotations

import re

ROLE = re.compile(r":(?:func|class|meth|data|mod|attr|exc|obj):<code>(~?)([^<]*)</code>")


def _code(match: re.Match) -> str:
    name = match.group(2)
    return f"<code>{name.rsplit('.', 1)[-1] if match.group(1) else name}</code>"


def on_page_content(html: str, **kwargs) -> str:
    return ROLE.sub(_code, html)
