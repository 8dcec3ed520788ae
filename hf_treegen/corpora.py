"""The offline text corpora the project builds prompts and training data from, and their reST reader.

* :func:`python_docs_dir`: the Python 3.11 documentation's reST sources, from the Debian package
  ``python3.11-doc`` (fetched once with ``apt-get download`` + ``dpkg-deb -x``, no root needed, into
  ``$HF_TREEGEN_CACHE/corpora``). Licence: PSF-2.0 (example code also 0BSD); the package's
  ``copyright`` file is kept next to the sources.
* :func:`stdlib_modules`: the running interpreter's standard library sources (no site-packages, no
  test suites). Licence: PSF-2.0.
* :func:`parse_rst`, :func:`clean_section`, :func:`title_text`: a small reST reader that turns doc pages
  into titled sections of plain text (directives unwrapped, roles resolved, index/toctree blocks
  dropped). It is made for these sources, not for reST in general.

Drafter training data (:mod:`hf_treegen.train`) and the choice benchmark prompts
(:mod:`hf_treegen.bench.choice_prompts`) both read from here. Nothing in the core imports it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .cache_dir import cache_dir


DOC_PACKAGE = "python3.11-doc"


DOC_SOURCES_IN_DEB = "usr/share/doc/python3.11/html/_sources"


DOC_COPYRIGHT_IN_DEB = "usr/share/doc/python3.11-doc/copyright"


_DOC_MARKER = "hf_treegen_corpus.json"


def python_docs_dir(download: bool = True) -> Path:
    """The folder of Python 3.11 ``*.rst.txt`` doc sources, fetching ``python3.11-doc`` on first use.

    Fetching runs ``apt-get download python3.11-doc`` (no installation, works unprivileged where apt
    lists exist) and ``dpkg-deb -x`` in a temporary folder, then moves ``_sources`` and the Debian
    ``copyright`` file into ``$HF_TREEGEN_CACHE/corpora/python3.11-doc`` in one rename, with a marker
    file recording the package version and the .deb's sha256.

    Raises RuntimeError with instructions when ``apt-get``/``dpkg-deb`` are missing or the download
    fails (e.g. empty apt lists: run ``apt-get update``); FileNotFoundError if ``download`` is False
    and nothing is cached.
    """
    root = cache_dir("corpora") / DOC_PACKAGE
    sources = root / "_sources"
    if (root / _DOC_MARKER).is_file() and sources.is_dir():
        return sources
    if not download:
        raise FileNotFoundError(f"{sources} is missing; call python_docs_dir(download=True)")
    missing = [tool for tool in ("apt-get", "dpkg-deb") if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(
            f"fetching the Python docs corpus needs {' and '.join(missing)} (a Debian/Ubuntu system). "
            f"Elsewhere, obtain the reST sources (`{DOC_PACKAGE}` .deb, or CPython's Doc/ folder renamed "
            f"*.rst -> *.rst.txt) and pass docs_dir=..., or build prompts with docs_dir=False.")
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=".fetch-") as tmp:
        tmp = Path(tmp)
        _run(["apt-get", "download", DOC_PACKAGE], cwd=tmp,
             hint="if apt cannot locate the package, run `apt-get update` first")
        debs = sorted(tmp.glob(f"{DOC_PACKAGE}_*.deb"))
        if not debs:
            raise RuntimeError(f"apt-get download produced no {DOC_PACKAGE} .deb in {tmp}")
        deb = debs[-1]
        _run(["dpkg-deb", "-x", str(deb), str(tmp / "x")], cwd=tmp)
        src = tmp / "x" / DOC_SOURCES_IN_DEB
        if not src.is_dir():
            raise RuntimeError(f"{deb.name} has no {DOC_SOURCES_IN_DEB}")
        staging = tmp / "out"
        staging.mkdir()
        shutil.move(str(src), str(staging / "_sources"))
        copyright_file = tmp / "x" / DOC_COPYRIGHT_IN_DEB
        if copyright_file.is_file():
            shutil.copy(copyright_file, staging / "copyright")
        version = subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], capture_output=True,
                                 text=True).stdout.strip()
        marker = {
            "package": DOC_PACKAGE, "version": version, "deb": deb.name,
            "sha256": hashlib.sha256(deb.read_bytes()).hexdigest(),
            "files": sum(1 for _ in (staging / "_sources").rglob("*.rst.txt")),
            "licence": "PSF-2.0 (Python documentation); see copyright",
        }
        (staging / _DOC_MARKER).write_text(json.dumps(marker, indent=1) + "\n")
        if root.exists():  # a stale or partial copy
            shutil.rmtree(root)
        os.replace(staging, root)
    return sources


def _run(cmd: list[str], cwd: Path, hint: str = "") -> None:
    try:
        subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        tail = (exc.stderr or exc.stdout or "").strip()[-800:]
        raise RuntimeError(f"`{' '.join(cmd)}` failed (exit {exc.returncode}): {tail}"
                           + (f"\nhint: {hint}" if hint else "")) from exc


def stdlib_dir() -> Path:
    """The running interpreter's standard library folder (``sysconfig.get_paths()["stdlib"]``)."""
    return Path(sysconfig.get_paths()["stdlib"])


