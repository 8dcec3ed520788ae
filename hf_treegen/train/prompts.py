"""Deterministic, diverse instruction prompts for drafter distillation, from offline corpora.

The drafter has to learn how the *target* continues a chat, so the prompts only need to be varied and
realistic; the answers come from the target itself (:mod:`hf_treegen.train.data`). Two corpora that any
fresh Debian/Ubuntu machine with Python can obtain offline-ish (no Hugging Face Hub) are used:

(a) **Python 3.11 documentation, reST sources**, from the Debian package ``python3.11-doc``
    (``usr/share/doc/python3.11/html/_sources/**/*.rst.txt``: 497 pages of tutorial, library reference,
    language reference, HOWTOs, FAQ, What's New, C API). :func:`python_docs_dir` fetches it once with
    ``apt-get download`` + ``dpkg-deb -x`` (no root install needed) into
    ``$HF_TREEGEN_CACHE/corpora/python3.11-doc``. Licence: the Python documentation is distributed under
    the PSF License Agreement (PSF-2.0; example code is additionally under the Zero-Clause BSD licence);
    the package's Debian ``copyright`` file is copied next to the sources.
(b) **The CPython standard library sources** of the running interpreter
    (``sysconfig.get_paths()["stdlib"]``; ``site-packages``/``dist-packages`` and the test suites are
    skipped). Licence: PSF-2.0 (Python Software Foundation License Version 2).

Each source is cut into *units* (a doc section chunk, a section title, a documented API object, a stdlib
function, class outline or module) and every unit becomes one prompt through one of several templates:
"Summarise this passage ...", "Explain ... to a beginner", "Write an example that uses ``mod.func``",
"Explain what this function does: <code>", "Write a docstring for ...", "Add type hints to ...",
"Write a Python function ``f(args)`` that does the following: <docstring>", etc. Chunks and code are
capped at about 1,200 characters (roughly 300-400 SmolLM2 tokens), so a whole chat prompt stays modest.

Determinism: for a given seed and the same corpora, :func:`train_prompts` returns the same list, and a
shorter list is always a prefix of a longer one (so raising ``n`` between sittings only appends).
Template choice is seeded per unit, not by enumeration order. Prompt ids are content hashes
(:func:`prompt_id`), so a resumed run on a machine with a slightly different corpus version still
recognises the prompts it already generated.

Evaluation hold-out: :data:`EVAL_MODULES` (10 stdlib modules: their source *and* their
``library/<module>`` doc page) and :data:`EVAL_DOC_PAGES` (10 other doc pages) are **evaluation only**.
:func:`eval_prompts` draws only from them; :func:`train_prompts` excludes every unit from them and every
training prompt whose text even mentions a reserved module name (:func:`is_eval_prompt`), plus the
fixed benchmark/demo prompts of :mod:`hf_treegen.bench.prompts`.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sysconfig
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from ..bench.prompts import all_eval_texts
from ..cache_dir import cache_dir

# --------------------------------------------------------------------------------------------------
# evaluation hold-out

#: Stdlib modules reserved for evaluation: their source files (and submodules) and their
#: ``library/<name>`` documentation pages never produce training prompts, and no training prompt may
#: mention them. Chosen to be distinctive words (a mention filter on "calendar" would hit prose).
EVAL_MODULES: tuple[str, ...] = (
    "textwrap", "difflib", "shlex", "colorsys", "graphlib", "fnmatch", "filecmp", "heapq", "netrc",
    "zipapp",
)
#: Documentation pages (paths under ``_sources`` without ``.rst.txt``) reserved for evaluation.
EVAL_DOC_PAGES: tuple[str, ...] = (
    "howto/sorting", "howto/ipaddress", "howto/annotations", "howto/curses", "tutorial/inputoutput",
    "tutorial/errors", "faq/design", "faq/windows", "whatsnew/3.3", "c-api/bytes",
)
_EVAL_MENTION = re.compile(r"(?<![\w])(?:" + "|".join(EVAL_MODULES) + r")(?![\w])")

MAX_CHUNK_CHARS = 1200
MIN_CHUNK_CHARS = 200
MAX_CODE_CHARS = 1200
MIN_CODE_CHARS = 80


@dataclass(frozen=True)
class Prompt:
    """One user message. ``id`` is a content hash of ``text``; ``source`` is ``doc:<page>`` or
    ``py:<module>``; ``template`` names the template that produced it."""

    id: str
    text: str
    source: str
    template: str


def prompt_id(text: str) -> str:
    """Stable 16-hex-digit id of a prompt text (sha1 prefix)."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def is_eval_source(source: str) -> bool:
    """True for a unit source (``doc:<page>`` / ``py:<module>``) reserved for evaluation."""
    kind, _, name = source.partition(":")
    if kind == "doc":
        if name in EVAL_DOC_PAGES:
            return True
        if name.startswith("library/"):
            mod = name[len("library/"):]
            return any(mod == m or mod.startswith(m + ".") for m in EVAL_MODULES)
        return False
    if kind == "py":
        return any(name == m or name.startswith(m + ".") for m in EVAL_MODULES)
    return False


