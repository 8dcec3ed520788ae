"""Document trees for hierarchical RAG over QASPER papers.

:func:`build_tree` turns a :class:`~hf_treegen.rag.qasper.Paper` into nested :class:`DocNode` s:

* the root (``node_id "root"``, kind ``"root"``) is the paper: ``title`` is the paper title and
  ``text`` the abstract;
* QASPER's flat ``full_text`` encodes section paths in ``section_name`` with ``":::"`` (e.g.
  ``"Experiments ::: Datasets"``). Each name is split on ``":::"`` and its parts stripped (empty parts
  dropped); one section node (kind ``"section"``, ``text ""``) exists per distinct path prefix, created
  in first-appearance order, so a name that appears twice, or a parent that only appears as a prefix,
  maps to one node. Sections whose name is None/empty (or only separators) share one top-level node
  titled ``"(untitled)"``;
* every paragraph becomes a leaf (kind ``"paragraph"``) under its deepest section node, with ``text``
  exactly the paragraph string from the data (so QASPER evidence strings match by equality) and
  ``title`` ``"Paragraph k"`` (k counts from 1 within that section node).

Node ids are stable for a given paper: ``"root"``; sections ``"s<i>"`` for the i-th top-level section
(from 1) and ``"s<i>.<j>"`` ... for nested ones; paragraphs ``"p<n>"`` where n is the paragraph's
0-based index in ``paper.paragraphs()`` (document order).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal

from .qasper import Paper

__all__ = [
    "UNTITLED",
    "DocNode",
    "build_tree",
    "copy_tree",
    "corrupt_hierarchy",
    "find_paragraph",
    "iter_nodes",
    "leaves",
    "preview",
    "section_path",
]

UNTITLED = "(untitled)"
SEPARATOR = ":::"
NodeKind = Literal["root", "section", "paragraph"]


@dataclass
class DocNode:
    """A node of a paper's document tree: the root, a section (titled, with children) or a
    paragraph (a leaf whose ``text`` is the paragraph)."""

    node_id: str
    title: str
    kind: NodeKind
    text: str = ""
    children: list["DocNode"] = field(default_factory=list)

    def __repr__(self) -> str:  # children omitted: trees print unreadably otherwise
        return f"DocNode({self.node_id!r}, {self.kind}, {self.title!r}, {len(self.children)} children)"


def section_path(section_name: str | None) -> tuple[str, ...]:
    """``"A ::: B"`` -> ``("A", "B")``; parts are stripped, empty parts dropped; None/"" -> ``()``."""
    if not section_name:
        return ()
    return tuple(part.strip() for part in section_name.split(SEPARATOR) if part.strip())


def build_tree(paper: Paper) -> DocNode:
    """The document tree of ``paper`` (see the module docstring for the layout and the ids)."""
    root = DocNode(node_id="root", title=paper.title, kind="root", text=paper.abstract)
    # key: (True,) for the untitled node, (False, *path) for titled ones, so a section literally named
    # "(untitled)" stays distinct from the one for missing names
    nodes: dict[tuple, DocNode] = {}
    paragraph_counts: dict[str, int] = {}
    paragraph_index = 0

    def child_section(parent: DocNode, key: tuple, title: str) -> DocNode:
        node = nodes.get(key)
        if node is None:
            number = sum(1 for child in parent.children if child.kind == "section") + 1
            node_id = f"s{number}" if parent.kind == "root" else f"{parent.node_id}.{number}"
            node = DocNode(node_id=node_id, title=title, kind="section")
            parent.children.append(node)
            nodes[key] = node
        return node

    for section in paper.sections:
        path = section_path(section.name)
        if path:
            node = root
            for depth in range(1, len(path) + 1):
                node = child_section(node, (False, *path[:depth]), path[depth - 1])
        else:
            node = child_section(root, (True,), UNTITLED)
        for paragraph in section.paragraphs:
            count = paragraph_counts.get(node.node_id, 0) + 1
            paragraph_counts[node.node_id] = count
            node.children.append(
                DocNode(node_id=f"p{paragraph_index}", title=f"Paragraph {count}", kind="paragraph", text=paragraph)
            )
            paragraph_index += 1
    return root


def iter_nodes(node: DocNode) -> Iterator[DocNode]:
    """``node`` and all its descendants, depth first, parents before children, children in order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def leaves(node: DocNode) -> list[DocNode]:
    """The paragraph nodes under ``node`` (itself included if it is one), in tree order.

    Sections without paragraphs are childless too but are not returned. In a tree from
    :func:`build_tree` tree order equals document order unless a section name recurs non-adjacently.
    """
    return [current for current in iter_nodes(node) if current.kind == "paragraph"]


