"""QASPER papers as typed, validated objects, from either the raw JSON release or the Hub layout.

Two layouts hold the same data:

* the raw release (``qasper-{train,dev,test}-v0.3.json``, read by the official evaluator): a dict
  ``paper_id -> {title, abstract, full_text: [{section_name, paragraphs}], figures_and_tables:
  [{file, caption}], qas: [{question, question_id, answers: [{answer: {...}, annotation_id,
  worker_id}], ...}]}``; ``figures_and_tables`` is missing from v0.1;
* the Hub parquet conversion (``datasets.load_dataset("allenai/qasper")``), one row per paper with
  ``id`` and every ``Sequence`` of dicts materialised as a dict of lists, e.g. ``full_text =
  {section_name: [..], paragraphs: [[..], ..]}`` and ``qas["answers"][i] = {answer: [{...}, ..],
  annotation_id: [..], worker_id: [..]}``.

:func:`papers_from_raw` and :func:`papers_from_hub_rows` turn both into the same :class:`Paper`
objects; :meth:`Paper.to_raw` / :func:`papers_to_raw` go back to the raw layout, so gold files for the
official evaluator can be written from papers whatever their source. Keys the classes do not carry
(``nlp_background``, ``search_query``, ``timestamp``, ...) are ignored and not written back.

Every field that is read is type checked; a malformed record raises :class:`QasperFormatError` naming
the paper and the field path in the layout it came from.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

__all__ = [
    "Answer",
    "OFFLINE_DATA_PATH",
    "Paper",
    "QasperFormatError",
    "Question",
    "Section",
    "load_qasper",
    "papers_from_hub_rows",
    "papers_from_raw",
    "papers_to_raw",
]

OFFLINE_DATA_PATH = Path(__file__).resolve().parent / "data" / "pydocs_qasper.json"
HUB_DATASET = "allenai/qasper"
_HUB_SPLITS = {"train": "train", "validation": "validation", "dev": "validation", "test": "test"}
_RAW_FILE_SPLITS = {"train": "train", "validation": "dev", "dev": "dev", "test": "test"}


class QasperFormatError(ValueError):
    """A QASPER record does not have the expected layout; the message names the paper and the field."""


# --------------------------------------------------------------------------------------------------
# data classes


@dataclass(frozen=True)
class Answer:
    """One annotator's answer to a question (raw ``answers[j]``: the ``answer`` dict plus its ids)."""

    unanswerable: bool
    extractive_spans: tuple[str, ...]
    yes_no: bool | None
    free_form_answer: str
    evidence: tuple[str, ...]
    highlighted_evidence: tuple[str, ...]
    annotation_id: str
    worker_id: str

    def to_raw(self) -> dict[str, Any]:
        return {
            "answer": {
                "unanswerable": self.unanswerable,
                "extractive_spans": list(self.extractive_spans),
                "yes_no": self.yes_no,
                "free_form_answer": self.free_form_answer,
                "evidence": list(self.evidence),
                "highlighted_evidence": list(self.highlighted_evidence),
            },
            "annotation_id": self.annotation_id,
            "worker_id": self.worker_id,
        }


@dataclass(frozen=True)
class Question:
    question_id: str
    question: str
    answers: tuple[Answer, ...]

    def to_raw(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "question_id": self.question_id,
            "answers": [answer.to_raw() for answer in self.answers],
        }


@dataclass(frozen=True)
class Section:
    """One ``full_text`` entry. ``name`` keeps the ``" ::: "``-joined path; it is ``""`` when the raw
    ``section_name`` is None."""

    name: str
    paragraphs: tuple[str, ...]