def is_eval_prompt(text: str) -> bool:
    """True if ``text`` must not be trained on: a fixed benchmark/demo prompt, or any text that
    mentions a reserved evaluation module (which covers every prompt :func:`eval_prompts` makes from
    ``library/<module>`` pages and module sources). Prompts from :data:`EVAL_DOC_PAGES` need not mention
    a module; :func:`train_prompts` excludes them by source instead."""
    return text.strip() in all_eval_texts() or _EVAL_MENTION.search(text) is not None


# --------------------------------------------------------------------------------------------------
# corpora on disk

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


# --------------------------------------------------------------------------------------------------
# units -> prompts

@dataclass(frozen=True)
class _Unit:
    key: str  # stable identity, seeds the template choice
    source: str
    fields: tuple[tuple[str, str], ...]
    templates: tuple[str, ...]  # names of applicable templates


TEMPLATES: dict[str, str] = {
    # documentation chunks
    "doc_summarise": "Summarise this passage from the Python documentation:\n\n{chunk}",
    "doc_explain": "Explain the following to a beginner, in plain words:\n\n{chunk}",
    "doc_key_points": "List the key points of this text:\n\n{chunk}",
    "doc_question": "Read this passage, then write one question it answers, and answer it:\n\n{chunk}",
    "doc_section": "Here is part of the \"{section}\" section of the Python docs:\n\n{chunk}\n\nExplain it briefly.",
    "doc_example": "Write a short Python example that illustrates this passage:\n\n{chunk}",
    # documentation section titles
    "title_explain": "Explain {topic} in Python.",
    "title_overview": "Give a short overview of \"{section}\" from the Python documentation on {page}.",
    "title_know": "What should a Python programmer know about {topic}?",
    # documented API objects
    "api_example": "Write an example that uses `{qualname}`.",
    "api_what": "What does `{qualname}` do? Answer briefly.",
    "api_when": "When would I use `{qualname}` in Python? Show a short example.",
    "api_signature": "Explain the parameters of `{signature}`.",
    "api_class": "Explain the `{qualname}` class and show how to create and use one.",
    "api_data": "What is `{qualname}` in Python, and when is it useful?",
    # stdlib functions
    "code_explain": "Explain what this function does:\n\n```python\n{code}\n```",
    "code_docstring": "Write a docstring for this function:\n\n```python\n{nodoc}\n```",
    "code_typehints": "Add type hints to this function:\n\n```python\n{code}\n```",
    "code_tests": "Write pytest unit tests for this function:\n\n```python\n{code}\n```",
    "code_refactor": "Rewrite this function to make it shorter and easier to read:\n\n```python\n{code}\n```",
    "code_review": "Review this Python code and point out possible bugs or edge cases:\n\n```python\n{code}\n```",
    "code_walkthrough": "Walk through this code from the `{module}` module step by step:\n\n```python\n{code}\n```",
    "code_from_doc": "Write a Python function `{name}({args})` that does the following:\n\n{doc}",
    # stdlib classes and modules
    "class_outline": "Explain what the class `{qualname}` does, given its outline:\n\n```python\n{outline}\n```",
    "module_summary": "Summarise what the Python module `{module}` does, based on its docstring:\n\n{doc}",
    "module_usage": "What is the Python `{module}` module used for? Give a short example.",
}


