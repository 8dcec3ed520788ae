"""A stream of requests served one after another, as a server answers them: stock generate() on packed
kernels (the strongest plain decoding here), ``auto`` with the drafter's own datastore, and ``auto``
with one :class:`~hf_treegen.LearningDatastore` shared by the whole stream (its base: the drafter's
datastore), interleaved request by request. Greedy, so every output can be checked against stock's.

Workloads (chat-templated):

    fresh      every built-in prompt once (open requests the store has never seen)
    repeated   a pool of built-in prompts, each asked several times in a seeded order (a prompt family
               asked again)
    rag        questions about the bundled QASPER-format papers, paper by paper, each answered from its
               BM25 evidence with the RAG reader's request (answers over the same paper)
    code-edit  one edit of a given file per request, every edit of one file before the next file's
               (``hf_treegen/data/prompts/workloads.json``)
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from ..generation.options import LookupOptions
from ..learning_datastore import LearningDatastore
from ..target import packed_linears
from ..prompt_data import prompt_table
from .harness import _timed
from .prompts import builtin_prompts

WORKLOADS = ("fresh", "repeated", "rag", "code-edit")
RAG_EVIDENCE_TOKENS = 384  # the BM25 evidence a rag request carries (the RAG showcase's budgets are 256-1024)
METHODS = ("packed stock", "auto", "auto + learning")
PROMPT_SETS = ("code", "explain", "chat")


def builtin_texts() -> list[str]:
    """Every built-in prompt, the sets interleaved (code, explain, chat, code, ...)."""
    sets = [builtin_prompts(name) for name in PROMPT_SETS]
    return [s[i] for i in range(max(len(s) for s in sets)) for s in sets if i < len(s)]


@dataclass
class Workload:
    """A stream of requests: the distinct request texts and the order they are asked in."""

    name: str
    texts: list[str]
    order: list[int]  # indices into texts


def workload(name: str, requests: int | None = None, pool: int = 24, seed: int = 0, tokenizer=None) -> Workload:
    """Workload ``name`` with ``requests`` requests (None: every distinct one once; ``repeated``: 120);
    ``rag`` counts its evidence in ``tokenizer``'s tokens."""
    if name in ("fresh", "repeated"):
        return _builtin_workload(name, requests, pool, seed)
    if name == "rag":
        if tokenizer is None:
            raise ValueError("the rag workload needs the tokenizer its evidence budget is counted in.")
        texts = rag_requests(tokenizer)
    elif name == "code-edit":
        texts = code_edit_requests()
    else:
        raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}.")
    count = len(texts) if requests is None else requests
    if not 1 <= count <= len(texts):
        raise ValueError(f"the {name} workload has {len(texts)} distinct requests; ask for 1 to {len(texts)}.")
    return Workload(name, texts, list(range(count)))


def _builtin_workload(name: str, requests: int | None, pool: int, seed: int) -> Workload:
    texts = builtin_texts()
    if name == "fresh":
        requests = len(texts) if requests is None else requests
        if not 1 <= requests <= len(texts):
            raise ValueError(f"the fresh workload has {len(texts)} distinct prompts; ask for 1 to {len(texts)}.")
        return Workload(name, texts, list(range(requests)))
    if not 1 <= pool <= len(texts):
        raise ValueError(f"the repeated workload's pool is 1 to {len(texts)} prompts, got {pool}.")
    stream = [i % pool for i in range(120 if requests is None else requests)]
    random.Random(seed).shuffle(stream)
    return Workload(name, texts, stream)


def rag_requests(tokenizer) -> list[str]:
    """The RAG reader's request for every question of the bundled papers, paper by paper."""
    from ..rag.baselines import BM25Ranker, choose_evidence, paper_paragraphs
    from ..rag.qasper import load_qasper
    from ..rag.retriever import reader_request

    ranker, texts = BM25Ranker(), []
    for paper in load_qasper(source="offline"):
        paragraphs = paper_paragraphs(paper)
        counts = [len(tokenizer(p)["input_ids"]) for p in paragraphs]
        for question in paper.questions:
            chosen = choose_evidence("bm25", ranker, question.question, paragraphs, counts, RAG_EVIDENCE_TOKENS)
            texts.append(reader_request(question.question, [paragraphs[i] for i in chosen]))
    return texts


def code_edit_requests() -> list[str]:
    """Each edit of each file of ``workloads.json``, as a request that gives the whole file."""
    texts = []
    for case in prompt_table("workloads")["code_edit"]:
        for edit in case["edits"]:
            texts.append(f"Here is {case['file_name']}:\n\n```python\n{case['source']}```\n\n{edit} "
                         f"Reply with the whole updated file.")
    return texts