_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test",
              "turtledemo", "ensurepip"}


def stdlib_modules(root: Path | None = None) -> list[tuple[str, Path]]:
    """``(dotted module name, path)`` for every stdlib ``.py`` file, sorted, without tests and
    third-party packages."""
    root = Path(root) if root is not None else stdlib_dir()
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(part in _SKIP_DIRS or part.startswith("config-") for part in rel.parts[:-1]):
            continue
        if rel.name.startswith("test_") or not all(p.isidentifier() for p in rel.with_suffix("").parts):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts:
            out.append((".".join(parts), path))
    return out


def doc_pages(root: Path) -> list[tuple[str, Path]]:
    """``(page, path)`` for every ``*.rst.txt`` under ``root`` (page = relative path, no suffix)."""
    root = Path(root)
    return [(p.relative_to(root).as_posix()[: -len(".rst.txt")], p) for p in sorted(root.rglob("*.rst.txt"))]


_ADORNMENT = set("=-~^\"*+#`:'._")


_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([\w:-]+)::\s*(.*)$")


_COMMENT = re.compile(r"^(\s*)\.\.(\s|$)")


_OPTION = re.compile(r"^\s+:[\w-]+:(\s.*)?$")


_ROLE = re.compile(r":(?:[\w-]+:)*([\w-]+):`([^`]+)`")


_API_KINDS = {"function", "method", "class", "data", "attribute", "exception", "decorator",
              "classmethod", "staticmethod", "coroutinefunction", "coroutinemethod", "decoratormethod",
              "abstractmethod", "property"}


_DROP_BLOCKS = {"index", "moduleauthor", "sectionauthor", "highlight", "toctree", "include",
                "literalinclude", "tabularcolumns", "testsetup", "testcleanup", "only", "raw", "image",
                "figure", "audit-event", "audit-event-table", "productionlist", "list-table",
                "csv-table", "availability", "module", "currentmodule", "program", "opcode",
                "c:function", "c:macro", "c:type", "c:member", "c:var", "c:data", "c:namespace",
                "c:namespace-push", "c:namespace-pop", "cfunction", "cmacro", "ctype", "cmember",
                "cvar", "limited-api-list", "miscnews", "impl-detail", "manpage"}


_LABELS = {"note": "Note:", "warning": "Warning:", "seealso": "See also:", "important": "Important:",
           "tip": "Tip:", "hint": "Hint:", "caution": "Caution:", "attention": "Attention:",
           "danger": "Danger:", "admonition": ""}


GENERIC_TITLES = {"examples", "example", "notes", "introduction", "overview", "functions", "classes",
                   "constants", "exceptions", "module contents", "summary", "usage", "details",
                   "footnotes", "other", "miscellaneous", "contents", "attributes", "methods",
                   "basic usage", "background", "api", "reference", "see also", "deprecated",
                   "changes", "other changes", "new features", "optimizations", "build changes",
                   "porting to python 3.11", "improved modules", "deprecated functions"}