def _render(unit: _Unit, seed: int) -> Prompt:
    rng = random.Random(f"{seed}:{unit.key}")
    name = rng.choice(unit.templates)
    text = TEMPLATES[name].format(**dict(unit.fields))
    return Prompt(prompt_id(text), text, unit.source, name)


# --- reST --------------------------------------------------------------------------------------------

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
_GENERIC_TITLES = {"examples", "example", "notes", "introduction", "overview", "functions", "classes",
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


def _title_text(title: str) -> str:
    return _inline(title).replace("`", "").replace(" --- ", ": ").replace(" — ", ": ").strip()


def _parse_rst(text: str) -> list[tuple[str, list[str]]]:
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
class _ApiObject:
    kind: str
    qualname: str
    signature: str


def _clean_section(lines: list[str], context: dict) -> tuple[str, list[_ApiObject]]:
    """Plain-text body of one section and the API objects it documents.

    ``context`` carries the current module (``.. module::`` / ``.. currentmodule::``) across sections.
    """
    out: list[str] = []
    apis: list[_ApiObject] = []
    classes: list[tuple[int, str]] = []  # (indent, qualified class name) of enclosing class directives
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _DIRECTIVE.match(line)
        if m is None and _COMMENT.match(line) and not line.strip().startswith(".. |"):
            i = _skip_block(lines, i, len(_COMMENT.match(line).group(1)))  # comment or hyperlink target
            continue
        if m is None and line.strip().startswith(".. |"):
            i = _skip_block(lines, i, len(line) - len(line.lstrip()))
            continue
        if m is None:
            stripped = line.rstrip()
            if stripped.strip() == "::":
                i += 1
                continue
            if stripped.endswith("::"):
                stripped = stripped[:-1]  # "Example::" -> "Example:"
            out.append(_inline(stripped))
            i += 1
            continue
        indent, kind, arg = len(m.group(1)), m.group(2), m.group(3).strip()
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
        if kind in ("module", "currentmodule"):
            context["module"] = None if arg == "None" else arg
        if kind in _DROP_BLOCKS:
            i = _skip_block(lines, j - 1, indent)
            continue
        if kind in _API_KINDS:
            while classes and classes[-1][0] >= indent:
                classes.pop()
            name_m = re.match(r"[\w.]+", arg)
            if name_m:
                raw = name_m.group(0)
                local = f"{classes[-1][1]}.{raw}" if classes and "." not in raw else raw
                module = context.get("module")
                name = local
                if module and module != "builtins" and not local.startswith(module + "."):
                    name = f"{module}.{local}"
                if kind in ("class", "exception"):
                    classes.append((indent, local))
                sig = name + arg[len(raw):]
                apis.append(_ApiObject(kind, name, sig))
            out.append(" " * indent + f"`{arg}`" + "".join(f"\n{' ' * indent}`{s}`" for s in extra_sigs))
        elif kind == "versionadded":
            ver, _, rest = arg.partition(" ")
            out.append(" " * indent + f"New in version {ver}." + (f" {_inline(rest)}" if rest else ""))
        elif kind == "versionchanged":
            ver, _, rest = arg.partition(" ")
            out.append(" " * indent + f"Changed in version {ver}:" + (f" {_inline(rest)}" if rest else ""))
        elif kind in ("deprecated", "deprecated-removed"):
            vers = arg.split(" ")
            rest = " ".join(vers[2 if kind == "deprecated-removed" else 1:])
            head = f"Deprecated since version {vers[0]}" + \
                (f", will be removed in version {vers[1]}" if kind == "deprecated-removed" and len(vers) > 1 else "")
            out.append(" " * indent + head + ":" + (f" {_inline(rest)}" if rest else ""))
        elif kind in _LABELS:
            label = _LABELS[kind] if kind != "admonition" else _inline(arg) + ":"
            out.append(" " * indent + label + (f" {_inline(arg)}" if arg and kind != "admonition" else ""))
        elif kind in ("cmdoption", "option", "envvar", "describe", "object", "pdbcommand", "rubric",
                      "topic", "sidebar"):
            out.append(" " * indent + _inline(arg))
        # code-block, doctest, testcode, sourcecode, ...: drop the directive line, keep the content
        i = j
    return "\n".join(out), apis


def _skip_block(lines: list[str], i: int, indent: int) -> int:
    """Index after the line ``i`` and every following line indented deeper than ``indent``
    (blank lines included)."""
    j = i + 1
    while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
        j += 1
    return j


def _chunks(body: str, max_chars: int = MAX_CHUNK_CHARS, min_chars: int = MIN_CHUNK_CHARS) -> list[str]:
    """Group blank-line-separated paragraphs into chunks of at most ``max_chars`` characters."""
    paras = [p for p in re.split(r"\n\s*\n", body) if p.strip()]
    pieces: list[str] = []
    for p in paras:
        p = p.rstrip()
        while len(p) > max_chars:  # hard split at a line boundary
            cut = p.rfind("\n", 0, max_chars)
            cut = cut if cut > max_chars // 3 else max_chars
            pieces.append(p[:cut])
            p = p[cut:].lstrip("\n")
        if p.strip():
            pieces.append(p)
    chunks, cur = [], ""
    for p in pieces:
        if cur and len(cur) + 2 + len(p) > max_chars:
            chunks.append(cur)
            cur = p
        else:
            cur = f"{cur}\n\n{p}" if cur else p
    if cur:
        chunks.append(cur)
    return [textwrap.dedent(c).strip() for c in chunks if len(c.strip()) >= min_chars]


def _doc_units(page: str, text: str) -> Iterator[_Unit]:
    source = f"doc:{page}"
    sections = _parse_rst(text)
    page_title = _title_text(next((t for t, _ in sections if t), page.rsplit("/", 1)[-1]))
    context: dict = {"module": None}
    for s_index, (title, body) in enumerate(sections):
        section = _title_text(title) or page_title
        clean, apis = _clean_section(body, context)
        for c_index, chunk in enumerate(_chunks(clean)):
            names = ["doc_summarise", "doc_explain", "doc_key_points", "doc_question", "doc_example"]
            if section and section.lower() not in _GENERIC_TITLES and len(section) < 80:
                names.append("doc_section")
            yield _Unit(f"{source}#{s_index}.{c_index}", source,
                        (("chunk", chunk), ("section", section)), tuple(names))
        if title and 3 <= len(section) < 80:
            generic = section.lower() in _GENERIC_TITLES or len(section.split()) < 2
            topic = f"{section.lower()} in {page_title}" if generic else section
            names = ("title_overview",) if generic else ("title_explain", "title_overview", "title_know")
            yield _Unit(f"{source}#{s_index}:title", source,
                        (("topic", topic), ("section", section), ("page", page_title)), names)
        for a_index, api in enumerate(apis):
            if api.kind in ("class", "exception"):
                names = ("api_class", "api_what", "api_example")
            elif api.kind in ("data", "attribute", "property"):
                names = ("api_data", "api_what")
            else:
                names = ("api_example", "api_what", "api_when")
                if "(" in api.signature and len(api.signature) < 200 and api.signature.count(",") >= 1:
                    names += ("api_signature",)
            yield _Unit(f"{source}#{s_index}:api{a_index}", source,
                        (("qualname", api.qualname), ("signature", api.signature)), names)


# --- Python source -----------------------------------------------------------------------------------

def _segment(lines: list[str], node: ast.AST) -> str:
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return textwrap.dedent("\n".join(lines[start - 1: node.end_lineno])).strip("\n")


def _without_docstring(lines: list[str], node: ast.AST) -> str | None:
    body = node.body
    if not (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        return None
    if len(body) == 1:
        return None
    ds = body[0]
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
    kept = lines[start - 1: ds.lineno - 1] + lines[ds.end_lineno: node.end_lineno]
    return textwrap.dedent("\n".join(kept)).strip("\n")


def _first_paragraph(doc: str, limit: int = 600) -> str:
    para = doc.strip().split("\n\n")[0].strip()
    return para if len(para) <= limit else ""


def _annotated(node: ast.AST) -> bool:
    args = node.args
    every = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
    return node.returns is not None or any(a.annotation is not None for a in every)


def _py_units(module: str, text: str) -> Iterator[_Unit]:
    source = f"py:{module}"
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return
    lines = text.splitlines()
    public = not any(p.startswith("_") for p in module.split("."))
    doc = ast.get_docstring(tree) or ""
    if public:
        yield _Unit(f"{source}:usage", source, (("module", module),), ("module_usage",))
    if MIN_CODE_CHARS <= len(doc.strip()) <= MAX_CODE_CHARS:
        yield _Unit(f"{source}:summary", source, (("module", module), ("doc", doc.strip())), ("module_summary",))

    def functions() -> Iterator[tuple[str, ast.AST]]:
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield node.name, node
            elif isinstance(node, ast.ClassDef):
                for sub in node.body:
                    if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        yield f"{node.name}.{sub.name}", sub

    for qual, node in functions():
        code = _segment(lines, node)
        if not (MIN_CODE_CHARS <= len(code) <= MAX_CODE_CHARS) or code.count("\n") < 2:
            continue
        fields = {"code": code, "module": module, "name": node.name}
        names = ["code_explain", "code_tests", "code_refactor", "code_review", "code_walkthrough"]
        nodoc = _without_docstring(lines, node)
        if nodoc is not None:
            fields["nodoc"] = nodoc
            names.append("code_docstring")
        elif ast.get_docstring(node) is None:
            fields["nodoc"] = code
            names.append("code_docstring")
        if not _annotated(node):
            names.append("code_typehints")
        fdoc = _first_paragraph(ast.get_docstring(node) or "")
        if len(fdoc) >= 30 and not node.name.startswith("__"):
            fields["doc"], fields["args"] = fdoc, ast.unparse(node.args)
            names.append("code_from_doc")
        yield _Unit(f"{source}:{qual}", source, tuple(sorted(fields.items())), tuple(names))

    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        head = lines[node.lineno - 1].strip() if node.lineno <= len(lines) else f"class {node.name}:"
        if not head.endswith(":"):
            bases = ", ".join(ast.unparse(b) for b in node.bases)
            head = f"class {node.name}({bases}):" if bases else f"class {node.name}:"
        outline = [head]
        cdoc = _first_paragraph(ast.get_docstring(node) or "", 400)
        if cdoc:
            outline.append(textwrap.indent(f'"""{cdoc}"""', "    "))
        methods = [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if len(methods) < 2:
            continue
        for m in methods:
            prefix = "async def" if isinstance(m, ast.AsyncFunctionDef) else "def"
            ret = f" -> {ast.unparse(m.returns)}" if m.returns is not None else ""
            outline.append(f"    {prefix} {m.name}({ast.unparse(m.args)}){ret}: ...")
        text_outline = "\n".join(outline)
        if len(text_outline) > MAX_CODE_CHARS:
            continue
        yield _Unit(f"{source}:class:{node.name}", source,
                    (("outline", text_outline), ("qualname", f"{module}.{node.name}")), ("class_outline",))


# --- assembling ---------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _all_units(docs_root: str | None, stdlib_root: str | None) -> tuple[tuple[_Unit, ...], tuple[_Unit, ...]]:
    """(doc units, stdlib units) over the whole corpora, eval sources included."""
    docs: list[_Unit] = []
    if docs_root is not None:
        for page, path in doc_pages(Path(docs_root)):
            docs.extend(_doc_units(page, path.read_text(encoding="utf-8", errors="replace")))
    code: list[_Unit] = []
    if stdlib_root is not None:
        for module, path in stdlib_modules(Path(stdlib_root)):
            code.extend(_py_units(module, path.read_text(encoding="utf-8", errors="replace")))
    return tuple(docs), tuple(code)


def _roots(docs_dir, stdlib_root) -> tuple[str | None, str | None]:
    if docs_dir is None:
        docs_dir = python_docs_dir()
    docs = None if docs_dir is False else str(Path(docs_dir).resolve())
    if stdlib_root is None:
        stdlib_root = stdlib_dir()
    code = None if stdlib_root is False else str(Path(stdlib_root).resolve())
    return docs, code


def _mix(doc_prompts: list[Prompt], code_prompts: list[Prompt], n: int | None, seed: int,
         doc_share: float) -> list[Prompt]:
    rng = random.Random(f"mix:{seed}")
    rng_d, rng_c = random.Random(f"docs:{seed}"), random.Random(f"code:{seed}")
    rng_d.shuffle(doc_prompts)
    rng_c.shuffle(code_prompts)
    out: list[Prompt] = []
    di = ci = 0
    limit = len(doc_prompts) + len(code_prompts) if n is None else n
    while len(out) < limit and (di < len(doc_prompts) or ci < len(code_prompts)):
        take_doc = rng.random() < doc_share
        if (take_doc and di < len(doc_prompts)) or ci >= len(code_prompts):
            out.append(doc_prompts[di])
            di += 1
        else:
            out.append(code_prompts[ci])
            ci += 1
    return out


def _dedup(prompts: Iterable[Prompt]) -> list[Prompt]:
    seen: set[str] = set()
    out = []
    for p in prompts:
        if p.id not in seen:
            seen.add(p.id)
            out.append(p)
    return out


def train_prompts(n: int | None = None, *, seed: int = 0, docs_dir: Path | str | bool | None = None,
                  stdlib_root: Path | str | bool | None = None, doc_share: float = 0.5) -> list[Prompt]:
    """Training prompts: a seeded shuffle mixing doc units (share ``doc_share``) and stdlib units.

    ``docs_dir``: folder of ``*.rst.txt`` sources; None fetches/uses the cached ``python3.11-doc``
    (:func:`python_docs_dir`); False leaves the docs out. ``stdlib_root``: None uses the running
    interpreter's stdlib; False leaves it out. Eval sources and every prompt for which
    :func:`is_eval_prompt` holds are excluded. ``n=None`` returns all (tens of thousands); for a fixed
    seed, ``train_prompts(k)`` is a prefix of ``train_prompts(n)`` when ``k < n``.
    """
    docs, code = _all_units(*_roots(docs_dir, stdlib_root))

    def keep(units: tuple[_Unit, ...]) -> list[Prompt]:
        prompts = (_render(u, seed) for u in units if not is_eval_source(u.source))
        return _dedup(p for p in prompts if not is_eval_prompt(p.text))

    return _mix(keep(docs), keep(code), n, seed, doc_share)


def eval_prompts(n: int, *, seed: int = 0, docs_dir: Path | str | bool | None = None,
                 stdlib_root: Path | str | bool | None = None, doc_share: float = 0.5) -> list[Prompt]:
    """Held-out prompts built only from :data:`EVAL_MODULES` and :data:`EVAL_DOC_PAGES`, with the same
    templates as training (so the distribution matches, the content does not)."""
    docs, code = _all_units(*_roots(docs_dir, stdlib_root))

    def keep(units: tuple[_Unit, ...]) -> list[Prompt]:
        return _dedup(_render(u, seed) for u in units if is_eval_source(u.source))

    return _mix(keep(docs), keep(code), n, seed + 1_000_003, doc_share)
