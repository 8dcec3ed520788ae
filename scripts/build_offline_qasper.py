"""Build an offline QASPER-format evaluation set from the Python 3.11 documentation.

The papers are ten pages of the reST sources shipped in Debian's ``python3.11-doc`` package (PSF
licence), located (and fetched with apt-get on first use) by
``hf_treegen.train.prompts.python_docs_dir()``.  Each page becomes one QASPER "paper" in the raw
QASPER JSON layout (``qasper-*-v0.3.json``): ``{paper_id: {title, abstract, full_text,
figures_and_tables, qas}}``.

Page -> paper:

* paper id ``pydocs-<path with / replaced by ->`` (``library/json`` -> ``pydocs-library-json``);
* title: the page title as plain text (``:mod:`json` --- JSON encoder ...`` -> ``json: JSON encoder ...``);
* heading levels follow reST: each adornment style (underline character, with or without overline)
  gets the next level in order of first appearance; level 0 is the page title.  A section's name is
  the path of its headings below the title joined with ``" ::: "``, as QASPER does
  (``"Standard Compliance and Interoperability ::: Character Encodings"``);
* abstract: the first prose paragraphs before the first subsection, until they reach
  ``ABSTRACT_MIN_CHARS`` characters; any further prose before the first subsection becomes a
  first full_text section named ``"Introduction"``.  A page without prose before its first
  subsection (the Logging HOWTO) takes its abstract from the start of its first section instead;
  those paragraphs then appear only in the abstract;
* paragraphs: prose blocks converted to plain text (inline markup stripped, wrapped lines joined
  with single spaces).  Code (literal blocks, doctests, code directives), tables, comments, link
  targets, footnotes, field lists (``:Author: ...``), ``versionadded``/``versionchanged``/``deprecated``/``seealso`` and other
  non-prose directives are skipped (a paragraph that introduces a code block is kept, e.g.
  "Compact encoding:").  Admonitions (note, warning, ...) and block quotes are kept as prose.  Each
  item of a bullet or enumerated list is one paragraph; a definition-list entry is one paragraph
  ``"term: definition"``.  The body of an API description (``.. function::``, ``.. class::``,
  ``.. method::``, ``.. cmdoption::`` ...) is kept, and its first paragraph is prefixed with the
  object's name, e.g. ``"json.dumps: Serialize obj to a JSON formatted str ..."``;
* sections without paragraphs are dropped (their names survive inside their children's names);
* figures_and_tables = [].

Questions are authored in ``data/qasper_offline/questions.json`` (see ``load_questions`` for the
format); each evidence reference ``{"section": ..., "contains": ...}`` must match exactly one
paragraph of that section, and every extractive span must occur verbatim in one of its evidence
paragraphs, or the build fails naming the question.

Run ``.venv/bin/python scripts/build_offline_qasper.py`` (add ``--list`` to print the parsed pages
instead of writing anything).  The output is deterministic for a given package version.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hf_treegen.train.prompts import python_docs_dir  # noqa: E402

PAGES = [
    "library/json",
    "library/argparse",
    "library/dataclasses",
    "tutorial/classes",
    "tutorial/errors",
    "tutorial/modules",
    "howto/sorting",
    "howto/logging",
    "howto/unicode",
    "howto/regex",
]
QUESTIONS = REPO / "data" / "qasper_offline" / "questions.json"
OUT_DIR = REPO / "hf_treegen" / "rag" / "data"
OUT_JSON = OUT_DIR / "pydocs_qasper.json"
OUT_SOURCES = OUT_DIR / "SOURCES.md"
MARKER = "hf_treegen_corpus.json"
ABSTRACT_MIN_CHARS = 300
INTRO_SECTION = "Introduction"
WORKER = "offline-author"

# --- reST structure -------------------------------------------------------------------------------

_ADORNMENT = set("=-~^\"*+#`:'._")
_DIRECTIVE = re.compile(r"^\.\.\s+([\w:-]+)::\s*(.*)$")
_BULLET = re.compile(r"^([-*+•]|#\.|\d+\.|[a-zA-Z]\.|\(\d+\)|\d+\))\s+(\S.*)$")
_SIMPLE_TABLE_BORDER = re.compile(r"^=+( +=+)+\s*$")
_GRID_TABLE_BORDER = re.compile(r"^\+[-=+]+\+\s*$")
_OPTION = re.compile(r"^:[\w-]+:(\s.*)?$")
_FIELD = re.compile(r"^:[^:`\s][^:`]*:(\s|$)")

API_DIRECTIVES = {"function", "method", "class", "data", "attribute", "exception", "decorator",
                  "classmethod", "staticmethod", "coroutinefunction", "coroutinemethod",
                  "decoratormethod", "abstractmethod", "property", "cmdoption", "option",
                  "describe", "envvar", "opcode"}
PROSE_DIRECTIVES = {"note", "warning", "important", "tip", "hint", "caution", "attention", "danger",
                    "admonition", "topic", "impl-detail"}
# every other directive (code-block, doctest, versionadded, versionchanged, deprecated, seealso,
# index, module, rubric, toctree, image, table, ...) is skipped together with its body.


def _is_adornment(line: str) -> bool:
    s = line.rstrip()
    return len(s) >= 3 and not s[0].isspace() and len(set(s)) == 1 and s[0] in _ADORNMENT


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def split_sections(text: str) -> list[tuple[int, str, list[str]]]:
    """Split a page into ``(level, raw title, body lines)``; level 0 is the page title.

    Adornment styles get levels in order of first appearance, the reST rule.  The text before the
    page title (labels, comments) is returned as level -1 and ignored by the caller.
    """
    lines = text.expandtabs(8).splitlines()
    styles: list[tuple[bool, str]] = []
    sections: list[tuple[int, str, list[str]]] = [(-1, "", [])]
    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        style = title = None
        if (_is_adornment(line) and i + 2 < len(lines) and lines[i + 1].strip()
                and _is_adornment(lines[i + 2]) and lines[i + 2][0] == line[0]):
            style, title, step = (True, line[0]), lines[i + 1].strip(), 3
        elif (line.strip() and not line[0].isspace() and not _is_adornment(line)
              and _is_adornment(nxt) and len(nxt.rstrip()) >= len(line.rstrip())
              and (i == 0 or not lines[i - 1].strip())):
            style, title, step = (False, nxt[0]), line.strip(), 2
        if style is None:
            sections[-1][2].append(line)
            i += 1
            continue
        if style not in styles:
            styles.append(style)
        sections.append((styles.index(style), title, []))
        i += step
    return sections


# --- inline markup --------------------------------------------------------------------------------

_ROLE = re.compile(r":(?:[\w-]+:)*([\w-]+):`((?:[^`\\]|\\.)+)`")
_LITERAL = re.compile(r"``(.+?)``")
_HOLD = "\x00{}\x00"


def inline(text: str) -> str:
    """reST inline markup -> plain text."""
    held: list[str] = []

    def hold(s: str) -> str:
        held.append(s)
        return _HOLD.format(len(held) - 1)

    def role(m: re.Match) -> str:
        kind, body = m.group(1), m.group(2)
        explicit = re.fullmatch(r"(.*?)\s*<([^<>]+)>", body, re.S)
        if explicit:
            body = explicit.group(1) or explicit.group(2)
        if body.startswith("~"):
            body = body[1:].rsplit(".", 1)[-1]
        body = body.lstrip("!")
        if kind == "pep":
            body = f"PEP {body}"
        elif kind == "rfc":
            body = f"RFC {body}"
        elif kind in ("kbd", "samp", "file", "program", "envvar", "option", "const", "data"):
            body = body.replace("\\", "") if kind != "samp" else body.replace("{", "").replace("}", "")
        return hold(body)

    text = _LITERAL.sub(lambda m: hold(m.group(1)), text)
    text = _ROLE.sub(role, text)
    text = re.sub(r"`([^`<]*?)\s*<[^>`]+>`__?", lambda m: hold(m.group(1)), text)  # `text <url>`_
    text = re.sub(r"`([^`]+)`__?", lambda m: hold(m.group(1)), text)  # `reference`_
    text = re.sub(r"`([^`]+)`", lambda m: hold(m.group(1)), text)  # default role
    text = re.sub(r"\s*\[(#[\w-]*|\d+|\*)\]_", "", text)  # footnote references
    text = re.sub(r"(?<=[A-Za-z0-9])_(?!\w)", "", text)  # reference name_ (not __dunder__)
    text = re.sub(r"\*\*(\S|\S.*?\S)\*\*", r"\1", text)
    text = re.sub(r"(?<![\w*])\*(\S|\S.*?\S)\*(?![\w*])", r"\1", text)
    text = text.replace("\\ ", "")
    text = re.sub(r"\\(.)", r"\1", text)
    text = text.replace("---", "\u2014")
    text = re.sub(r"\x00(\d+)\x00", lambda m: held[int(m.group(1))], text)
    text = re.sub(r"\x00(\d+)\x00", lambda m: held[int(m.group(1))], text)  # nested holds
    return re.sub(r"\s+", " ", text).strip()


def title_text(raw: str) -> str:
    return inline(raw).replace(" \u2014 ", ": ")


# --- blocks -> paragraphs -------------------------------------------------------------------------


def _block_end(lines: list[str], i: int, indent: int) -> int:
    """Index after the block whose lines (from ``i``) are blank or indented more than ``indent``."""
    while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > indent):
        i += 1
    return i


def _dedent(lines: list[str]) -> list[str]:
    width = min((_indent(x) for x in lines if x.strip()), default=0)
    return [x[width:] if x.strip() else "" for x in lines]


def _api_name(kind: str, arg: str) -> str:
    arg = arg.strip()
    if kind in ("cmdoption", "option", "describe", "envvar", "opcode"):
        return arg
    arg = re.sub(r"^(?:async|await|abstractmethod|classmethod|staticmethod)\s+", "", arg)
    return re.split(r"[\s(\[]", arg, maxsplit=1)[0].lstrip("@")


def paragraphs(lines: list[str], context: dict | None = None) -> list[str]:
    """Plain-text prose paragraphs of a block of reST lines (indentation relative to the block)."""
    context = {"module": "", "classes": []} if context is None else context
    lines = _dedent(lines)
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if _indent(line) > 0:  # block quote
            end = _block_end(lines, i, 0)
            out += paragraphs(lines[i:end], context)
            i = end
            continue
        m = _DIRECTIVE.match(line)
        if m:
            kind, arg = m.group(1), m.group(2)
            j = i + 1
            while j < len(lines) and lines[j].strip() and _indent(lines[j]) > 0 and \
                    not _OPTION.match(lines[j].strip()) and kind in API_DIRECTIVES:
                j += 1  # extra signature lines
            while j < len(lines) and lines[j].strip() and _OPTION.match(lines[j].strip()):
                j += 1  # directive options
            end = _block_end(lines, j, 0)
            body = lines[j:end]
            if kind in ("module", "currentmodule"):
                context["module"] = "" if arg.strip() == "None" else arg.strip()
            elif kind in API_DIRECTIVES:
                name = _api_name(kind, arg)
                if kind not in ("cmdoption", "option", "describe", "envvar", "opcode") and \
                        "." not in name:
                    prefix = context["classes"][-1] if context["classes"] else context["module"]
                    name = f"{prefix}.{name}" if prefix else name
                if kind in ("class", "exception"):
                    context["classes"].append(name)
                paras = paragraphs(body, context)
                if kind in ("class", "exception"):
                    context["classes"].pop()
                if paras:
                    paras[0] = f"{name}: {paras[0]}"
                out += paras
            elif kind in PROSE_DIRECTIVES:
                first = [] if kind in ("admonition", "topic") or not arg.strip() else [arg]
                out += paragraphs(first + _dedent(body), context)
            i = end
            continue
        if line.startswith(".."):  # comment, link target, footnote, substitution definition
            i = _block_end(lines, i + 1, 0)
            continue
        if _SIMPLE_TABLE_BORDER.match(line):
            j = i + 1
            while j < len(lines) and not (_SIMPLE_TABLE_BORDER.match(lines[j]) and
                                          (j + 1 >= len(lines) or not lines[j + 1].strip())):
                j += 1
            i = j + 1
            continue
        if _GRID_TABLE_BORDER.match(line) or line.startswith(">>>") or _is_adornment(line) or \
                _FIELD.match(line):
            while i < len(lines) and lines[i].strip():  # grid table, doctest, transition, field list
                i += 1
            continue
        b = _BULLET.match(line)
        if b:
            width = len(line) - len(b.group(2))
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) >= width):
                if not lines[j].strip() and (j + 1 >= len(lines) or _indent(lines[j + 1]) < width):
                    break
                j += 1
            item = [b.group(2)] + [x[width:] for x in lines[i + 1:j]]
            out += paragraphs(item, context)
            i = j
            continue
        # paragraph (or definition-list term, when directly followed by an indented line)
        j = i
        while j < len(lines) and lines[j].strip() and _indent(lines[j]) == 0:
            j += 1
        if j < len(lines) and lines[j].strip() and j == i + 1:  # definition list entry
            end = _block_end(lines, j, 0)
            defs = paragraphs(lines[j:end], context)
            term = inline(line)
            if defs:
                out += [f"{term}: {defs[0]}"] + defs[1:]
            i = end
            continue
        if j < len(lines) and lines[j].strip():  # paragraph followed by an indented block: quote it
            out += _paragraph(lines[i:j], out)
            i = j
            continue
        literal = lines[j - 1].rstrip().endswith("::")
        out += _paragraph(lines[i:j], out)
        i = j
        if literal:  # skip the literal block that follows
            while i < len(lines) and not lines[i].strip():
                i += 1
            i = _block_end(lines, i, 0) if i < len(lines) and _indent(lines[i]) > 0 else i
    return out


def _paragraph(raw: list[str], out: list[str]) -> list[str]:
    text = " ".join(x.strip() for x in raw)
    if text.startswith("**Source code:**"):
        return []
    if text.endswith("::"):  # "Example::" -> "Example:", "Example ::" -> "Example", "::" -> ""
        text = text[:-2].rstrip() if text[:-2].endswith(" ") or text == "::" else text[:-1]
    text = inline(text)
    return [text] if text else []


# --- pages -> papers ------------------------------------------------------------------------------


def paper_id(page: str) -> str:
    return "pydocs-" + page.replace("/", "-")


def build_paper(page: str, docs: Path) -> dict:
    sections = split_sections((docs / f"{page}.rst.txt").read_text(encoding="utf-8"))
    if len(sections) < 2 or sections[1][0] != 0:
        raise SystemExit(f"{page}: no page title found")
    context = {"module": "", "classes": []}
    paragraphs(sections[0][2], context)  # labels / module directive before the title
    title = title_text(sections[1][1])
    full_text = [{"section_name": INTRO_SECTION, "paragraphs": paragraphs(sections[1][2], context)}]
    path: list[str] = []
    for level, raw_title, body in sections[2:]:
        if level == 0:
            raise SystemExit(f"{page}: a second heading in the page-title style: {raw_title!r}")
        if level > len(path) + 1:
            raise SystemExit(f"{page}: heading {raw_title!r} skips a level")
        path = path[:level - 1] + [title_text(raw_title)]
        full_text.append({"section_name": " ::: ".join(path),
                          "paragraphs": paragraphs(body, context)})
    # the abstract: leading prose before the first subsection or, where there is none (Logging
    # HOWTO), of the first section that has prose; what is left of it stays a full_text section
    source = next((s for s in full_text if s["paragraphs"]), None)
    if source is None:
        raise SystemExit(f"{page}: no prose at all")
    abstract: list[str] = []
    while source["paragraphs"] and (not abstract or
                                    sum(len(p) + 1 for p in abstract) < ABSTRACT_MIN_CHARS):
        abstract.append(source["paragraphs"].pop(0))
    full_text = [s for s in full_text if s["paragraphs"]]
    names = [s["section_name"] for s in full_text]
    dupes = sorted(n for n, c in Counter(names).items() if c > 1)
    if dupes:
        raise SystemExit(f"{page}: duplicate section names {dupes}")
    return {"title": title, "abstract": " ".join(abstract), "full_text": full_text,
            "figures_and_tables": [], "qas": []}


# --- questions --------------------------------------------------------------------------------------


def load_questions(path: Path) -> list[dict]:
    """Authoring format: a JSON list of

    ``{"paper": id, "question": str, "answers": [annotation, ...]}`` with each annotation one of
    ``{"type": "extractive", "spans": [str, ...], "evidence": [ref, ...]}``,
    ``{"type": "abstractive", "answer": str, "evidence": [ref, ...]}``,
    ``{"type": "boolean", "yes_no": bool, "evidence": [ref, ...]}``,
    ``{"type": "unanswerable"}``; a ref is ``{"section": full section name, "contains": substring}``.
    """
    return json.loads(path.read_text(encoding="utf-8"))


def _sha16(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def _resolve(paper: dict, ref: dict, where: str) -> str:
    sections = [s for s in paper["full_text"] if s["section_name"] == ref["section"]]
    if not sections:
        raise SystemExit(f"{where}: no section named {ref['section']!r}")
    hits = [p for s in sections for p in s["paragraphs"] if ref["contains"] in p]
    if len(hits) != 1:
        raise SystemExit(f"{where}: evidence {ref['contains']!r} in section {ref['section']!r} "
                         f"matches {len(hits)} paragraphs (need exactly 1)")
    return hits[0]


def convert_question(paper: dict, q: dict) -> dict:
    qid = _sha16(f"{q['paper']}\n{q['question']}")
    where = f"question {q['question']!r} ({q['paper']})"
    answers = []
    if not q.get("answers"):
        raise SystemExit(f"{where}: no answers")
    for k, a in enumerate(q["answers"]):
        kind = a["type"]
        evidence = [_resolve(paper, ref, where) for ref in a.get("evidence", [])]
        if len(set(evidence)) != len(evidence):
            raise SystemExit(f"{where}: the same evidence paragraph is listed twice")
        answer = {"unanswerable": False, "extractive_spans": [], "yes_no": None,
                  "free_form_answer": "", "evidence": evidence, "highlighted_evidence": []}
        if kind == "unanswerable":
            if evidence:
                raise SystemExit(f"{where}: an unanswerable annotation has evidence")
            answer["unanswerable"] = True
        elif not evidence:
            raise SystemExit(f"{where}: a {kind} annotation has no evidence")
        elif kind == "extractive":
            spans = a["spans"]
            if not spans:
                raise SystemExit(f"{where}: extractive annotation without spans")
            for span in spans:
                if not any(span in p for p in evidence):
                    raise SystemExit(f"{where}: span {span!r} is not in its evidence paragraphs")
            answer["extractive_spans"] = list(spans)
            answer["highlighted_evidence"] = list(spans)
        elif kind == "abstractive":
            if not a["answer"].strip():
                raise SystemExit(f"{where}: empty abstractive answer")
            answer["free_form_answer"] = a["answer"]
        elif kind == "boolean":
            if not isinstance(a["yes_no"], bool):
                raise SystemExit(f"{where}: yes_no must be true or false")
            answer["yes_no"] = a["yes_no"]
        else:
            raise SystemExit(f"{where}: unknown answer type {kind!r}")
        answers.append({"answer": answer, "annotation_id": _sha16(f"{qid}:{k}"),
                        "worker_id": f"{WORKER}-{k + 1}"})
    return {"question": q["question"], "question_id": qid, "nlp_background": "",
            "topic_background": "", "paper_read": "", "search_query": "",
            "question_writer": WORKER, "answers": answers}


# --- output -----------------------------------------------------------------------------------------


def answer_type(answer: dict) -> str:
    """The evaluator's type of one annotation (same precedence as the official script)."""
    if answer["unanswerable"]:
        return "none"
    if answer["extractive_spans"]:
        return "extractive"
    if answer["free_form_answer"]:
        return "abstractive"
    return "boolean"


