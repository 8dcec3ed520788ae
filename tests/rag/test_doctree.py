import json
from pathlib import Path

import pytest

from hf_treegen.rag import (
    UNTITLED,
    DocNode,
    Paper,
    Section,
    build_tree,
    corrupt_hierarchy,
    find_paragraph,
    iter_nodes,
    leaves,
    papers_from_raw,
    preview,
    section_path,
)

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def paper():
    raw = json.loads((FIXTURES / "qasper_raw.json").read_text(encoding="utf-8"))
    return papers_from_raw(raw)[0]


def _shape(node):
    """(id, title, kind, [children shapes]) without texts."""
    return (node.node_id, node.title, node.kind, [_shape(child) for child in node.children])


def _parents(tree):
    return {child.node_id: node.node_id for node in iter_nodes(tree) for child in node.children}


def test_section_path():
    assert section_path("Experiments ::: Datasets") == ("Experiments", "Datasets")
    assert section_path("A:::B ::: C") == ("A", "B", "C")
    assert section_path(None) == () and section_path("") == () and section_path(" ::: ") == ()


def test_tree_nesting_and_ids(paper):
    tree = build_tree(paper)
    assert tree.kind == "root" and tree.node_id == "root"
    assert tree.title == paper.title and tree.text == paper.abstract
    assert _shape(tree) == (
        "root", paper.title, "root", [
            ("s1", "Introduction", "section", [("p0", "Paragraph 1", "paragraph", []), ("p1", "Paragraph 2", "paragraph", [])]),
            ("s2", "Related Work", "section", [("p2", "Paragraph 1", "paragraph", [])]),
            ("s3", "Proposed Method", "section", [
                ("p3", "Paragraph 1", "paragraph", []),
                ("s3.1", "Polarity Function", "section", [("p4", "Paragraph 1", "paragraph", []), ("p5", "Paragraph 2", "paragraph", [])]),
                ("s3.2", "Discourse Relation-Based Event Pairs", "section", [
                    ("s3.2.1", "AL (Automatically Labeled Pairs)", "section", [("p6", "Paragraph 1", "paragraph", [])]),
                ]),
            ]),
            # a parent that only exists as a prefix ("Experiments:::Dataset", no spaces around :::)
            ("s4", "Experiments", "section", [("s4.1", "Dataset", "section", [("p7", "Paragraph 1", "paragraph", [])])]),
            # None and "" section names share one untitled node
            ("s5", UNTITLED, "section", [("p8", "Paragraph 1", "paragraph", []), ("p9", "Paragraph 2", "paragraph", [])]),
            ("s6", "Conclusion", "section", [("p10", "Paragraph 1", "paragraph", [])]),
        ],
    )
    # stable: a second build gives the same ids and structure
    assert _shape(build_tree(paper)) == _shape(tree)
    ids = [node.node_id for node in iter_nodes(tree)]
    assert len(ids) == len(set(ids))


def test_paragraph_leaves_match_data_exactly(paper):
    tree = build_tree(paper)
    leaf_nodes = leaves(tree)
    assert [leaf.text for leaf in leaf_nodes] == [text for _, text in paper.paragraphs()]
    assert [leaf.node_id for leaf in leaf_nodes] == [f"p{i}" for i in range(len(paper.paragraphs()))]
    assert all(leaf.kind == "paragraph" and leaf.children == [] for leaf in leaf_nodes)
    # the empty section is a childless section node, not a leaf
    empty = next(node for node in iter_nodes(tree) if node.node_id == "s3.2")
    assert leaves(empty) == [next(node for node in iter_nodes(tree) if node.node_id == "p6")]
    # evidence strings match paragraphs by equality (trailing whitespace included)
    for question in paper.questions:
        for answer in question.answers:
            for evidence in answer.evidence:
                node = find_paragraph(tree, evidence)
                if evidence.startswith("FLOAT SELECTED"):
                    assert node is None
                else:
                    assert node is not None and node.text == evidence
    assert find_paragraph(tree, paper.paragraphs()[1][1]).node_id == "p1"
    assert find_paragraph(tree, paper.paragraphs()[1][1].strip()) is None