@dataclass
class Served:
    """One request of the stream: tokens/s per method, tau of the tree methods, outputs equal to stock's."""

    request: int
    prompt: int
    new_tokens: int
    tokens_per_s: dict[str, float]
    tau: dict[str, float]
    same: dict[str, bool]
    store_tokens: int  # what the learning store held after this request
    evicted: int  # sequences it had evicted so far

    def speedup(self, method: str) -> float:
        return self.tokens_per_s[method] / self.tokens_per_s["packed stock"]


def serve(model, drafter, prompts: list[torch.Tensor], order: list[int], max_new_tokens: int,
          store: LearningDatastore, progress: bool = True) -> list[Served]:
    """Serve ``prompts[i]`` for i in ``order``, every method per request, in METHODS order."""
    greedy = dict(max_new_tokens=max_new_tokens, do_sample=False)
    served = []
    for request, index in enumerate(tqdm(order, desc="requests", disable=not progress)):
        ids = prompts[index]
        with packed_linears(model):
            ref, seconds = _timed(lambda: model.generate(ids, **greedy))
        new = ref.shape[1] - ids.shape[1]
        rates, taus, same = {"packed stock": new / seconds}, {}, {}
        for method, lookup in (("auto", None), ("auto + learning", LookupOptions(datastore=store))):
            out, seconds = _timed(lambda: model.generate(ids, assistant_model=drafter, tree_strategy="auto",
                                                         tree_lookup=lookup, return_dict_in_generate=True, **greedy))
            rates[method] = (out.sequences.shape[1] - ids.shape[1]) / seconds
            taus[method] = out.tree_stats.tau
            same[method] = torch.equal(out.sequences, ref)
        served.append(Served(request, index, new, rates, taus, same, len(store), store.evicted))
    return served


def summary_rows(served: list[Served], block: int) -> list[dict]:
    """Per block of ``block`` consecutive requests: median speed-ups over packed stock and median tau."""
    rows = []
    for start in range(0, len(served), block):
        part = served[start:start + block]
        row = {"requests": f"{start + 1}-{start + len(part)}"}
        for method in METHODS[1:]:
            row[method] = statistics.median(s.speedup(method) for s in part)
            row[f"tau {method}"] = statistics.median(s.tau[method] for s in part)
        row["learning vs auto"] = statistics.median(s.tokens_per_s["auto + learning"] / s.tokens_per_s["auto"]
                                                    for s in part)
        rows.append(row)
    return rows


def format_stream(name: str, served: list[Served], block: int, max_tokens: int) -> str:
    lines = [f"{name}: {len(served)} requests, {len({s.prompt for s in served})} distinct prompts",
             f"{'requests':<9} {'auto':>6} {'auto+learn':>10} {'learn/auto':>10} {'tau auto':>8} {'tau learn':>9}"]
    for row in summary_rows(served, block):
        lines.append(f"{row['requests']:<9} {row['auto']:5.2f}x {row['auto + learning']:9.2f}x "
                     f"{row['learning vs auto']:9.2f}x {row['tau auto']:8.2f} {row['tau auto + learning']:9.2f}")
    total = summary_rows(served, len(served))[0]
    lines.append(f"{'all':<9} {total['auto']:5.2f}x {total['auto + learning']:9.2f}x "
                 f"{total['learning vs auto']:9.2f}x {total['tau auto']:8.2f} {total['tau auto + learning']:9.2f}")
    packed = statistics.median(s.tokens_per_s["packed stock"] for s in served)
    same = {m: sum(s.same[m] for s in served) for m in METHODS[1:]}
    last = served[-1]
    lines.append(f"packed stock {packed:.1f} tok/s (median); outputs equal to stock: auto {same['auto']}/{len(served)}, "
                 f"auto + learning {same['auto + learning']}/{len(served)}; the store held {last.store_tokens:,} of "
                 f"{max_tokens:,} tokens at the end, {last.evicted} sequences evicted")
    return "\n".join(lines)


def plot_streams(streams: dict[str, list[Served]], path: str, window: int = 10) -> None:
    """Speed-up over packed stock against request number (a running median over ``window`` requests)."""
    from ..extras import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, len(streams), figsize=(6 * len(streams), 4), squeeze=False)
    for ax, (name, served) in zip(axes[0], streams.items()):
        for method in METHODS[1:]:
            speedups = [s.speedup(method) for s in served]
            running = [statistics.median(speedups[max(0, i - window + 1): i + 1]) for i in range(len(speedups))]
            ax.plot(range(1, len(served) + 1), running, label=method)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_title(name)
        ax.set_xlabel("request number")
        ax.set_ylabel(f"speed-up over packed stock (running median of {window})")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
