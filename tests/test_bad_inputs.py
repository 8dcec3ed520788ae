"""The bad-input matrix: what a user can get wrong across the public API, and what each mistake gets.

Every row is one input a user can plausibly give. Its expected outcome is one of:

    Refused(error, match)   a clear error of that type whose message names the problem
    Same()                 the call runs and its output equals the reference (stock generate(), or
                            serial decoding for choices): the input was fine after all
    Capped(match)           a documented cap, announced with a warning; the output still equals the reference

Anything else fails the row: an error from deep inside a library (a raw IndexError, a reshape error),
a different output, or a hang (every row runs under an alarm). The CLI rows check that a user's
mistake is one line on stderr with exit status 2, before any model loads.
"""

from __future__ import annotations

import json
import re
import signal
import warnings
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

import hf_treegen as htg
from hf_treegen import LookupOptions
from hf_treegen.datastore import TokenDatastore
from hf_treegen.choice import ChoiceGrammar, compiled_select, serial_select
from hf_treegen.cli import main
from tests.helpers import bpe_tokenizer, tiny_drafter, tiny_target

PROMPT = torch.tensor([[5, 17, 42, 99, 3, 77, 120, 8]])
ROW_SECONDS = 60  # a row that takes longer than this is a hang


@dataclass(frozen=True)
class Refused:
    error: type[BaseException] | tuple[type[BaseException], ...]
    match: str


@dataclass(frozen=True)
class Same:
    """The call runs and its output equals the reference (stock generate(), serial decoding, or what
    the docs promise)."""


@dataclass(frozen=True)
class Capped:
    match: str