def test_repeated_section_name_maps_to_one_node():
    paper = Paper(
        paper_id="x",
        title="T",
        abstract="A",
        sections=(
            Section("Method ::: Model", ("m1",)),
            Section("Results", ("r1",)),
            Section("Method", ("m0",)),
            Section("Method ::: Model", ("m2",)),
        ),
        figures_and_tables=(),
        questions=(),
    )
    tree = build_tree(paper)
    assert _shape(tree) == (
        "root", "T", "root", [
            ("s1", "Method", "section", [
                ("s1.1", "Model", "section", [("p0", "Paragraph 1", "paragraph", []), ("p3", "Paragraph 2", "paragraph", [])]),
                ("p2", "Paragraph 1", "paragraph", []),
            ]),
            ("s2", "Results", "section", [("p1", "Paragraph 1", "paragraph", [])]),
        ],
    )
    assert [leaf.text for leaf in leaves(tree)] == ["m1", "m2", "m0", "r1"]  # tree order


def test_literal_untitled_name_is_distinct_from_missing_name():
    paper = Paper("x", "T", "", (Section("", ("a",)), Section(UNTITLED, ("b",))), (), ())
    tree = build_tree(paper)
    assert [(child.node_id, child.title, len(child.children)) for child in tree.children] == [
        ("s1", UNTITLED, 1),
        ("s2", UNTITLED, 1),
    ]


def test_preview(paper):
    tree = build_tree(paper)
    text = preview(tree, max_chars=40)
    assert len(text) <= 40 and text.endswith("...") and paper.abstract.startswith(text[:-3])
    assert not text[:-3].endswith(" ")
    # a section previews its first paragraph descendant (whitespace collapsed)
    section = tree.children[0]
    assert preview(section) == paper.paragraphs()[0][1]
    assert preview(tree.children[2].children[2]) == paper.paragraphs()[6][1]  # s3.2 has only a subsection
    assert preview(DocNode("s9", "Empty", "section")) == ""
    long = DocNode("p0", "P", "paragraph", "word " * 100)
    assert len(preview(long)) <= 160


class _CharTokenizer:
    """Two characters per token."""

    def encode(self, text, add_special_tokens=False):
        return [text[i : i + 2] for i in range(0, len(text), 2)]

    def decode(self, ids):
        return "".join(ids)


def test_preview_with_tokenizer(paper):
    tree = build_tree(paper)
    text = preview(tree, tokenizer=_CharTokenizer(), max_chars=20)
    assert text == paper.abstract[:16].strip() + "..."
    text = preview(tree, tokenizer=_CharTokenizer(), max_chars=1000, max_tokens=5)
    assert text == paper.abstract[:10] + "..."
    short = DocNode("p0", "P", "paragraph", "short")
    assert preview(short, tokenizer=_CharTokenizer()) == "short"


def test_corrupt_hierarchy_keeps_paragraphs_and_changes_structure(paper):
    tree = build_tree(paper)
    before = _shape(tree)
    for seed in range(20):
        corrupted = corrupt_hierarchy(tree, seed)
        assert _shape(tree) == before  # input untouched
        texts = [leaf.text for leaf in leaves(corrupted)]
        assert sorted(texts) == sorted(text for _, text in paper.paragraphs())
        paragraph_ids = [leaf.node_id for leaf in leaves(corrupted)]
        assert len(paragraph_ids) == len(set(paragraph_ids)) == len(paper.paragraphs())
        # the same nodes, each once
        assert sorted(node.node_id for node in iter_nodes(corrupted)) == sorted(node.node_id for node in iter_nodes(tree))
        # each paragraph keeps its immediate section; at least one section changed its parent
        original, new = _parents(tree), _parents(corrupted)
        assert all(new[pid] == original[pid] for pid in paragraph_ids)
        moved = [sid for sid in original if not sid.startswith("p") and new[sid] != original[sid]]
        assert moved and _shape(corrupted) != before
        assert _shape(corrupt_hierarchy(tree, seed)) == _shape(corrupted)  # deterministic per seed
    assert len({repr(_shape(corrupt_hierarchy(tree, seed))) for seed in range(20)}) > 1


def test_corrupt_hierarchy_without_possible_moves_returns_copy():
    paper = Paper("x", "T", "", (Section("A", ("a",)), Section("A ::: B", ("b",))), (), ())
    tree = build_tree(paper)
    corrupted = corrupt_hierarchy(tree, 0)
    assert corrupted is not tree and _shape(corrupted) == _shape(tree)