@dataclass(frozen=True)
class Paper:
    """One QASPER paper, whichever layout it was read from: title, abstract, sections (name and
    paragraphs), figure and table captions, and its questions."""

    paper_id: str
    title: str
    abstract: str
    sections: tuple[Section, ...]
    figures_and_tables: tuple[tuple[str, str], ...]  # (file, caption)
    questions: tuple[Question, ...]

    def paragraphs(self) -> list[tuple[str, str]]:
        """``(section name, paragraph)`` for every paragraph of ``full_text``, in document order."""
        return [(section.name, paragraph) for section in self.sections for paragraph in section.paragraphs]

    def to_raw(self) -> dict[str, Any]:
        """The raw-release dict for this paper (the value under its id in ``qasper-*-v0.3.json``).

        ``section_name`` is written as the stored name, so a raw ``None`` comes back as ``""``;
        ``figures_and_tables`` is always written (empty for v0.1 data); ``qas`` entries carry only
        ``question``, ``question_id`` and ``answers``, which is all the official evaluator reads.
        """
        return {
            "title": self.title,
            "abstract": self.abstract,
            "full_text": [
                {"section_name": section.name, "paragraphs": list(section.paragraphs)} for section in self.sections
            ],
            "figures_and_tables": [{"file": file, "caption": caption} for file, caption in self.figures_and_tables],
            "qas": [question.to_raw() for question in self.questions],
        }


def papers_to_raw(papers: Iterable[Paper]) -> dict[str, dict[str, Any]]:
    """The raw-release top level (``paper_id -> paper dict``), e.g. to ``json.dump`` a gold file."""
    out: dict[str, dict[str, Any]] = {}
    for paper in papers:
        if paper.paper_id in out:
            raise ValueError(f"duplicate paper id {paper.paper_id!r}")
        out[paper.paper_id] = paper.to_raw()
    return out


# --------------------------------------------------------------------------------------------------
# type checking helpers: ``where`` is the paper label, ``path`` the field path in the source layout


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _fail(where: str, path: str, expected: str, value: Any) -> QasperFormatError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return QasperFormatError(f"{where}: {path} must be {expected}, got {shown} ({_type_name(value)})")


def _str(value: Any, where: str, path: str) -> str:
    if not isinstance(value, str):
        raise _fail(where, path, "a string", value)
    return value