def find_paragraph(tree: DocNode, text: str) -> DocNode | None:
    """The first paragraph node (tree order) whose text equals ``text`` exactly, else None."""
    for current in iter_nodes(tree):
        if current.kind == "paragraph" and current.text == text:
            return current
    return None


def _preview_source(node: DocNode) -> str:
    if node.text:
        return node.text
    for leaf in leaves(node):
        if leaf.text:
            return leaf.text
    return ""


def preview(node: DocNode, tokenizer: Any = None, max_chars: int = 160, max_tokens: int | None = None) -> str:
    """A short whitespace-collapsed excerpt of ``node`` for candidate listings.

    The source is the node's own text (root: abstract; paragraph: the paragraph) or, when that is
    empty (sections), the text of its first paragraph descendant; ``""`` when there is none. The
    result has at most ``max_chars`` characters; when text is cut, it ends with ``"..."`` (counted in
    the limit) and the cut falls on a word boundary when one exists in the second half. With a
    ``tokenizer`` (Hugging Face, ``encode``/``decode``) the cut falls on a token boundary instead, and
    ``max_tokens`` additionally caps the excerpt's token count (needs a tokenizer).
    """
    if max_chars < 4:
        raise ValueError(f"max_chars must be at least 4, got {max_chars}")
    text = re.sub(r"\s+", " ", _preview_source(node)).strip()
    if tokenizer is None:
        if max_tokens is not None:
            raise ValueError("max_tokens needs a tokenizer")
        if len(text) <= max_chars:
            return text
        budget = max_chars - 3
        cut = text[:budget]
        space = cut.rfind(" ")
        if space >= budget // 2:
            cut = cut[:space]
        return cut.rstrip() + "..."
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    if len(text) <= max_chars and (max_tokens is None or len(ids) <= max_tokens):
        return text
    budget = max_chars - 3
    # longest token prefix that decodes within the character budget (binary search: decode length
    # is monotone in the prefix length for ordinary tokenizers)
    low, high = 0, len(ids) if max_tokens is None else min(len(ids), max_tokens)
    while low < high:
        middle = (low + high + 1) // 2
        if len(tokenizer.decode(ids[:middle]).strip()) <= budget:
            low = middle
        else:
            high = middle - 1
    return tokenizer.decode(ids[:low]).strip() + "..."


def copy_tree(node: DocNode) -> DocNode:
    """A deep copy of the tree structure (new DocNode objects; strings are shared)."""
    return DocNode(node.node_id, node.title, node.kind, node.text, [copy_tree(child) for child in node.children])


def corrupt_hierarchy(tree: DocNode, seed: int, fraction: float = 0.5) -> DocNode:
    """A copy of ``tree`` with false nesting, for the "is the hierarchy worth anything" ablation.

    Section nodes are visited in a seeded random order; up to ``max(1, round(fraction * n_sections))``
    of them are each moved, with their whole subtree, to become the last child of a randomly chosen
    *unrelated* section: one that is neither inside the moved subtree nor an ancestor of it (so never
    its current parent). Moves apply one after another on the evolving tree, and each section moves
    at most once, so every moved section ends under a parent it did not have; the result therefore
    differs from the input whenever at least one move was possible.

    What is kept: every node (same ``node_id``, ``title``, ``kind``, ``text``), hence every
    paragraph exactly once, always under the same immediate section (a paragraph's own section
    moves with it); the root; the relative order of the remaining children. Node ids are *not*
    renumbered, so selections on the corrupted tree map back to the original; they no longer
    describe the position, so do not show ids to a model in the ablation.

    A tree with no possible move (fewer than two sections, or a single chain of nested sections) comes
    back as an unchanged copy. The input tree is never modified. Same ``tree`` and ``seed`` give the
    same result.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    result = copy_tree(tree)
    parent_of: dict[int, DocNode] = {}
    for node in iter_nodes(result):
        for child in node.children:
            parent_of[id(child)] = node
    sections = [node for node in iter_nodes(result) if node.kind == "section"]
    if len(sections) < 2:
        return result
    rng = random.Random(seed)
    order = sections[:]
    rng.shuffle(order)
    wanted = max(1, round(fraction * len(sections)))
    moved = 0
    for section in order:
        if moved >= wanted:
            break
        inside = {id(node) for node in iter_nodes(section)}
        ancestors = set()
        current = parent_of.get(id(section))
        while current is not None:
            ancestors.add(id(current))
            current = parent_of.get(id(current))
        candidates = [node for node in sections if id(node) not in inside and id(node) not in ancestors]
        if not candidates:
            continue
        target = rng.choice(candidates)
        old_parent = parent_of[id(section)]
        old_parent.children = [child for child in old_parent.children if child is not section]
        target.children.append(section)
        parent_of[id(section)] = target
        moved += 1
    return result
