"""Hierarchical retrieval: an LLM walks a paper's section tree, choosing b of k entries per round.

    retriever = HierarchicalRetriever(model, tokenizer, interface="compiled", k=6, b=2, budget_tokens=1000)
    found = retriever.retrieve(tree, question)       # Retrieval: evidence, rounds, latency, failures
    answer = retriever.answer(question, found.evidence)

Each round shows the first ``k`` frontier entries (title plus a short preview) as ``[1] .. [k]`` and
asks for ``b`` of them. A chosen paragraph becomes evidence; a chosen section is opened (its children
go to the front of the frontier, so the walk goes deeper where it chose to). The walk stops when the
evidence reaches the token budget, the frontier is empty or ``max_rounds`` is reached.

Five selection interfaces share the prompt:

    compiled   CompiledChoiceProcessor: prefill + one tree-causal probe, same choice as serial
    serial     stock generate() with the serial constrained processor
    chunked    one forward per decision
    unary      top-b of the first-slot scores (history ignored)
    json       free-form generation of {"sections": [..]}, parsed; failures are classified as
               syntax, unknown identifier or wrong cardinality, and never stop the run
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..choice import ChoiceGrammar, chunked_select, compiled_select, serial_select
from ..choice.baselines import unary_select
from ..target import stock_generate
from .doctree import DocNode, leaves, preview

INTERFACES = ("compiled", "serial", "chunked", "unary", "json")
JSON_MAX_NEW_TOKENS = 40


@dataclass
class RoundRecord:
    candidates: list[str]  # node ids shown, in label order
    chosen: list[str]  # node ids chosen
    forwards: int
    seconds: float
    failure: str | None = None  # json only: syntax | unknown identifier | wrong cardinality
    serial_chosen: list[str] | None = None  # what serial chose on the same prompt (when checked)
    note: str | None = None
    added: int = 0  # paragraphs this round added to the evidence


@dataclass
class Retrieval:
    """What one walk gathered: the evidence paragraphs in order, the running token count after each,
    and one record per selection round; ``within(budget)`` cuts it to a smaller budget."""

    evidence: list[str]  # paragraph texts in the order they were gathered
    evidence_tokens: list[int]  # running token count after each paragraph
    rounds: list[RoundRecord] = field(default_factory=list)

    @property
    def control_seconds(self) -> float:
        return sum(r.seconds for r in self.rounds)

    @property
    def forwards(self) -> int:
        return sum(r.forwards for r in self.rounds)

    @property
    def failures(self) -> list[str]:
        return [r.failure for r in self.rounds if r.failure]

    def within(self, budget_tokens: int) -> "Retrieval":
        """The walk as it would have stopped at a smaller budget (the choices do not depend on it)."""
        before = [0, *self.evidence_tokens][: len(self.evidence_tokens)]  # running total before each paragraph
        kept = sum(1 for t in before if t < budget_tokens)
        crossed = kept > 0 and self.evidence_tokens[kept - 1] >= budget_tokens
        rounds, added = [], 0
        for r in self.rounds:
            rounds.append(r)
            added += r.added
            if crossed and added >= kept:
                break
        return Retrieval(self.evidence[:kept], self.evidence_tokens[:kept], rounds)


class HierarchicalRetriever:
    """Walks a paper's document tree for a question, choosing ``b`` of the first ``k`` frontier entries
    per round through ``interface`` (compiled, serial, chunked, unary or json) until the evidence
    reaches ``budget_tokens``, the frontier is empty or ``max_rounds`` is reached (see the module
    docstring). ``retrieve(tree, question)`` returns a :class:`Retrieval`."""

    def __init__(self, model, tokenizer, interface: str = "compiled", k: int = 6, b: int = 2,
                 budget_tokens: int = 1000, max_rounds: int = 32, preview_chars: int = 120,
                 check_against_serial: bool = False):
        if interface not in INTERFACES:
            raise ValueError(f"unknown interface {interface!r}; choose from {', '.join(INTERFACES)}.")
        if k < 1 or b < 1:
            raise ValueError(f"k and b must be positive, got k={k}, b={b}.")
        if b > k:
            raise ValueError(f"b={b} is larger than k={k}: a round cannot choose more entries than it shows.")
        self.model, self.tokenizer, self.interface = model, tokenizer, interface
        self.k, self.b, self.budget_tokens, self.max_rounds = k, b, budget_tokens, max_rounds
        self.preview_chars, self.check_against_serial = preview_chars, check_against_serial
        self._grammars: dict[tuple[int, int], ChoiceGrammar] = {}

    # ---------------------------------------------------------------------------------- walking
    def retrieve(self, tree: DocNode, question: str,
                 on_round: Callable[[int, RoundRecord], None] | None = None) -> Retrieval:
        """Walk ``tree`` for ``question``; ``on_round(rounds_so_far, record)`` follows every selection round."""
        frontier = list(tree.children)
        found = Retrieval([], [])
        used = 0
        while frontier and used < self.budget_tokens and len(found.rounds) < self.max_rounds:
            candidates = frontier[: self.k]
            record = self._choose(tree, question, candidates)
            found.rounds.append(record)
            if on_round is not None:
                on_round(len(found.rounds), record)
            chosen = [c for c in candidates if c.node_id in record.chosen]
            if not chosen:  # a json failure with nothing usable: the walk cannot continue
                break
            frontier = [n for n in frontier if n not in chosen]
            opened = []
            for node in chosen:
                if node.kind == "paragraph":
                    if used < self.budget_tokens:
                        used += len(self.tokenizer(node.text, add_special_tokens=False)["input_ids"])
                        found.evidence.append(node.text)
                        found.evidence_tokens.append(used)
                        record.added += 1
                else:
                    opened.extend(node.children)
            frontier = opened + frontier
        return found

    def _choose(self, tree: DocNode, question: str, candidates: list[DocNode]) -> RoundRecord:
        ids = [c.node_id for c in candidates]
        b = min(self.b, len(candidates))
        if len(candidates) <= b:  # nothing to decide: take them all, no model call
            return RoundRecord(ids, ids, 0, 0.0, note="frontier not larger than b")
        prompt = self._render(tree, question, candidates, b)
        if self.interface == "json":
            record = self._choose_json(prompt, candidates, b)
        else:
            grammar = self._grammar(len(candidates), b)
            run = {"compiled": compiled_select, "serial": serial_select, "chunked": chunked_select,
                   "unary": unary_select}[self.interface]
            result = run(self.model, prompt, grammar)
            record = RoundRecord(ids, [ids[i] for i in result.indices], result.forwards, result.seconds)
        if self.check_against_serial:
            serial = serial_select(self.model, self._render(tree, question, candidates, b, json_format=False),
                                   self._grammar(len(candidates), b))
            record.serial_chosen = [ids[i] for i in serial.indices]
        return record

    def _grammar(self, k: int, b: int) -> ChoiceGrammar:
        if (k, b) not in self._grammars:
            self._grammars[(k, b)] = ChoiceGrammar(self.tokenizer, [f"[{i + 1}]" for i in range(k)], b)
        return self._grammars[(k, b)]

    # ---------------------------------------------------------------------------------- prompts
    def _render(self, tree: DocNode, question: str, candidates: list[DocNode], b: int,
                json_format: bool | None = None) -> torch.Tensor:
        json_format = self.interface == "json" if json_format is None else json_format
        lines = []
        for i, node in enumerate(candidates, start=1):
            kind = "section" if node.kind == "section" else "paragraph"
            lines.append(f"[{i}] ({kind}) {node.title}: {preview(node, max_chars=self.preview_chars)}")
        if json_format:
            ask = (f'Reply with JSON only, in the form {{"sections": [numbers]}}, listing exactly {b} '
                   f'entry numbers, most relevant first.')
        else:
            ask = f"Reply with the labels of the {b} most relevant entries, most relevant first, separated by commas."
        text = (f"Paper: {tree.title}\nQuestion: {question}\n\nWhich entries most likely contain the answer?\n"
                + "\n".join(lines) + "\n\n" + ask)
        return self.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                  return_tensors="pt", return_dict=True)["input_ids"].to(self.model.device)

    # ------------------------------------------------------------------------------------- json
    @torch.no_grad()
    def _choose_json(self, prompt: torch.Tensor, candidates: list[DocNode], b: int) -> RoundRecord:
        ids = [c.node_id for c in candidates]
        generate = stock_generate(self.model)
        start = time.perf_counter()
        out = generate(prompt, max_new_tokens=JSON_MAX_NEW_TOKENS, do_sample=False,
                       pad_token_id=self.tokenizer.eos_token_id)
        seconds = time.perf_counter() - start
        new = out[0, prompt.shape[1]:]
        numbers, failure = parse_json_selection(self.tokenizer.decode(new, skip_special_tokens=True), len(ids), b)
        return RoundRecord(ids, [ids[n - 1] for n in numbers], int(new.numel()), seconds, failure=failure)

    # ----------------------------------------------------------------------------------- reading
    def answer(self, question: str, evidence: list[str], max_new_tokens: int = 24) -> str:
        return answer_from_evidence(self.model, self.tokenizer, question, evidence, max_new_tokens)


@torch.no_grad()
def answer_from_evidence(model, tokenizer, question: str, evidence: list[str], max_new_tokens: int = 24) -> str:
    """The reader: greedy stock generate() answering ``question`` from the evidence paragraphs, as given."""
    text = reader_request(question, evidence)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)["input_ids"].to(model.device)
    out = stock_generate(model)(ids, max_new_tokens=max_new_tokens, do_sample=False,
                                pad_token_id=tokenizer.eos_token_id)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True).strip()


def reader_request(question: str, evidence: list[str]) -> str:
    """What the reader is asked: the evidence paragraphs, the question and how to answer."""
    context = "\n\n".join(evidence) if evidence else "(no evidence found)"
    return (f"Evidence:\n{context}\n\nQuestion: {question}\nAnswer briefly from the evidence. If the evidence "
            f"does not answer it, reply \"Unanswerable\". For yes/no questions reply Yes or No.")


def parse_json_selection(text: str, k: int, b: int) -> tuple[list[int], str | None]:
    """Entry numbers (1-based, distinct, valid, at most b) from a JSON reply, and the failure class."""
    match = re.search(r"\{.*?\}", text, flags=re.S)
    try:
        data = json.loads(match.group(0)) if match else None
    except json.JSONDecodeError:
        data = None
    values = data.get("sections") if isinstance(data, dict) else None
    if not isinstance(values, list):
        return [], "syntax"
    numbers, failure = [], None
    for value in values:
        number = _as_entry_number(value)
        if number is None or not 1 <= number <= k:
            failure = "unknown identifier"
        elif number not in numbers:
            numbers.append(number)
    if failure is None and len(numbers) != b:
        failure = "wrong cardinality"
    return numbers[:b], failure


def _as_entry_number(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        m = re.fullmatch(r"\s*\[?(\d+)\]?\s*", value)
        return int(m.group(1)) if m else None
    return None


def leaf_count(tree: DocNode) -> int:
    return len(leaves(tree))
