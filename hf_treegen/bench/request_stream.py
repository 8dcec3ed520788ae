"""A stream of requests served one after another, as a server answers them, by plain decodings (stock
generate() on its own and on packed kernels, transformers' prompt lookup on either), ``auto`` with the
drafter's own datastore, and ``auto`` with one :class:`~hf_treegen.LearningDatastore` shared by the whole
stream (its base: the drafter's datastore), interleaved request by request. Greedy, so every output can
be checked against the first method's.

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
from contextlib import nullcontext
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
# every method a stream can be served with; the first one served is the reference for outputs and ratios
METHODS = ("stock", "packed stock", "prompt lookup", "packed prompt lookup", "auto", "auto + learning")
PLAIN_METHODS = METHODS[:4]
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
    """One request of the stream: tokens/s per method, tau of the tree methods, and whether each method's
    output equals the reference method's (the first one served)."""

    request: int
    prompt: int
    new_tokens: int
    tokens_per_s: dict[str, float]
    tau: dict[str, float]
    same: dict[str, bool]
    store_tokens: int  # what the learning store held after this request
    evicted: int  # sequences it had evicted so far

    @property
    def reference(self) -> str:
        return next(iter(self.tokens_per_s))

    def speedup(self, method: str, over: str | None = None) -> float:
        """``method``'s speed over ``over``'s (default: the reference method's) on this request."""
        return self.tokens_per_s[method] / self.tokens_per_s[over or self.reference]


def serve(model, drafter, prompts: list[torch.Tensor], order: list[int], max_new_tokens: int,
          store: LearningDatastore, progress: bool = True,
          methods: tuple[str, ...] = ("packed stock", "auto", "auto + learning")) -> list[Served]:
    """Serve ``prompts[i]`` for i in ``order``, every one of ``methods`` (from METHODS, a plain one first:
    the reference) per request, in that order."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods or methods[0] not in ("stock", "packed stock"):
        raise ValueError(f"methods must start with 'stock' or 'packed stock' and come from {METHODS}, "
                         f"got {methods}.")
    greedy = dict(max_new_tokens=max_new_tokens, do_sample=False)
    served = []
    for request, index in enumerate(tqdm(order, desc="requests", disable=not progress)):
        ids = prompts[index]
        ref, seconds, _ = _run(methods[0], model, drafter, ids, store, greedy)
        new = ref.shape[1] - ids.shape[1]
        rates, taus, same = {methods[0]: new / seconds}, {}, {}
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
    if method in PLAIN_METHODS:
        lookup = {"prompt_lookup_num_tokens": PROMPT_LOOKUP_TOKENS} if method.endswith("prompt lookup") else {}
        with packed_linears(model) if method.startswith("packed") else nullcontext():
            out, seconds = _timed(lambda: model.generate(ids, **lookup, **greedy))
        return out, seconds, None
    lookup = LookupOptions(datastore=store) if method == "auto + learning" else None
    out, seconds = _timed(lambda: model.generate(ids, assistant_model=drafter, tree_strategy="auto",
                                                 tree_lookup=lookup, return_dict_in_generate=True, **greedy))
    return out.sequences, seconds, out.tree_stats.tau


def summary_rows(served: list[Served], block: int) -> list[dict]:
    """Per block of ``block`` consecutive requests: median speed-ups over the reference and median tau."""
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
    reference = served[0].reference
    rate = statistics.median(s.tokens_per_s[reference] for s in served)
    same = {m: sum(s.same[m] for s in served) for m in TREE_METHODS}
    last = served[-1]
    lines.append(f"{reference} {rate:.1f} tok/s (median); outputs equal to {reference}'s: "
                 f"auto {same['auto']}/{len(served)}, auto + learning {same['auto + learning']}/{len(served)}; "
                 f"the store held {last.store_tokens:,} of {max_tokens:,} tokens at the end, "
                 f"{last.evicted} sequences evicted")
    return "\n".join(lines)


def plot_streams(streams: dict[str, list[Served]], path: str, window: int = 10) -> None:
    """Speed-up over the reference against request number (a running median over ``window`` requests)."""
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
        ax.set_ylabel(f"speed-up over {served[0].reference} (running median of {window})")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def served_methods(served: list[Served]) -> list[str]:
    """The methods a stream was served with, in METHODS order (the reference first)."""
    return [m for m in METHODS if m in served[0].tokens_per_s]


def fastest_plain(served: list[Served]) -> str:
    """The plain method with the highest median tokens/s over the stream."""
    plain = [m for m in served_methods(served) if m in PLAIN_METHODS]
    return max(plain, key=lambda m: statistics.median(s.tokens_per_s[m] for s in served))


def workload_row(served: list[Served]) -> dict:
    """One workload in a line: the reference's median tok/s, the fastest plain method, and per other
    method its median speed-up over the reference and over the fastest plain method (per-request ratios),
    median tau (tree methods) and how many outputs equal the reference's."""
    reference, best = served[0].reference, fastest_plain(served)
    row = {"requests": len(served), "reference": reference, "fastest plain": best,
           "reference tok/s": statistics.median(s.tokens_per_s[reference] for s in served)}
    for method in served_methods(served)[1:]:
        row[method] = {"speedup": statistics.median(s.speedup(method) for s in served),
                       "over fastest plain": statistics.median(s.speedup(method, over=best) for s in served),
                       "tau": statistics.median(s.tau[method] for s in served) if method in TREE_METHODS else None,
                       "same": sum(s.same[method] for s in served)}
    return row