# ------------------------------------------------------------------------------------------ the world
@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Everything the rows use: a tiny target with its drafter, its stock twin, a tokenizer and a tiny
    choice model, a saved drafter folder and a QASPER file."""
    model = tiny_target("llama")
    tok = bpe_tokenizer()
    chooser = tiny_target("llama", vocab=320, std=0.15, dtype=torch.float64)
    chooser.generation_config.eos_token_id = tok.eos_token_id
    chooser.generation_config.pad_token_id = tok.pad_token_id
    folder = tmp_path_factory.mktemp("files")
    drafter = tiny_drafter(model)
    drafter.save_pretrained(folder / "drafter")
    from hf_treegen.rag import load_qasper
    from hf_treegen.rag.qasper import papers_to_raw

    raw = papers_to_raw(load_qasper(source="offline")[:1])
    return SimpleNamespace(model=model, drafter=drafter, stock=htg.disable(tiny_target("llama")), tok=tok,
                           chooser=chooser, folder=folder, raw=raw)


def fresh_copy(world, name: str):
    """A fresh copy of the saved drafter folder, for rows that damage it."""
    import shutil

    target = world.folder / name
    shutil.copytree(world.folder / "drafter", target)
    return target


# ------------------------------------------------------------------------------------ generate() rows
def tree_call(**kwargs):
    """generate() with the tiny drafter and ``kwargs``, against stock generate() without the tree kwargs."""
    def run(world):
        ours = world.model.generate(PROMPT, assistant_model=world.drafter, **kwargs)
        plain = {k: v for k, v in kwargs.items() if not k.startswith("tree_")}
        return ours, world.stock.generate(PROMPT, **plain)
    return run


def several_samples(world):
    """num_return_sequences with sampling: as many rows as stock returns (their law: tests/generation)."""
    ours = world.model.generate(PROMPT, assistant_model=world.drafter, tree_strategy="marginal", do_sample=True,
                                num_return_sequences=3, max_new_tokens=4)
    return ours.shape, world.stock.generate(PROMPT, do_sample=True, num_return_sequences=3, max_new_tokens=4).shape


def tree_call_on(ids=None, **kwargs):
    def run(world):
        return world.model.generate(ids, assistant_model=world.drafter, tree_strategy="chain", max_new_tokens=4,
                                    **kwargs), None
    return run


def padded(first: int, last: int):
    """A batch of PROMPT and PROMPT shortened, its padding at ``first`` or ``last`` of the row: against
    stock generate() on each prompt alone."""
    def run(world):
        short = PROMPT[:, 3:]
        ids = torch.cat([PROMPT, torch.cat([PROMPT[:, :3], short], 1)])
        mask = torch.ones_like(ids)
        mask[1, first:last] = 0
        ours = world.model.generate(ids, attention_mask=mask, assistant_model=world.drafter, tree_strategy="chain",
                                    max_new_tokens=4)
        alone = [world.stock.generate(p, max_new_tokens=4)[0, p.shape[1]:] for p in (PROMPT, short)]
        return ours[:, PROMPT.shape[1]:], torch.stack(alone)
    return run


def foreign_drafter(**shape):
    def run(world):
        other = tiny_drafter(tiny_target("llama", **shape))
        return world.model.generate(PROMPT, assistant_model=other, tree_strategy="chain", max_new_tokens=4), None
    return run


def small_lm_as_drafter(world):
    return world.model.generate(PROMPT, assistant_model=tiny_target("llama"), tree_strategy="chain",
                                max_new_tokens=4), None


def strategy_without_drafter(world):
    return world.model.generate(PROMPT, tree_strategy="chain", max_new_tokens=4), None


def settings_without_strategy(world):
    return world.model.generate(PROMPT, tree_budget=8, max_new_tokens=4), None


def embeddings_only(world):
    embeds = world.model.get_input_embeddings()(PROMPT)
    return world.model.generate(inputs_embeds=embeds, assistant_model=world.drafter, tree_strategy="chain",
                                max_new_tokens=4), None


def wrong_state(**state):
    def run(world):
        return world.model.generate(PROMPT, assistant_model=world.drafter, tree_strategy="adaptive",
                                    max_new_tokens=4, **state), None
    return run


GREEDY = dict(max_new_tokens=12, do_sample=False)


def seeded_sampling(world):
    torch.manual_seed(7)
    ours = world.model.generate(PROMPT, assistant_model=world.drafter, tree_strategy="marginal", do_sample=True,
                                temperature=0.8, max_new_tokens=12)
    torch.manual_seed(7)
    return ours, world.stock.generate(PROMPT, do_sample=True, temperature=0.8, max_new_tokens=12)

GENERATE_ROWS = [
    ("unknown strategy", tree_call(tree_strategy="dominotree", **GREEDY), Refused(ValueError, "valid strategies: chain")),
    ("strategy in capitals", tree_call(tree_strategy="Marginal", **GREEDY), Refused(ValueError, "Unknown tree_strategy 'Marginal'")),
    ("budget 0", tree_call(tree_strategy="marginal", tree_budget=0, **GREEDY), Refused(ValueError, "tree_budget must be an int >= 1")),
    ("budget as a string", tree_call(tree_strategy="marginal", tree_budget="8", **GREEDY), Refused(ValueError, "got '8'")),
    ("budget True", tree_call(tree_strategy="marginal", tree_budget=True, **GREEDY), Refused(ValueError, "got True")),
    ("budget 2.5", tree_call(tree_strategy="marginal", tree_budget=2.5, **GREEDY), Refused(ValueError, "tree_budget must be an int")),
    ("budget 100000", tree_call(tree_strategy="marginal", tree_budget=100_000, **GREEDY), Refused(ValueError, "past what any tree")),
    ("topk 0", tree_call(tree_strategy="marginal", tree_topk=0, **GREEDY), Refused(ValueError, "tree_topk must be an int >= 1")),
    ("a Domino strategy with a DFlash drafter", tree_call(tree_strategy="conditional", **GREEDY), Refused(ValueError, "needs a drafter with a sequential head")),
    ("top_m 0", tree_call(tree_strategy="conditional", tree_top_m=0, **GREEDY), Refused(ValueError, "tree_top_m must be an int >= 1")),
    ("max depth 0", tree_call(tree_strategy="marginal", tree_max_depth=0, **GREEDY), Refused(ValueError, "tree_max_depth must be an int >= 1")),
    ("lookup -1", tree_call(tree_strategy="marginal", tree_lookup=-1, **GREEDY), Refused(ValueError, "tree_lookup must be an int >= 0")),
    ("lookup as a string", tree_call(tree_strategy="marginal", tree_lookup="4", **GREEDY), Refused(ValueError, "tree_lookup must be an int >= 0")),
    ("lookup True", tree_call(tree_strategy="marginal", tree_lookup=True, **GREEDY), Refused(ValueError, "got True")),
    ("a datastore of the wrong type", tree_call(tree_strategy="marginal", tree_lookup=LookupOptions(datastore=[1, 2]), **GREEDY), Refused(ValueError, "LookupOptions.datastore must be a TokenDatastore")),
    ("a datastore that does not exist", tree_call(tree_strategy="marginal", tree_lookup=LookupOptions(datastore="nope.safetensors"), **GREEDY), Refused(FileNotFoundError, "No datastore file at nope.safetensors")),
    ("the drafter's datastore when it has none", tree_call(tree_strategy="marginal", tree_lookup=LookupOptions(datastore=True), **GREEDY), Refused(ValueError, "this drafter has none")),
    ("a datastore with lookup off", tree_call(tree_strategy="marginal", tree_lookup=LookupOptions(0, datastore=True), **GREEDY), Refused(ValueError, "would go unused")),
    ("lookup paths 0", tree_call(tree_strategy="auto", tree_lookup=LookupOptions(paths=0), **GREEDY), Refused(ValueError, "LookupOptions.paths must be an int >= 1")),
    ("lookup paths with lookup off", tree_call(tree_strategy="marginal", tree_lookup=LookupOptions(0, paths=2), **GREEDY), Refused(ValueError, "turns lookup off")),
    ("lookup paths with the datastore off", tree_call(tree_strategy="auto", tree_lookup=LookupOptions(datastore=False, paths=2), **GREEDY), Refused(ValueError, "turns the datastore off")),
    ("lookup inside negative", tree_call(tree_strategy="auto", tree_lookup=LookupOptions(inside=-1), **GREEDY), Refused(ValueError, "LookupOptions.inside must be an int >= 0")),
    ("lookup inside a bool", tree_call(tree_strategy="auto", tree_lookup=LookupOptions(inside=True), **GREEDY), Refused(ValueError, "LookupOptions.inside must be an int >= 0")),
    ("lookup inside with lookup off", tree_call(tree_strategy="marginal", tree_lookup=LookupOptions(0, inside=3), **GREEDY), Refused(ValueError, "turns lookup off")),
    ("a datastore of another tokenizer", tree_call(tree_strategy="marginal", tree_lookup=LookupOptions(datastore=TokenDatastore.from_sequences([[1, 60000]])), **GREEDY), Refused(ValueError, "built with another tokenizer")),
    ("the retired tree_datastore kwarg", tree_call(tree_strategy="auto", tree_datastore=False, **GREEDY), Refused(ValueError, "tree_lookup=hf_treegen.LookupOptions\\(datastore=...\\)")),
    ("the retired lookup kwargs", tree_call(tree_strategy="auto", tree_lookup_paths=2, tree_lookup_inside=3, **GREEDY), Refused(ValueError, "LookupOptions\\(paths=..., inside=...\\)")),
    ("transformers' prompt lookup beside a tree", tree_call(tree_strategy="auto", prompt_lookup_num_tokens=10, **GREEDY), Refused(ValueError, "pass tree_lookup=10")),
    ("tree temperature -1", tree_call(tree_strategy="marginal", tree_temperature=-1.0, **GREEDY), Refused(ValueError, "tree_temperature must be a number > 0")),
    ("tree temperature as a string", tree_call(tree_strategy="marginal", tree_temperature="1", **GREEDY), Refused(ValueError, "tree_temperature must be a number")),
    ("beam search", tree_call(tree_strategy="marginal", num_beams=2, **GREEDY), Refused(ValueError, "num_beams=2 asks for beam search")),
    ("several samples", several_samples, Same()),
    ("no KV cache", tree_call(tree_strategy="marginal", use_cache=False, **GREEDY), Refused(ValueError, "needs use_cache=True")),
    ("custom_generate beside a strategy", tree_call(tree_strategy="marginal", custom_generate=lambda *a, **k: None, **GREEDY), Refused(ValueError, "do not pass custom_generate")),
    ("max_new_tokens 0", tree_call(tree_strategy="marginal", max_new_tokens=0), Refused(ValueError, "max_new_tokens")),
    ("sampling at temperature 0", tree_call(tree_strategy="marginal", do_sample=True, temperature=0.0, max_new_tokens=4), Refused(ValueError, "temperature")),
    ("a 3-D prompt", tree_call_on(PROMPT[None]), Refused(ValueError, r"shape \(batch, prompt_length\)")),
    ("an empty prompt", tree_call_on(torch.zeros(1, 0, dtype=torch.long)), Refused(ValueError, "input_ids is empty")),
    ("ids past the vocabulary", tree_call_on(torch.tensor([[5, 300]])), Refused(ValueError, r"outside the model's vocabulary \[0, 256\)")),
    ("negative ids", tree_call_on(torch.tensor([[5, -1]])), Refused(ValueError, "outside the model's vocabulary")),
    ("float ids", tree_call_on(PROMPT.float()), Refused(ValueError, "integer token ids")),
    ("a left-padded batch", padded(0, 3), Same()),
    ("a right-padded batch", padded(5, 8), Refused(ValueError, "needs left padding")),
    ("inputs_embeds alone", embeddings_only, Refused(ValueError, "needs input_ids")),
    ("a small LM as the drafter", small_lm_as_drafter, Refused(TypeError, "hf_treegen drafter")),
    ("a strategy and no drafter", strategy_without_drafter, Refused(ValueError, "needs a drafter")),
    ("tree settings and no strategy", settings_without_strategy, Refused(ValueError, "tree_budget given without tree_strategy")),
    ("a drafter for another hidden size", foreign_drafter(hidden=32), Refused(ValueError, "hidden_size=32 but the target has 64")),
    ("a drafter for another vocabulary", foreign_drafter(vocab=300), Refused(ValueError, "vocab_size=300 but the target has 256")),
    ("tree_costs of the wrong type", wrong_state(tree_costs={"verify": 1}), Refused(TypeError, "tree_costs must be an hf_treegen.CostProfile")),
    ("the retired tree_calibration", wrong_state(tree_calibration=0.5), Refused(ValueError, "drafter.depth_calibration")),
    # inputs that look odd but are fine: the output is stock's
    ("budget 1", tree_call(tree_strategy="marginal", tree_budget=1, **GREEDY), Same()),
    ("lookup 0", tree_call(tree_strategy="marginal", tree_lookup=0, **GREEDY), Same()),
    ("a datastore turned off", tree_call(tree_strategy="auto", tree_lookup=LookupOptions(datastore=False), **GREEDY), Same()),
    ("an empty datastore", tree_call(tree_strategy="marginal", tree_lookup=LookupOptions(datastore=TokenDatastore.from_sequences([])), **GREEDY), Same()),
    ("a lookup longer than the output", tree_call(tree_strategy="marginal", tree_lookup=500, **GREEDY), Same()),
    ("max depth past the drafter's block", tree_call(tree_strategy="marginal", tree_max_depth=100, **GREEDY), Same()),
    ("max_length beside max_new_tokens", tree_call(tree_strategy="chain", max_length=PROMPT.shape[1] + 3, **GREEDY), Same()),
    ("repetition penalty", tree_call(tree_strategy="marginal", repetition_penalty=1.3, **GREEDY), Same()),
    ("min_new_tokens with two EOS ids", tree_call(tree_strategy="marginal", min_new_tokens=5, eos_token_id=[3, 7], **GREEDY), Same()),
    ("bad_words_ids", tree_call(tree_strategy="marginal", bad_words_ids=[[5]], **GREEDY), Same()),
    ("max_time", tree_call(tree_strategy="chain", max_time=600.0, **GREEDY), Same()),
    ("sampling, seeded", seeded_sampling, Same()),  # seeded tree sampling is seeded stock sampling, bit for bit
]


# --------------------------------------------------------------------------------------- drafter rows
def load_from(prepare):
    def run(world):
        folder = prepare(world)
        return htg.DFlashDrafter.from_pretrained(folder, target=world.model), None
    return run


def damaged(name, damage):
    def prepare(world):
        folder = fresh_copy(world, name)
        damage(folder)
        return folder
    return prepare


def stray_weights(world):
    folder = fresh_copy(world, "stray")
    save_file({k: torch.zeros_like(v) for k, v in world.drafter.state_dict().items()},
              str(folder / "model_old.safetensors"))
    loaded = htg.DFlashDrafter.from_pretrained(folder, target=world.model)
    same = all(torch.equal(loaded.state_dict()[k], v) for k, v in world.drafter.state_dict().items())
    return torch.tensor([same]), torch.tensor([True])


def map_outside_vocab(world):
    drafter = tiny_drafter(world.model)
    drafter.set_draft_vocab(torch.tensor([1, 2, 4000]))
    return drafter, None


def truncate(file):
    return lambda f: (f / file).write_bytes((f / file).read_bytes()[:100])


DRAFTER_ROWS = [
    ("a folder that does not exist", load_from(lambda w: w.folder / "nope"), Refused((FileNotFoundError, OSError), "nope")),
    ("config.json that is not JSON", load_from(damaged("badjson", lambda f: (f / "config.json").write_text("{x"))), Refused(ValueError, "config.json is not valid JSON")),
    ("config.json in another encoding", load_from(damaged("utf16", lambda f: (f / "config.json").write_bytes(b"\xff\xfe\x00"))), Refused(ValueError, "config.json is not valid JSON")),
    ("config.json holding a list", load_from(damaged("list", lambda f: (f / "config.json").write_text("[1]"))), Refused(ValueError, "config.json holds a list")),
    ("truncated weights", load_from(damaged("trunc", truncate("model.safetensors"))), Refused(ValueError, "model.safetensors is not a readable safetensors file")),
    ("renamed weights", load_from(damaged("renamed", lambda f: (f / "model.safetensors").rename(f / "w2.safetensors"))), Refused(FileNotFoundError, "w2.safetensors")),
    ("a stray second weights file", stray_weights, Same()),
    ("a draft vocabulary past the target's", map_outside_vocab, Refused(ValueError, r"outside the target vocabulary")),
]


# ---------------------------------------------------------------------------------------- choice rows
def grammar(labels, num_select=1, **kw):
    def run(world):
        return ChoiceGrammar(world.tok, labels, num_select, **kw), None
    return run


def processor(labels, num_select=1, **kw):
    def run(world):
        return htg.CompiledChoiceProcessor(world.tok, labels, num_select, **kw), None
    return run


def choose(labels, num_select, **kw):
    """compiled choice against serial decoding on the same prompt."""
    def run(world):
        g = ChoiceGrammar(world.tok, labels, num_select)
        prompt = torch.tensor([[5, 6, 7, 8, 9]])
        return (torch.tensor(compiled_select(world.chooser, prompt, g, **kw).token_ids),
                torch.tensor(serial_select(world.chooser, prompt, g).token_ids))
    return run


def huge_full_probe(world):
    import hf_treegen.choice.engines as engines

    saved, engines.FULL_PROBE_MAX_ROWS = engines.FULL_PROBE_MAX_ROWS, 10  # stands in for thousands of rows
    try:
        return choose(["alpha", "al", "beta", "gamma", "[1]", "[12]", "data", "model", "intro", "methods"], 3,
                      width=None, fuse=False)(world)
    finally:
        engines.FULL_PROBE_MAX_ROWS = saved


def choice_in_generate(world):
    proc = htg.CompiledChoiceProcessor(world.tok, ["alpha", "beta", "gamma"], 2)
    prompt = torch.tensor([[5, 6, 7, 8, 9]])
    ours = world.chooser.generate(prompt, logits_processor=[proc], custom_generate=proc.compiled_generate,
                                  max_new_tokens=16, do_sample=False)
    return ours, torch.cat([prompt, torch.tensor([serial_select(world.chooser, prompt, proc.grammar).token_ids])], 1)


CHOICE_ROWS = [
    ("duplicate labels", grammar(["a", "b", "a"]), Refused(ValueError, "duplicate choice")),
    ("an empty label", grammar(["a", ""]), Refused(ValueError, "non-empty string")),
    ("no labels", grammar([]), Refused(ValueError, "choices is empty")),
    ("labels as one string", grammar("abc"), Refused((ValueError, TypeError), "list of label strings")),
    ("num_select above the label count", grammar(["a", "b"], 3), Refused(ValueError, "more than the 2 choices")),
    ("num_select 0", grammar(["a", "b"], 0), Refused(ValueError, "positive integer")),
    ("width 0", processor(["a", "b"], width=0), Refused(ValueError, "width must be None, 'auto' or a positive int")),
    ("width 'wide'", processor(["a", "b"], width="wide"), Refused(ValueError, "width must be None")),
    ("costs of the wrong type", processor(["a", "b"], costs={"a": 1}), Refused(TypeError, "costs must be")),
    ("labels that are prefixes of others", choose(["al", "alpha", "[1]", "[12]"], 2), Same()),
    ("labels with spaces and non-ASCII", choose(["deep learning", "café", "naïve Bayes", "x y"], 2), Same()),
    ("width above the label count", choose(["alpha", "beta", "gamma"], 2, width=50), Same()),
    ("choosing every label", choose(["alpha", "beta", "gamma"], 3), Same()),
    ("a full probe past the size cap", huge_full_probe, Capped("planning the probe width")),
    ("the processor inside generate()", choice_in_generate, Same()),
]


# ---------------------------------------------------------------------------------- QASPER and metrics
def qasper_file(content: bytes | str, name: str):
    def run(world):
        from hf_treegen.rag import load_qasper

        path = world.folder / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return load_qasper(source=str(path)), None
    return run


def qasper_edited(edit, name):
    def run(world):
        raw = json.loads(json.dumps(world.raw))
        edit(next(iter(raw.values())))
        return qasper_file(json.dumps(raw), name)(world)
    return run


def spans_as_string(paper):
    paper["qas"][0]["answers"][0]["answer"]["extractive_spans"] = "not a list"


def unknown_split(world):
    from hf_treegen.rag import load_qasper

    return load_qasper("eval", source="offline"), None  # the offline set has one split, but a typo is still a typo


def no_matching_predictions(world):
    """Scored as the official evaluator scores them (zeros), and counted where the result says so
    (the qasper-score command warns, or fails with --strict)."""
    from hf_treegen.metrics.qasper_official import evaluate_predictions, gold_from_papers

    gold = gold_from_papers(world.raw)
    scores = evaluate_predictions(gold, {"no-such-id": {"answer": "x", "evidence": []}})
    return scores["Missing predictions"], len(gold)


def empty_prediction_fields(world):
    """A prediction with an empty answer and no evidence is legal: it scores zero, it is not an error."""
    from hf_treegen.metrics.qasper_official import evaluate_predictions, gold_from_papers

    gold = gold_from_papers(world.raw)
    scores = evaluate_predictions(gold, {qid: {"answer": "", "evidence": []} for qid in gold})
    return torch.tensor([scores["Answer F1"] >= 0]), torch.tensor([True])


DATA_ROWS = [
    ("a truncated QASPER file", qasper_file('{"1909.0": {"title": "x", ', "trunc.json"), Refused(ValueError, "trunc.json")),
    ("a QASPER file that is not UTF-8", qasper_file(b"\xff\xfe{}", "latin.json"), Refused(ValueError, "latin.json")),
    ("a QASPER file that does not exist", qasper_file("", "empty.json"), Refused(ValueError, "empty.json")),
    ("extractive_spans given as a string", qasper_edited(spans_as_string, "spans.json"), Refused(ValueError, "spans.json.*extractive_spans must be a list")),
    ("a missing title", qasper_edited(lambda p: p.pop("title"), "notitle.json"), Refused(ValueError, "title is missing")),
    ("an unknown split", unknown_split, Refused(ValueError, "unknown QASPER split")),
    ("predictions that match no gold question", no_matching_predictions, Same()),
    ("empty answers and evidence", empty_prediction_fields, Same()),
]


# ------------------------------------------------------------------------------------------ the matrix
class Hang(Exception):
    pass


def _alarm(*_):
    raise Hang(f"the row ran past {ROW_SECONDS} s")


def check(world, run, expect):
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(ROW_SECONDS)
    try:
        if isinstance(expect, Refused):
            with pytest.raises(expect.error, match=expect.match):
                run(world)
            return
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ours, reference = run(world)
        messages = [str(w.message) for w in caught]
        if isinstance(expect, Capped):
            assert any(re.search(expect.match, m) for m in messages), messages
        if reference is not None:
            assert torch.equal(torch.as_tensor(ours), torch.as_tensor(reference))
    finally:
        signal.alarm(0)


ROWS = [("generate", *r) for r in GENERATE_ROWS] + [("drafter", *r) for r in DRAFTER_ROWS] + \
       [("choice", *r) for r in CHOICE_ROWS] + [("data", *r) for r in DATA_ROWS]


@pytest.mark.parametrize("area, what, run, expect", ROWS, ids=[f"{r[0]}: {r[1]}" for r in ROWS])
def test_bad_input(world, area, what, run, expect):
    check(world, run, expect)


def test_refusals_leave_the_model_as_it_was(world):
    """After every refused generate() row: no hooks left on the target, and stock output unchanged."""
    for _, run, expect in GENERATE_ROWS:
        if isinstance(expect, Refused):
            with pytest.raises(expect.error):
                run(world)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in world.model.modules())
    ours = world.model.generate(PROMPT, assistant_model=world.drafter, tree_strategy="chain", **GREEDY)
    assert torch.equal(ours, world.stock.generate(PROMPT, **GREEDY))


# ---------------------------------------------------------------------------------------------- CLI
CLI_ROWS = [
    (["rag-eval", "--k", "2", "--b", "3"], "--b 3 is larger than --k 2"),
    (["rag-eval", "--interfaces", "compiled,telepathy"], "unknown interface ['telepathy']"),
    (["rag-eval", "--baselines", "bm25,bm52"], "unknown baseline ['bm52']"),
    (["rag-eval", "--interfaces", "none", "--baselines", "none"], "both none"),
    (["rag-eval", "--data", "/no/such/qasper.json"], "/no/such/qasper.json"),
    (["rag-eval", "--quick", "--limit", "0"], "--limit: expected a whole number >= 1"),
    (["qasper-score", "--gold", "/no/gold.json", "--predictions", "/no/p.jsonl"], "/no/gold.json"),
    (["choose", "q", "--labels", "|"], "an empty label"),
    (["choose", "q", "--labels", "a|b", "--num-select", "0"], "--num-select: expected a whole number >= 1"),
    (["generate", "hi", "--budget", "-3"], "--budget: expected a whole number >= 1"),
    (["generate", "hi", "--strategy", "Conditional"], "--strategy: Unknown tree_strategy 'Conditional'"),
    (["bench", "--temperatures", "-1"], "--temperatures"),
    (["draft-vocab", "--drafter", "/no/drafter", "--data", "/no/corpus", "--out", "o"], "no such corpus folder"),
]


@pytest.mark.parametrize("argv, message", CLI_ROWS, ids=[" ".join(a) for a, _ in CLI_ROWS])
def test_cli_mistakes_are_one_line_before_any_model_loads(capsys, monkeypatch, argv, message):
    import hf_treegen.cli as cli

    def no_loading(*_, **__):
        raise AssertionError("a model was loaded before the mistake was reported")

    monkeypatch.setattr(cli, "_load_model", no_loading)
    monkeypatch.setattr(cli, "_load_target", no_loading)
    try:
        status, by_argparse = main(argv), False
    except SystemExit as stop:  # argparse's own errors: its usage lines, then the error line
        status, by_argparse = stop.code, True
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and message in lines[-1] and lines[-1].startswith("hf-treegen "), lines
    assert by_argparse or len(lines) == 1, lines
    assert not any("Traceback" in line for line in lines)
