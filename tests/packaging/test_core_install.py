"""The core install (no extras) runs tree decoding and compiled choice, and names the extra it lacks.

Each check runs in a fresh interpreter in which the extras' packages cannot be imported, as on a
machine where only ``pip install hf-treegen`` ran."""

import subprocess
import sys
import textwrap

EXTRA_PACKAGES = ("datasets", "evaluate", "outlines", "accelerate", "matplotlib", "gguf")

BLOCK_EXTRAS = f"""
import sys
for name in {EXTRA_PACKAGES!r}:
    sys.modules[name] = None  # `import name` now raises ImportError, as if it were not installed
"""


def _run(body: str) -> subprocess.CompletedProcess:
    code = BLOCK_EXTRAS + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)


def test_core_runs_tree_decoding_and_compiled_choice_without_any_extra():
    result = _run("""
        import torch
        import hf_treegen as htg
        from tests.helpers import FLAT_COSTS, bpe_tokenizer, random_prompts, tiny_domino, tiny_target
        from hf_treegen.choice import ChoiceGrammar, compiled_select, serial_select

        model = htg.enable(tiny_target("llama", torch.float32))
        drafter = tiny_domino(model)
        ids = random_prompts(1, model.config.vocab_size, seed=1)[0]
        stock = model.generate(ids, max_new_tokens=12, do_sample=False)
        tree = model.generate(ids, assistant_model=drafter, tree_strategy="auto", tree_costs=FLAT_COSTS,
                              max_new_tokens=12, do_sample=False)
        assert torch.equal(stock, tree), (stock, tree)

        tok = bpe_tokenizer()
        grammar = ChoiceGrammar(tok, ["[1]", "[2]", "[12]", "alpha", "beta"], 2)
        chooser = tiny_target("llama", torch.float32, vocab=320, std=0.15)
        prompt = torch.tensor([[5, 9, 17, 33]])
        compiled = compiled_select(chooser, prompt, grammar, fuse=False, costs=FLAT_COSTS.verify)
        assert compiled.token_ids == serial_select(chooser, prompt, grammar).token_ids
        print("CORE-OK", sorted(m for m, mod in sys.modules.items() if mod is not None and m.split(".")[0] in {names!r}))
    """.replace("{names!r}", repr(set(EXTRA_PACKAGES))))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "CORE-OK []" in result.stdout


def test_an_entry_point_that_needs_an_extra_names_it():
    result = _run("""
        from hf_treegen.extras import MissingExtra
        from hf_treegen.rag.qasper import load_qasper
        try:
            load_qasper("validation", source="hub")
        except MissingExtra as err:
            print("MESSAGE:", err)
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "pip install 'hf-treegen[rag]'" in result.stdout


def test_cli_reports_a_missing_extra_in_one_line():
    result = _run("""
        import sys
        from hf_treegen.cli import main
        sys.exit(main(["rag-eval", "--limit", "1"]))
    """)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("hf-treegen rag-eval: error:") and "hf-treegen[rag]" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