def _bool(value: Any, where: str, path: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(where, path, "bool", value)
    return value


def _optional_bool(value: Any, where: str, path: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise _fail(where, path, "bool or null", value)
    return value


def _list(value: Any, where: str, path: str) -> list:
    if not isinstance(value, (list, tuple)):
        raise _fail(where, path, "a list", value)
    return list(value)


def _dict(value: Any, where: str, path: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise _fail(where, path, "a dict", value)
    return value


def _str_tuple(value: Any, where: str, path: str) -> tuple[str, ...]:
    items = _list(value, where, path)
    return tuple(_str(item, where, f"{path}[{i}]") for i, item in enumerate(items))


def _key(record: Mapping, key: str, where: str, path: str) -> Any:
    if key not in record:
        raise QasperFormatError(f"{where}: {path}.{key} is missing" if path else f"{where}: {key} is missing")
    return record[key]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _answer_fields(answer: Any, where: str, path: str) -> dict[str, Any]:
    """Validate the inner answer dict (same keys in both layouts)."""
    answer = _dict(answer, where, path)
    get = lambda key: _key(answer, key, where, path)  # noqa: E731
    return {
        "unanswerable": _bool(get("unanswerable"), where, f"{path}.unanswerable"),
        "extractive_spans": _str_tuple(get("extractive_spans"), where, f"{path}.extractive_spans"),
        "yes_no": _optional_bool(get("yes_no"), where, f"{path}.yes_no"),
        "free_form_answer": _str(get("free_form_answer"), where, f"{path}.free_form_answer"),
        "evidence": _str_tuple(get("evidence"), where, f"{path}.evidence"),
        "highlighted_evidence": _str_tuple(get("highlighted_evidence"), where, f"{path}.highlighted_evidence"),
    }


def _columns(record: Any, keys: tuple[str, ...], where: str, path: str) -> tuple[list, ...]:
    """Hub dict-of-lists: the named columns, each a list, all of one length."""
    record = _dict(record, where, path)
    columns = tuple(_list(_key(record, key, where, path), where, _join(path, key)) for key in keys)
    lengths = {len(column) for column in columns}
    if len(lengths) > 1:
        detail = ", ".join(f"{_join(path, key)} has {len(column)}" for key, column in zip(keys, columns))
        raise QasperFormatError(f"{where}: {path} columns must have one length (Hub dict-of-lists layout); {detail}")
    return columns


# --------------------------------------------------------------------------------------------------
# raw layout


def _paper_from_raw(paper_id: str, record: Any) -> Paper:
    where = f"paper {paper_id}"
    record = _dict(record, where, "<paper>")
    title = _str(_key(record, "title", where, ""), where, "title")
    abstract = _str(_key(record, "abstract", where, ""), where, "abstract")

    sections = []
    for i, section in enumerate(_list(_key(record, "full_text", where, ""), where, "full_text")):
        path = f"full_text[{i}]"
        section = _dict(section, where, path)
        name = _key(section, "section_name", where, path)
        if name is not None and not isinstance(name, str):
            raise _fail(where, f"{path}.section_name", "a string or null", name)
        paragraphs = _str_tuple(_key(section, "paragraphs", where, path), where, f"{path}.paragraphs")
        sections.append(Section(name=name or "", paragraphs=paragraphs))

    figures = []
    for i, figure in enumerate(_list(record.get("figures_and_tables", []), where, "figures_and_tables")):
        path = f"figures_and_tables[{i}]"
        figure = _dict(figure, where, path)
        figures.append(
            (
                _str(_key(figure, "file", where, path), where, f"{path}.file"),
                _str(_key(figure, "caption", where, path), where, f"{path}.caption"),
            )
        )

    questions = []
    for i, qa in enumerate(_list(_key(record, "qas", where, ""), where, "qas")):
        path = f"qas[{i}]"
        qa = _dict(qa, where, path)
        answers = []
        for j, entry in enumerate(_list(_key(qa, "answers", where, path), where, f"{path}.answers")):
            apath = f"{path}.answers[{j}]"
            entry = _dict(entry, where, apath)
            answers.append(
                Answer(
                    **_answer_fields(_key(entry, "answer", where, apath), where, f"{apath}.answer"),
                    annotation_id=_str(_key(entry, "annotation_id", where, apath), where, f"{apath}.annotation_id"),
                    worker_id=_str(_key(entry, "worker_id", where, apath), where, f"{apath}.worker_id"),
                )
            )
        questions.append(
            Question(
                question_id=_str(_key(qa, "question_id", where, path), where, f"{path}.question_id"),
                question=_str(_key(qa, "question", where, path), where, f"{path}.question"),
                answers=tuple(answers),
            )
        )
    return Paper(
        paper_id=paper_id,
        title=title,
        abstract=abstract,
        sections=tuple(sections),
        figures_and_tables=tuple(figures),
        questions=tuple(questions),
    )


def papers_from_raw(data: Mapping[str, Any]) -> list[Paper]:
    """Papers from the raw release layout (``paper_id -> paper dict``), in the mapping's order."""
    if not isinstance(data, Mapping):
        raise QasperFormatError(
            f"raw QASPER data must be a dict of paper_id -> paper, got {_type_name(data)}"
            + (" (a list: is this the Hub layout? use papers_from_hub_rows)" if isinstance(data, list) else "")
        )
    papers = []
    for paper_id, record in data.items():
        if not isinstance(paper_id, str):
            raise QasperFormatError(f"raw QASPER paper ids must be strings, got {paper_id!r}")
        papers.append(_paper_from_raw(paper_id, record))
    return papers


# --------------------------------------------------------------------------------------------------
# Hub layout


def _paper_from_hub_row(row: Any, index: int) -> Paper:
    where = f"row {index}"
    row = _dict(row, where, "<row>")
    paper_id = _str(_key(row, "id", where, ""), where, "id")
    where = f"paper {paper_id}"
    title = _str(_key(row, "title", where, ""), where, "title")
    abstract = _str(_key(row, "abstract", where, ""), where, "abstract")

    names, paragraph_lists = _columns(_key(row, "full_text", where, ""), ("section_name", "paragraphs"), where, "full_text")
    sections = []
    for i, (name, paragraphs) in enumerate(zip(names, paragraph_lists)):
        if name is not None and not isinstance(name, str):
            raise _fail(where, f"full_text.section_name[{i}]", "a string or null", name)
        sections.append(Section(name=name or "", paragraphs=_str_tuple(paragraphs, where, f"full_text.paragraphs[{i}]")))

    figures = []
    if row.get("figures_and_tables") is not None:
        files, captions = _columns(row["figures_and_tables"], ("file", "caption"), where, "figures_and_tables")
        for i, (file, caption) in enumerate(zip(files, captions)):
            figures.append(
                (_str(file, where, f"figures_and_tables.file[{i}]"), _str(caption, where, f"figures_and_tables.caption[{i}]"))
            )

    question_texts, question_ids, answer_groups = _columns(
        _key(row, "qas", where, ""), ("question", "question_id", "answers"), where, "qas"
    )
    questions = []
    for i, (text, question_id, group) in enumerate(zip(question_texts, question_ids, answer_groups)):
        gpath = f"qas.answers[{i}]"
        inner, annotation_ids, worker_ids = _columns(group, ("answer", "annotation_id", "worker_id"), where, gpath)
        answers = tuple(
            Answer(
                **_answer_fields(answer, where, f"{gpath}.answer[{j}]"),
                annotation_id=_str(annotation_id, where, f"{gpath}.annotation_id[{j}]"),
                worker_id=_str(worker_id, where, f"{gpath}.worker_id[{j}]"),
            )
            for j, (answer, annotation_id, worker_id) in enumerate(zip(inner, annotation_ids, worker_ids))
        )
        questions.append(
            Question(
                question_id=_str(question_id, where, f"qas.question_id[{i}]"),
                question=_str(text, where, f"qas.question[{i}]"),
                answers=answers,
            )
        )
    return Paper(
        paper_id=paper_id,
        title=title,
        abstract=abstract,
        sections=tuple(sections),
        figures_and_tables=tuple(figures),
        questions=tuple(questions),
    )


def papers_from_hub_rows(rows: Iterable[Mapping[str, Any]]) -> list[Paper]:
    """Papers from Hub ``allenai/qasper`` rows (one paper per row, dict-of-lists fields), in row order.

    ``rows`` is any iterable of dicts, e.g. a ``datasets.Dataset`` split. A missing or None
    ``figures_and_tables`` column gives no figures. Two rows with one id raise QasperFormatError.
    """
    if isinstance(rows, Mapping):
        raise QasperFormatError(
            "Hub QASPER rows must be an iterable of row dicts, got a dict "
            "(is this the raw release layout? use papers_from_raw)"
        )
    papers, seen = [], set()
    for index, row in enumerate(rows):
        paper = _paper_from_hub_row(row, index)
        if paper.paper_id in seen:
            raise QasperFormatError(f"paper {paper.paper_id}: id appears in more than one row (row {index})")
        seen.add(paper.paper_id)
        papers.append(paper)
    return papers


# --------------------------------------------------------------------------------------------------
# loading


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _hub_offline_requested() -> bool:
    return _env_true("HF_HUB_OFFLINE") or _env_true("HF_DATASETS_OFFLINE")


_UNREACHABLE_HINTS = ("offline", "connect", "couldn't reach", "could not reach", "not cached", "timed out", "network")


def _looks_unreachable(error: BaseException) -> bool:
    """True for errors that mean the Hub (or the cached copy of the dataset) could not be reached."""
    kinds: list[type] = [ConnectionError, TimeoutError]
    try:
        import httpx

        kinds.append(httpx.TransportError)
    except ImportError:  # pragma: no cover
        pass
    try:
        import requests

        kinds.append(requests.exceptions.ConnectionError)
        kinds.append(requests.exceptions.Timeout)
    except ImportError:  # pragma: no cover
        pass
    try:
        from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

        kinds.extend([LocalEntryNotFoundError, OfflineModeIsEnabled])
    except ImportError:  # pragma: no cover
        pass
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, tuple(kinds)):
            return True
        if any(hint in str(current).lower() for hint in _UNREACHABLE_HINTS):
            return True
        current = current.__cause__ or current.__context__
    return False


def _unreachable(split: str, detail: str) -> RuntimeError:
    return RuntimeError(
        f"The Hugging Face Hub is unreachable, so {HUB_DATASET} (split {split!r}) cannot be loaded ({detail}). "
        f"Use load_qasper(split, source='offline') for the bundled offline set, or pass the path to the raw "
        f"JSON release, e.g. load_qasper(source='/path/to/qasper-dev-v0.3.json') "
        f"(from qasper-train-dev-v0.3.tgz / qasper-test-and-evaluator-v0.3.tgz)."
    )


def _load_hub(split: str) -> list[Paper]:
    hub_split = _HUB_SPLITS[split]
    from ..extras import require

    datasets = require("datasets", "rag", "load_qasper(source='hub')")

    offline = _hub_offline_requested() or bool(getattr(datasets.config, "HF_HUB_OFFLINE", False))
    patched: list[tuple[Any, str, Any]] = []
    if offline:
        # datasets / huggingface_hub read the offline variables at import time; an environment set
        # afterwards (e.g. by a test) must still keep every request off the network, so the flags are
        # forced on for this call. A copy already in the datasets cache still loads.
        import huggingface_hub.constants as hub_constants

        for module, name in ((datasets.config, "HF_HUB_OFFLINE"), (datasets.config, "HF_DATASETS_OFFLINE"), (hub_constants, "HF_HUB_OFFLINE")):
            if hasattr(module, name):
                patched.append((module, name, getattr(module, name)))
                setattr(module, name, True)
    try:
        dataset = datasets.load_dataset(HUB_DATASET, split=hub_split)
    except Exception as error:
        if offline:
            raise _unreachable(hub_split, f"offline mode is set (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) and no cached copy loaded: {type(error).__name__}") from error
        if _looks_unreachable(error):
            raise _unreachable(hub_split, f"{type(error).__name__}: {error}") from error
        raise
    finally:
        for module, name, value in patched:
            setattr(module, name, value)
    return papers_from_hub_rows(dataset)


def _load_raw_path(path: Path, split: str) -> list[Paper]:
    if path.is_dir():
        key = _RAW_FILE_SPLITS.get(split)
        candidates = sorted(path.glob(f"qasper-{key}-v*.json")) if key else []
        if not candidates:
            raise FileNotFoundError(f"no qasper-{key or split}-v*.json for split {split!r} in directory {path}")
        path = candidates[-1]
    if not path.is_file():
        raise FileNotFoundError(f"QASPER raw JSON not found: {path}")
    try:
        with path.open(encoding="utf-8") as handle:
            data = json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise QasperFormatError(f"{path} is not valid UTF-8 JSON ({err}); is the download complete?") from err
    try:
        return papers_from_raw(data)
    except QasperFormatError as err:
        raise QasperFormatError(f"{path}: {err}") from err


def load_qasper(split: str = "validation", source: str | os.PathLike = "hub") -> list[Paper]:
    """Load one QASPER split as a list of :class:`Paper`.

    ``source``:

    * ``"hub"`` (default): ``datasets.load_dataset("allenai/qasper", split=...)``; ``split`` is
      ``"train"``, ``"validation"`` (alias ``"dev"``) or ``"test"``. If the Hub cannot be reached
      (offline mode via ``HF_HUB_OFFLINE=1`` / ``HF_DATASETS_OFFLINE=1`` without a cached copy, or a
      connection error) a RuntimeError says so and points to the alternatives below.
    * ``"offline"``: the bundled offline set ``hf_treegen/rag/data/pydocs_qasper.json`` (raw QASPER
      layout, built by ``scripts/build_offline_qasper.py``). It has a single split, so ``split`` (any
      of the names above) is ignored.
    * any other string or path: a raw release JSON file (e.g. ``qasper-dev-v0.3.json``), loaded as is,
      with ``split`` (any of the names above) ignored; or a directory holding the release files, where ``split`` picks
      ``qasper-{train,dev,test}-v*.json`` (``validation`` maps to ``dev``).
    """
    if split not in _HUB_SPLITS:  # checked for every source, so a typo is never silently ignored
        raise ValueError(f"unknown QASPER split {split!r}; use one of 'train', 'validation' (or 'dev'), 'test'")
    if isinstance(source, str) and source == "hub":
        return _load_hub(split)
    if isinstance(source, str) and source == "offline":
        if not OFFLINE_DATA_PATH.is_file():
            raise FileNotFoundError(
                f"the bundled offline QASPER set {OFFLINE_DATA_PATH} does not exist yet; build it with "
                f"`python scripts/build_offline_qasper.py`"
            )
        return _load_raw_path(OFFLINE_DATA_PATH, split)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be 'hub', 'offline' or a path, got {_type_name(source)}")
    return _load_raw_path(Path(source), split)