def summary(papers: dict) -> str:
    rows = [("paper", "sections", "paragraphs", "questions", "extr", "abstr", "bool", "none",
             "2 annot", "2-sec ev")]
    totals = Counter()
    for pid, p in sorted(papers.items()):
        kinds = Counter(answer_type(q["answers"][0]["answer"]) for q in p["qas"])
        two = sum(len(q["answers"]) > 1 for q in p["qas"])
        multi = sum(any(len({_section_of(p, e) for e in a["answer"]["evidence"]}) > 1
                        for a in q["answers"]) for q in p["qas"])
        row = Counter({"sections": len(p["full_text"]),
                       "paragraphs": sum(len(s["paragraphs"]) for s in p["full_text"]),
                       "questions": len(p["qas"]), "extractive": kinds["extractive"],
                       "abstractive": kinds["abstractive"], "boolean": kinds["boolean"],
                       "none": kinds["none"], "two": two, "multi": multi})
        totals.update(row)
        rows.append((pid, *(str(row[k]) for k in ("sections", "paragraphs", "questions", "extractive",
                                                   "abstractive", "boolean", "none", "two", "multi"))))
    rows.append(("TOTAL", *(str(totals[k]) for k in ("sections", "paragraphs", "questions",
                                                      "extractive", "abstractive", "boolean", "none",
                                                      "two", "multi"))))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if n == 0 else c.rjust(w)
                               for n, (c, w) in enumerate(zip(r, widths))) for r in rows)