def _inline(text: str) -> str:
    """Turn reST inline markup into plain text with Markdown-style backticks for code."""

    def role(m: re.Match) -> str:
        kind, body = m.group(1), m.group(2)
        explicit = re.fullmatch(r"(.*?)\s*<([^<>]+)>", body, re.S)
        if explicit:
            body = explicit.group(1) or explicit.group(2)
        if body.startswith("~"):
            body = body[1:].rsplit(".", 1)[-1]
        body = body.lstrip("!")
        if kind == "pep":
            return f"PEP {body}"
        if kind == "rfc":
            return f"RFC {body}"
        if kind in ("ref", "doc", "term", "dfn", "title-reference", "emphasis", "strong", "abbr",
                    "menuselection", "guilabel", "source", "manpage", "issue", "gh", "keyword"):
            return body
        return f"`{body}`"

    text = _ROLE.sub(role, text)
    text = re.sub(r"``(.+?)``", r"`\1`", text)
    text = re.sub(r"`([^`<]+?)\s*<[^>`]+>`__?", r"\1", text)  # `text <url>`_
    text = re.sub(r"`([^`]+)`__?(?=\W|$)", r"\1", text)  # `text`_
    text = text.replace("\\ ", "")
    return text


def title_text(title: str) -> str:
    return _inline(title).replace("`", "").replace(" --- ", ": ").replace(" — ", ": ").strip()


def parse_rst(text: str) -> list[tuple[str, list[str]]]:
    """Split a reST page into ``(title, body lines)`` sections (the preamble gets title "")."""
    lines = text.splitlines()
    sections: list[tuple[str, list[str]]] = [("", [])]
    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if _is_adornment(line) and i + 2 < len(lines) and lines[i + 1].strip() and \
                _is_adornment(lines[i + 2]) and lines[i + 2].strip()[0] == line.strip()[0]:
            sections.append((lines[i + 1].strip(), []))  # overline + title + underline
            i += 3
            continue
        if line.strip() and not line[0].isspace() and _is_adornment(nxt) and \
                len(nxt.rstrip()) >= len(line.rstrip()) and not _is_adornment(line):
            sections.append((line.strip(), []))
            i += 2
            continue
        sections[-1][1].append(line)
        i += 1
    return [(t, b) for t, b in sections if t or any(x.strip() for x in b)]


def _is_adornment(line: str) -> bool:
    s = line.rstrip()
    return len(s) >= 3 and not s[0].isspace() and len(set(s)) == 1 and s[0] in _ADORNMENT


@dataclass
class ApiObject:
    kind: str
    qualname: str
    signature: str


def clean_section(lines: list[str], context: dict) -> tuple[str, list[ApiObject]]:
    """Plain-text body of one section and the API objects it documents.

    ``context`` carries the current module (``.. module::`` / ``.. currentmodule::``) across sections.
    """
    out: list[str] = []
    apis: list[ApiObject] = []
    classes: list[tuple[int, str]] = []  # (indent, qualified class name) of enclosing class directives
    i = 0
    while i < len(lines):
        m = _DIRECTIVE.match(lines[i])
        if m is None:
            i = _plain_line(lines, i, out)
            continue
        indent, kind = len(m.group(1)), m.group(2)
        arg, extra_sigs, j = _directive_head(lines, i, indent, kind, m.group(3).strip())
        if kind in ("module", "currentmodule"):
            context["module"] = None if arg == "None" else arg
        if kind in _DROP_BLOCKS:
            i = _skip_block(lines, j - 1, indent)
            continue
        if kind in _API_KINDS:
            api = _api_object(kind, arg, indent, classes, context)
            if api is not None:
                apis.append(api)
            out.append(" " * indent + f"`{arg}`" + "".join(f"\n{' ' * indent}`{s}`" for s in extra_sigs))
        else:
            text = _directive_text(kind, arg)
            if text is not None:
                out.append(" " * indent + text)
        # code-block, doctest, testcode, sourcecode, ...: drop the directive line, keep the content
        i = j
    return "\n".join(out), apis


