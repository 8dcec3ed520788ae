"""Deterministic, diverse instruction prompts for drafter distillation, from offline corpora.

The drafter has to learn how the *target* continues a chat, so the prompts only need to be varied and
realistic; the answers come from the target itself (:mod:`hf_treegen.train.data`). Two corpora that any
fresh Debian/Ubuntu machine with Python can obtain offline-ish (no Hugging Face Hub) are used:

(a) **Python 3.11 documentation, reST sources**, from the Debian package ``python3.11-doc``
    (``usr/share/doc/python3.11/html/_sources/**/*.rst.txt``: 497 pages of tutorial, library reference,
    language reference, HOWTOs, FAQ, What's New, C API). :func:`hf_treegen.corpora.python_docs_dir` fetches it once with
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
fixed benchmark/demo prompts of :mod:`hf_treegen.bench.prompts` (read from
``hf_treegen/data/prompts/eval.json`` through :mod:`hf_treegen.prompt_data`). The reserved modules and
pages and the templates are kept in ``hf_treegen/data/prompts/train.json``.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import itertools
import random
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from ..corpora import (GENERIC_TITLES, clean_section, doc_pages, parse_rst, python_docs_dir, stdlib_dir,
                       stdlib_modules, title_text)
from ..prompt_data import all_eval_texts, prompt_table

#: The tables below (evaluation hold-out, templates) are kept in ``hf_treegen/data/prompts/train.json``.
_TABLES = prompt_table("train")

# --------------------------------------------------------------------------------------------------
# evaluation hold-out

#: Stdlib modules reserved for evaluation: their source files (and submodules) and their
#: ``library/<name>`` documentation pages never produce training prompts, and no training prompt may
#: mention them. Chosen to be distinctive words (a mention filter on "calendar" would hit prose).
EVAL_MODULES: tuple[str, ...] = _TABLES["eval_modules"]
#: Documentation pages (paths under ``_sources`` without ``.rst.txt``) reserved for evaluation.
EVAL_DOC_PAGES: tuple[str, ...] = _TABLES["eval_doc_pages"]
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


def deal_round_robin(groups: list[list[tuple[str, str]]], source: str, n: int | None) -> list[Prompt]:
    """The first ``n`` prompts (all for None) of ``groups`` of ``(text, template)`` pairs, taken one
    group at a time in turn, so any prefix mixes every group. Repeated texts and evaluation prompts
    are skipped."""
    out: list[Prompt] = []
    seen: set[str] = set()
    for round_ in itertools.zip_longest(*groups):
        for item in round_:
            if item is None or item[0] in seen or is_eval_prompt(item[0]):
                continue
            text, template = item
            seen.add(text)
            out.append(Prompt(prompt_id(text), text, source, template))
            if n is not None and len(out) >= n:
                return out
    return out


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


# --------------------------------------------------------------------------------------------------
# units -> prompts

@dataclass(frozen=True)
class _Unit:
    key: str  # stable identity, seeds the template choice
    source: str
    fields: tuple[tuple[str, str], ...]
    templates: tuple[str, ...]  # names of applicable templates


#: Template name -> text with ``{field}`` slots; the data file groups them by the unit they are filled from.
TEMPLATES: dict[str, str] = {name: text for group in _TABLES["templates"].values() for name, text in group.items()}


def _render(unit: _Unit, seed: int) -> Prompt:
    rng = random.Random(f"{seed}:{unit.key}")
    name = rng.choice(unit.templates)
    text = TEMPLATES[name].format(**dict(unit.fields))
    return Prompt(prompt_id(text), text, unit.source, name)


# --- reST --------------------------------------------------------------------------------------------


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
    sections = parse_rst(text)
    page_title = title_text(next((t for t, _ in sections if t), page.rsplit("/", 1)[-1]))
    context: dict = {"module": None}
    for s_index, (title, body) in enumerate(sections):
        section = title_text(title) or page_title
        clean, apis = clean_section(body, context)
        for c_index, chunk in enumerate(_chunks(clean)):
            names = ["doc_summarise", "doc_explain", "doc_key_points", "doc_question", "doc_example"]
            if section and section.lower() not in GENERIC_TITLES and len(section) < 80:
                names.append("doc_section")
            yield _Unit(f"{source}#{s_index}.{c_index}", source,
                        (("chunk", chunk), ("section", section)), tuple(names))
        if title and 3 <= len(section) < 80:
            generic = section.lower() in GENERIC_TITLES or len(section.split()) < 2
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
