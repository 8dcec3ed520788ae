"""A stream of requests served one after another, as a server answers them: stock generate() on packed
kernels, transformers' prompt lookup on them (the strongest plain decodings here), ``auto`` with the
drafter's own datastore, and ``auto`` with one :class:`~hf_treegen.LearningDatastore` shared by the
whole stream (its base: the drafter's datastore), interleaved request by request. Greedy, so every
output can be checked against stock's.

Workloads (chat-templated):

    fresh      every built-in prompt once (open requests the store has never seen)
    code, explain, chat
               the built-in prompts of one set, each once
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
from .harness import PROMPT_LOOKUP_TOKENS, _timed
from .prompts import builtin_prompts

PROMPT_SETS = ("code", "explain", "chat")
WORKLOADS = ("fresh", *PROMPT_SETS, "repeated", "rag", "code-edit")
RAG_EVIDENCE_TOKENS = 384  # the BM25 evidence a rag request carries (the RAG showcase's budgets are 256-1024)
# every method a stream can be served with; packed stock comes first: the reference and the baseline
METHODS = ("packed stock", "prompt lookup", "auto", "auto + learning")
TREE_METHODS = ("auto", "auto + learning")


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
    if name in PROMPT_SETS:
        texts = list(builtin_prompts(name))
    elif name == "rag":
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
          store: LearningDatastore, progress: bool = True,
          methods: tuple[str, ...] = ("packed stock", "auto", "auto + learning")) -> list[Served]:
    """Serve ``prompts[i]`` for i in ``order``, every one of ``methods`` (from METHODS, packed stock
    first) per request, in that order."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods or methods[0] != "packed stock":
        raise ValueError(f"methods must start with 'packed stock' and come from {METHODS}, got {methods}.")
    greedy = dict(max_new_tokens=max_new_tokens, do_sample=False)
    served = []
    for request, index in enumerate(tqdm(order, desc="requests", disable=not progress)):
        ids = prompts[index]
        with packed_linears(model):
            ref, seconds = _timed(lambda: model.generate(ids, **greedy))
        new = ref.shape[1] - ids.shape[1]
        rates, taus, same = {"packed stock": new / seconds}, {}, {}
        for method in methods[1:]:
            sequences, seconds, tau = _run(method, model, drafter, ids, store, greedy)
            rates[method] = (sequences.shape[1] - ids.shape[1]) / seconds
            same[method] = torch.equal(sequences, ref)
            if tau is not None:
                taus[method] = tau
        served.append(Served(request, index, new, rates, taus, same, len(store), store.evicted))
    return served


def _run(method: str, model, drafter, ids: torch.Tensor, store: LearningDatastore, greedy: dict):
    """(sequences, seconds, tau or None) of one request served by ``method``."""
    if method == "prompt lookup":
        with packed_linears(model):
            out, seconds = _timed(lambda: model.generate(ids, prompt_lookup_num_tokens=PROMPT_LOOKUP_TOKENS,
                                                         **greedy))
        return out, seconds, None
    lookup = LookupOptions(datastore=store) if method == "auto + learning" else None
    out, seconds = _timed(lambda: model.generate(ids, assistant_model=drafter, tree_strategy="auto",
                                                 tree_lookup=lookup, return_dict_in_generate=True, **greedy))
    return out.sequences, seconds, out.tree_stats.tau


def summary_rows(served: list[Served], block: int) -> list[dict]:
    """Per block of ``block`` consecutive requests: median speed-ups over packed stock and median tau."""
    rows = []
    for start in range(0, len(served), block):
        part = served[start:start + block]
        row = {"requests": f"{start + 1}-{start + len(part)}"}
        for method in TREE_METHODS:
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
    same = {m: sum(s.same[m] for s in served) for m in TREE_METHODS}
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
        for method in TREE_METHODS:
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


def workload_row(served: list[Served]) -> dict:
    """One workload in a line: median packed-stock tok/s, and per other method its median speed-up over
    packed stock, median tau (tree methods) and how many outputs equal stock's."""
    methods = [m for m in METHODS[1:] if m in served[0].tokens_per_s]
    row = {"requests": len(served), "packed tok/s": statistics.median(s.tokens_per_s["packed stock"] for s in served)}
    for method in methods:
        row[method] = {"speedup": statistics.median(s.speedup(method) for s in served),
                       "tau": statistics.median(s.tau[method] for s in served) if method in TREE_METHODS else None,
                       "same": sum(s.same[method] for s in served)}
    return row


def format_workloads(streams: dict[str, list[Served]]) -> str:
    """A table of workloads (rows) against methods: speed-up over packed stock (tau)."""
    methods = [m for m in METHODS[1:] if m in next(iter(streams.values()))[0].tokens_per_s]
    header = f"{'workload':<10} {'requests':>8} {'packed tok/s':>12} " + " ".join(f"{m:>18}" for m in methods)
    lines = [header]
    for name, served in streams.items():
        row = workload_row(served)
        cells = []
        for method in methods:
            cell = row[method]
            tau = "" if cell["tau"] is None else f" ({cell['tau']:.2f})"
            cells.append(f"{cell['speedup']:.2f}x{tau}".rjust(18))
        lines.append(f"{name:<10} {row['requests']:>8} {row['packed tok/s']:12.1f} " + " ".join(cells))
    same = {m: sum(workload_row(s)[m]["same"] for s in streams.values()) for m in methods}
    total = sum(len(s) for s in streams.values())
    lines.append("outputs equal to packed stock's: " + ", ".join(f"{m} {same[m]}/{total}" for m in methods))
    return "\n".join(lines)


def plot_workloads(streams: dict[str, list[Served]], path: str) -> None:
    """Grouped bars: each method's median speed-up over packed stock, per workload."""
    from ..extras import pyplot

    plt = pyplot()
    methods = [m for m in METHODS[1:] if m in next(iter(streams.values()))[0].tokens_per_s]
    rows = {name: workload_row(served) for name, served in streams.items()}
    fig, ax = plt.subplots(figsize=(1.6 * len(rows) + 2, 4))
    width = 0.8 / len(methods)
    for k, method in enumerate(methods):
        xs = [i + (k - (len(methods) - 1) / 2) * width for i in range(len(rows))]
        ax.bar(xs, [row[method]["speedup"] for row in rows.values()], width, label=method)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(rows)), list(rows))
    ax.set_ylabel("speed-up over stock on packed kernels (median)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
