"""Hierarchical RAG over QASPER: typed loading (raw release and Hub layouts) and document trees."""

from .doctree import (
    UNTITLED,
    DocNode,
    build_tree,
    copy_tree,
    corrupt_hierarchy,
    find_paragraph,
    iter_nodes,
    leaves,
    preview,
    section_path,
)
from .qasper import (
    OFFLINE_DATA_PATH,
    Answer,
    Paper,
    QasperFormatError,
    Question,
    Section,
    load_qasper,
    papers_from_hub_rows,
    papers_from_raw,
    papers_to_raw,
)

__all__ = [
    "OFFLINE_DATA_PATH",
    "UNTITLED",
    "Answer",
    "DocNode",
    "Paper",
    "QasperFormatError",
    "Question",
    "Section",
    "build_tree",
    "copy_tree",
    "corrupt_hierarchy",
    "find_paragraph",
    "iter_nodes",
    "leaves",
    "load_qasper",
    "papers_from_hub_rows",
    "papers_from_raw",
    "papers_to_raw",
    "preview",
    "section_path",
]