def _section_of(paper: dict, paragraph: str) -> str:
    return next(s["section_name"] for s in paper["full_text"] if paragraph in s["paragraphs"])


def sources_md(marker: dict, papers: dict) -> str:
    lines = [
        "# Offline QASPER-format evaluation set: `pydocs_qasper.json`",
        "",
        f"{len(PAGES)} pages of the Python 3.11 documentation converted to the raw QASPER JSON layout",
        "(`{paper_id: {title, abstract, full_text, figures_and_tables, qas}}`), with questions",
        "written for this set (`data/qasper_offline/questions.json`).",
        "",
        "## Source",
        "",
        f"- Debian package `{marker.get('package')}`, version `{marker.get('version')}` "
        f"(`{marker.get('deb')}`, sha256 `{marker.get('sha256')}`).",
        "- Files: `usr/share/doc/python3.11/html/_sources/<page>.rst.txt`, fetched and unpacked by",
        "  `hf_treegen.train.prompts.python_docs_dir()` (`apt-get download` + `dpkg-deb -x`).",
        "",
        "| paper id | page | title | sections | paragraphs | questions |",
        "|---|---|---|---|---|---|",
    ]
    for page in PAGES:
        p = papers[paper_id(page)]
        lines.append(f"| `{paper_id(page)}` | `{page}.rst.txt` | {p['title']} | {len(p['full_text'])} "
                     f"| {sum(len(s['paragraphs']) for s in p['full_text'])} | {len(p['qas'])} |")
    lines += [
        "",
        "## Licence",
        "",
        "The page texts are from the Python 3.11 documentation, Copyright (c) Python Software",
        "Foundation; All Rights Reserved. They are used under the PSF License Agreement (PSF-2.0),",
        "whose full text is in the package's Debian `copyright` file",
        "(`usr/share/doc/python3.11-doc/copyright`, kept next to `_sources` in the corpus cache).",
        "As that licence asks of derivative works, the changes are summarised here: each page was",
        "converted to plain text (reST markup stripped, code blocks, doctests, tables, footnotes,",
        "version notes and see-also boxes removed) and split into sections and paragraphs as",
        "described below. The questions and answers are original to this repository.",
        "",
        "## Conversion",
        "",
        "Details are in the docstring of `scripts/build_offline_qasper.py`. In short: reST heading",
        "levels follow the order in which adornment styles first appear; section names join the",
        "heading path below the page title with `\" ::: \"`, as QASPER does; the abstract is the",
        f"leading prose before the first subsection (paragraphs up to at least {ABSTRACT_MIN_CHARS}",
        "characters) and any further prose there becomes a section named",
        f"`\"{INTRO_SECTION}\"` (a name added by the conversion; only the Regular Expression HOWTO has",
        "a real heading of that name). The Logging HOWTO has no prose before its first heading,",
        "so its abstract is the first paragraph of \"Basic Logging Tutorial\". Paragraphs are",
        "prose only; list items and definition-list entries are paragraphs of their own, and an",
        "API description (`.. function::`, `.. class::`, `.. cmdoption::`, ...) keeps its text",
        "with the object name prefixed to its first paragraph (`json.dumps: Serialize obj ...`).",
        "`figures_and_tables` is empty. Question ids are the first 16 hex digits of",
        "sha1(`paper_id + \"\\n\" + question`); evidence strings are exact paragraphs of",
        "`full_text`; `highlighted_evidence` holds the extractive spans; `worker_id` is",
        "`offline-author-<n>` for the n-th annotation of a question.",
        "",
        "## Rebuild",
        "",
        "```",
        ".venv/bin/python scripts/build_offline_qasper.py          # writes this folder",
        ".venv/bin/python scripts/build_offline_qasper.py --list   # print parsed pages only",
        "```",
        "",
        "On a fresh Debian/Ubuntu machine the docs are downloaded on first use (run `apt-get update`",
        "if apt cannot locate `python3.11-doc`). A different package version may change paragraphs;",
        "the build then fails loudly on any evidence reference that no longer matches exactly one",
        "paragraph.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the parsed pages and exit")
    parser.add_argument("--questions", type=Path, default=QUESTIONS)
    args = parser.parse_args(argv)
    docs = python_docs_dir()
    papers = {paper_id(page): build_paper(page, docs) for page in PAGES}
    if args.list:
        for pid, p in papers.items():
            print(f"##### {pid}: {p['title']}\nABSTRACT: {p['abstract']}\n")
            for s in p["full_text"]:
                print(f"=== {s['section_name']}")
                for n, para in enumerate(s["paragraphs"]):
                    print(f"[{n}] {para}")
                print()
        return 0
    seen: set[str] = set()
    for q in load_questions(args.questions):
        if q["paper"] not in papers:
            raise SystemExit(f"question {q['question']!r}: unknown paper {q['paper']!r}")
        qa = convert_question(papers[q["paper"]], q)
        if qa["question_id"] in seen:
            raise SystemExit(f"question {q['question']!r}: duplicate question in {q['paper']}")
        seen.add(qa["question_id"])
        papers[q["paper"]]["qas"].append(qa)
    marker = json.loads((docs.parent / MARKER).read_text(encoding="utf-8"))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    OUT_JSON.write_text(json.dumps(papers, sort_keys=True, indent=1, ensure_ascii=False) + "\n",
                        encoding="utf-8")
    OUT_SOURCES.write_text(sources_md(marker, papers), encoding="utf-8")
    loaded = json.loads(OUT_JSON.read_text(encoding="utf-8"))
    assert loaded == papers
    print(f"wrote {OUT_JSON.relative_to(REPO)} and {OUT_SOURCES.relative_to(REPO)}")
    print(summary(loaded))
    return 0


if __name__ == "__main__":
    sys.exit(main())