def _plain_line(lines: list[str], i: int, out: list[str]) -> int:
    """Handle line ``i``, which is no directive: skip a comment or substitution block, else append the
    line as plain text to ``out``. Returns the index of the next line to read."""
    line = lines[i]
    comment = _COMMENT.match(line)
    if comment and not line.strip().startswith(".. |"):
        return _skip_block(lines, i, len(comment.group(1)))  # comment or hyperlink target
    if line.strip().startswith(".. |"):
        return _skip_block(lines, i, len(line) - len(line.lstrip()))
    stripped = line.rstrip()
    if stripped.strip() == "::":
        return i + 1
    if stripped.endswith("::"):
        stripped = stripped[:-1]  # "Example::" -> "Example:"
    out.append(_inline(stripped))
    return i + 1


def _directive_head(lines: list[str], i: int, indent: int, kind: str, arg: str) -> tuple[str, list[str], int]:
    """The directive at line ``i``: its full argument, the further signatures of an API directive and
    the index of the first line after its head (options included)."""
    j = i + 1
    while arg.endswith("\\") and j < len(lines):  # backslash-continued signatures
        arg = arg[:-1].rstrip() + " " + lines[j].strip()
        j += 1
    extra_sigs = []
    while j < len(lines) and kind in _API_KINDS and lines[j].strip() and \
            not _OPTION.match(lines[j]) and len(lines[j]) - len(lines[j].lstrip()) > indent + 3:
        extra_sigs.append(lines[j].strip())  # further signatures aligned under the first
        j += 1
    while j < len(lines) and _OPTION.match(lines[j]):
        j += 1
    return arg, extra_sigs, j


def _api_object(kind: str, arg: str, indent: int, classes: list[tuple[int, str]], context: dict
                ) -> ApiObject | None:
    """The API object an API directive documents, qualified by the current module and the enclosing
    class; ``classes`` is updated (left classes popped, a new class pushed). None without a name."""
    while classes and classes[-1][0] >= indent:
        classes.pop()
    name_m = re.match(r"[\w.]+", arg)
    if not name_m:
        return None
    raw = name_m.group(0)
    local = f"{classes[-1][1]}.{raw}" if classes and "." not in raw else raw
    module = context.get("module")
    name = local
    if module and module != "builtins" and not local.startswith(module + "."):
        name = f"{module}.{local}"
    if kind in ("class", "exception"):
        classes.append((indent, local))
    return ApiObject(kind, name, name + arg[len(raw):])


def _directive_text(kind: str, arg: str) -> str | None:
    """The text line a non-API directive leaves (without its indent), or None for one that leaves none."""
    if kind == "versionadded":
        ver, _, rest = arg.partition(" ")
        return f"New in version {ver}." + (f" {_inline(rest)}" if rest else "")
    if kind == "versionchanged":
        ver, _, rest = arg.partition(" ")
        return f"Changed in version {ver}:" + (f" {_inline(rest)}" if rest else "")
    if kind in ("deprecated", "deprecated-removed"):
        vers = arg.split(" ")
        rest = " ".join(vers[2 if kind == "deprecated-removed" else 1:])
        head = f"Deprecated since version {vers[0]}" + \
            (f", will be removed in version {vers[1]}" if kind == "deprecated-removed" and len(vers) > 1 else "")
        return head + ":" + (f" {_inline(rest)}" if rest else "")
    if kind in _LABELS:
        label = _LABELS[kind] if kind != "admonition" else _inline(arg) + ":"
        return label + (f" {_inline(arg)}" if arg and kind != "admonition" else "")
    if kind in ("cmdoption", "option", "envvar", "describe", "object", "pdbcommand", "rubric", "topic", "sidebar"):
        return _inline(arg)
    return None


def _skip_block(lines: list[str], i: int, indent: int) -> int:
    """Index after the line ``i`` and every following line indented deeper than ``indent``
    (blank lines included)."""
    j = i + 1
    while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
        j += 1
    return j