def format_workloads(streams: dict[str, list[Served]]) -> str:
    """Workloads (rows) against methods: speed-up over the reference (tau); then the fastest plain method
    and the tree methods' speed-ups over it."""
    first = next(iter(streams.values()))
    reference, methods = first[0].reference, served_methods(first)[1:]
    trees = [m for m in methods if m in TREE_METHODS]
    rows = {name: workload_row(served) for name, served in streams.items()}
    ratio_labels = [f"{m} / fastest" for m in trees]
    widths = {label: max(len(label), 12) for label in [*methods, *ratio_labels]}
    plain_width = max(len("fastest plain"), *(len(row["fastest plain"]) for row in rows.values()))
    lines = [f"{'workload':<10} {'requests':>8} {reference + ' tok/s':>{len(reference) + 6}} "
             + " ".join(f"{m:>{widths[m]}}" for m in methods) + f"  {'fastest plain':<{plain_width}} "
             + " ".join(f"{label:>{widths[label]}}" for label in ratio_labels)]
    for name, row in rows.items():
        cells = []
        for method in methods:
            tau = "" if row[method]["tau"] is None else f" ({row[method]['tau']:.2f})"
            cells.append(f"{row[method]['speedup']:.2f}x{tau}".rjust(widths[method]))
        lines.append(f"{name:<10} {row['requests']:>8} {row['reference tok/s']:{len(reference) + 6}.1f} "
                     + " ".join(cells) + f"  {row['fastest plain']:<{plain_width}} "
                     + " ".join(f"{row[m]['over fastest plain']:.2f}x".rjust(widths[label])
                                for m, label in zip(trees, ratio_labels)))
    total = sum(row["requests"] for row in rows.values())
    lines.append(f"outputs equal to {reference}'s: "
                 + ", ".join(f"{m} {sum(row[m]['same'] for row in rows.values())}/{total}" for m in methods))
    return "\n".join(lines)


def plot_workloads(streams: dict[str, list[Served]], path: str) -> None:
    """Grouped bars: each method's median speed-up over the reference, per workload."""
    from ..extras import pyplot

    plt = pyplot()
    first = next(iter(streams.values()))
    reference, methods = first[0].reference, served_methods(first)[1:]
    rows = {name: workload_row(served) for name, served in streams.items()}
    fig, ax = plt.subplots(figsize=(1.9 * len(rows) + 2, 4))
    width = 0.8 / len(methods)
    for k, method in enumerate(methods):
        xs = [i + (k - (len(methods) - 1) / 2) * width for i in range(len(rows))]
        ax.bar(xs, [row[method]["speedup"] for row in rows.values()], width, label=method)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(rows)), list(rows))
    ax.set_ylabel(f"speed-up over {reference} generate() (median)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
