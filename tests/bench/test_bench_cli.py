"""`hf-treegen bench` end to end on a tiny model, plus its input errors."""

import json

import pytest
import torch

from hf_treegen.bench.prompt_files import load_prompt_texts
from hf_treegen.bench.run import parse_strategies
from hf_treegen.cli import main
from tests.helpers import byte_tokenizer, tiny_domino, tiny_target


@pytest.fixture(scope="module")
def saved_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    model = tiny_target("llama", torch.float32, vocab=272)
    model.generation_config.eos_token_id = 257  # <|im_end|>
    model.save_pretrained(root / "model")
    byte_tokenizer().save_pretrained(root / "model")
    tiny_domino(model).save_pretrained(root / "drafter")
    return root


def test_bench_runs_end_to_end_and_writes_json_and_plot(saved_pair, tmp_path, capsys):
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    rc = main(["bench", "--model", str(saved_pair / "model"), "--drafter", str(saved_pair / "drafter"),
               "--prompts", "builtin:chat", "--num-prompts", "2", "--max-new-tokens", "8",
               "--strategies", "ar,prompt_lookup,chain,marginal,conditional,conditional@3+lookup4+inside2",
               "--temperatures", "0,1.0",
               "--json", str(out_json), "--plot", str(out_png)])
    assert rc == 0
    report = json.loads(out_json.read_text())
    greedy = {r["strategy"]: r for r in report["tables"]["0.0"]["rows"]}
    assert set(greedy) == {"ar", "lean_ar", "prompt_lookup", "chain", "marginal", "conditional",
                           "conditional@3+lookup4+inside2"}
    # its own budget: at most 3 built nodes, 4 grafted at the root and 2 under each of 2 likely nodes
    assert greedy["conditional@3+lookup4+inside2"]["tree_size"] <= 3 + 4 + 2 * 2 and greedy["conditional"]["tree_size"] > 3
    for row in greedy.values():
        assert row["equal"] == row["prompts"] == 2  # every greedy output equals stock generate()
        assert row["tok_s"] > 0
    assert greedy["conditional"]["tau"] >= 1.0
    assert "1.0" in report["tables"] and out_png.stat().st_size > 1000
    assert "conditional" in capsys.readouterr().out


def test_calibration_rows_pool_every_round_of_a_strategy(saved_pair):
    from transformers import AutoModelForCausalLM

    import hf_treegen as htg
    from hf_treegen.bench import run_strategies
    from hf_treegen.bench.harness import format_calibration

    model = htg.enable(AutoModelForCausalLM.from_pretrained(saved_pair / "model"))
    drafter = htg.DominoDrafter.from_pretrained(saved_pair / "drafter", target=model)
    prompts = [torch.tensor([[5, 6, 7, 8]]), torch.tensor([[9, 10, 11]])]
    results = {r.name: r for r in run_strategies(model, prompts, drafter, ["conditional@4"], max_new_tokens=6,
                                                 progress=False)}
    tree = results["conditional@4"]
    assert tree.rounds >= 2 and results["ar"].rounds == 0  # baselines have no rounds
    rows = tree.calibration_rows()
    assert rows and all(r["predicted"] > 0 for r in rows)
    # per round, at most the tree's nodes can be accepted, and at most one per depth
    assert sum(r["accepted"] for r in rows) <= 4 and all(r["accepted"] <= 1 for r in rows)
    table = format_calibration([tree])
    assert "conditional@4" in table and len(table.splitlines()) == len(rows) + 1


def test_the_packed_baseline_gets_its_own_column():
    from hf_treegen.bench import run_strategies
    from hf_treegen.bench.harness import format_table

    model = tiny_target(seed=4)
    drafter = tiny_domino(model)
    prompts = [torch.tensor([[5, 6, 7, 8]]), torch.tensor([[9, 10, 11]])]
    results = {r.name: r for r in run_strategies(model, prompts, drafter, ["ar_packed", "conditional@4"],
                                                 max_new_tokens=8, progress=False, lean=False)}
    packed = results["ar_packed"]
    assert packed.equal == 2 and packed.rounds == 0  # stock decoding on other kernels: same tokens, no tree
    assert packed.packed_speedups == [1.0, 1.0]
    assert len(results["conditional@4"].packed_speedups) == 2
    header, *rows = format_table(list(results.values())).splitlines()
    assert "vs packed" in header and len(rows) == 3
    without = run_strategies(model, prompts[:1], drafter, ["conditional@4"], max_new_tokens=8, progress=False,
                             lean=False)
    assert "vs packed" not in format_table(without).splitlines()[0]
    assert without[1].row()["speedup_vs_packed"] is None


def test_malformed_prompt_file_names_the_line(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "fine", "category": "a"}\n\n{"prompt": broken}\n')
    with pytest.raises(ValueError, match=r"p.jsonl:3: not valid JSON"):
        load_prompt_texts(str(f))
    f.write_text('{"text": "no prompt field"}\n')
    with pytest.raises(ValueError, match=r"p.jsonl:1: .*\"prompt\" field"):
        load_prompt_texts(str(f))
    with pytest.raises(ValueError, match="Unknown builtin prompt set 'nope'"):
        load_prompt_texts("builtin:nope")


def test_unknown_strategy_lists_the_known_ones():
    with pytest.raises(ValueError, match="choose from: ar, ar_packed, prompt_lookup, prompt_lookup_packed, hf_dflash, dflash_ref, chain, marginal"):
        parse_strategies("ar,dominotree")
    with pytest.raises(ValueError, match="budget suffix is a positive int"):
        parse_strategies("conditional@eight")
    with pytest.raises(ValueError, match="malformed suffix \\+lookupmany"):
        parse_strategies("conditional@4+lookupmany")


def test_a_tree_spec_carries_budget_and_lookup():
    from hf_treegen.bench.harness import parse_tree_spec
    from hf_treegen.generation.options import TreeOptions as T

    assert parse_tree_spec("conditional@4+lookup8", 16) == (T("conditional", budget=4, lookup=8), None)
    assert parse_tree_spec("auto+lookup0", None) == (T("auto", lookup=0), None)
    assert parse_tree_spec("conditional", 16) == (T("conditional", budget=16), None)  # no suffix: defaults
    assert parse_tree_spec("auto+nostore", None) == (T("auto", datastore=False), None)
    assert parse_tree_spec("conditional@4+lookup8+nostore", 16) == (T("conditional", budget=4, lookup=8,
                                                                      datastore=False), None)
    assert parse_tree_spec("conditional@4+lookup8:2layers", 16) == (T("conditional", budget=4, lookup=8), "2layers")
    assert parse_tree_spec("auto", None).drafter is None
    assert parse_tree_spec("conditional@4+lookup8+paths4", 16).options.lookup_paths == 4
    # a spec generate() would refuse is refused when written
    with pytest.raises(ValueError, match="paths counts datastore continuations"):
        parse_tree_spec("auto+paths2+nostore:2layers", None)
    # suffixes in any order
    assert parse_tree_spec("conditional@4+inside3+lookup8", 16).options == T("conditional", budget=4, lookup=8,
                                                                             lookup_inside=3)
    assert parse_tree_spec("auto+inside0", None).options.lookup_inside == 0
    for bad in ("auto+paths0", "auto+inside", "auto+insidey2", "auto+", "conditional+lookup-1"):
        with pytest.raises(ValueError, match="malformed suffix"):
            parse_tree_spec(bad, None)
    with pytest.raises(ValueError, match="drafter suffix names a drafter"):
        parse_tree_spec("auto:", None)


def test_a_compared_drafter_runs_every_tree_strategy_again_on_the_same_prompts(saved_pair, tmp_path):
    """--compare-drafter: rows STRATEGY:NAME beside the main drafter's, each drafter's output still stock's."""
    other = tmp_path / "other-drafter"
    model = tiny_target("llama", torch.float32, vocab=272)
    tiny_domino(model, seed=11).save_pretrained(other)
    out_json = tmp_path / "bench.json"
    rc = main(["bench", "--model", str(saved_pair / "model"), "--drafter", str(saved_pair / "drafter"),
               "--compare-drafter", str(other), "--prompts", "builtin:chat", "--num-prompts", "2",
               "--max-new-tokens", "8", "--strategies", "ar,conditional@4", "--no-lean", "--json", str(out_json)])
    assert rc == 0
    rows = {r["strategy"]: r for r in json.loads(out_json.read_text())["tables"]["0.0"]["rows"]}
    assert set(rows) == {"ar", "conditional@4", "conditional@4:other-drafter"}  # baselines run once
    assert all(r["equal"] == r["prompts"] == 2 for r in rows.values())


def test_compared_drafters_get_distinct_labels_and_unknown_labels_are_errors():
    from hf_treegen.bench import run_strategies
    from hf_treegen.bench.run import drafter_labels, with_other_drafters

    assert drafter_labels(["a/d", "b/d/", "c"]) == ["d", "d-2", "c"]
    assert with_other_drafters(["ar", "auto", "chain@4"], ["x"]) == ["ar", "auto", "chain@4", "auto:x", "chain@4:x"]
    assert with_other_drafters(["auto", "auto:y"], ["x"]) == ["auto", "auto:y", "auto:x"]  # y keeps its drafter
    model = tiny_target(seed=4)
    with pytest.raises(ValueError, match="names drafter 'x', but the drafters given are none"):
        run_strategies(model, [torch.tensor([[5, 6]])], tiny_domino(model), ["auto:x"], max_new_tokens=2,
                       progress=False)


def test_unreachable_hub_dataset_says_what_to_do(monkeypatch):
    from hf_treegen.bench.prompt_files import load_prompt_texts

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="builtin:code,explain,chat"):
        load_prompt_texts("hub:gsm8k", limit=4)
    with pytest.raises(ValueError, match="unknown Hub prompt set"):
        load_prompt_texts("hub:nonsense")


def test_peer_rows_run_a_plain_dflash_drafter_and_refuse_the_others(saved_pair, tmp_path, capsys):
    """transformers' DFlash route and z-lab's reference loop beside our chain, on one plain DFlash drafter:
    every output equals stock's and each reports tokens per round; a Domino drafter is refused by name."""
    from transformers import AutoModelForCausalLM

    from tests.helpers import tiny_drafter

    model = AutoModelForCausalLM.from_pretrained(saved_pair / "model")
    tiny_drafter(model).save_pretrained(tmp_path / "dflash")
    out_json = tmp_path / "peers.json"
    rc = main(["bench", "--model", str(saved_pair / "model"), "--drafter", str(tmp_path / "dflash"),
               "--prompts", "builtin:code", "--num-prompts", "2", "--max-new-tokens", "8", "--no-lean",
               "--strategies", "ar,hf_dflash,dflash_ref,chain", "--json", str(out_json)])
    assert rc == 0
    rows = {r["strategy"]: r for r in json.loads(out_json.read_text())["tables"]["0.0"]["rows"]}
    for name in ("hf_dflash", "dflash_ref", "chain"):
        assert rows[name]["equal"] == rows[name]["prompts"] == 2 and rows[name]["tau"] >= 1.0
    rc = main(["bench", "--model", str(saved_pair / "model"), "--drafter", str(saved_pair / "drafter"),
               "--prompts", "builtin:code", "--num-prompts", "1", "--max-new-tokens", "4",
               "--strategies", "ar,hf_dflash"])
    assert rc == 2 and "transformers' DFlash route cannot run this drafter" in capsys.readouterr().err


def test_prompt_lookup_packed_runs_transformers_prompt_lookup_on_the_packed_kernels(monkeypatch):
    import contextlib

    from hf_treegen.bench import harness, run_strategies

    model = tiny_target(seed=4)
    packing = []  # True while the harness holds the packed kernels

    @contextlib.contextmanager
    def recording_packing(*_, **__):
        packing.append(True)
        yield
        packing.pop()

    calls = []  # (packed, prompt lookup asked) of every generate() call
    real_generate = model.generate

    def recording_generate(*args, **kwargs):
        calls.append((bool(packing), "prompt_lookup_num_tokens" in kwargs))
        return real_generate(*args, **kwargs)

    monkeypatch.setattr(harness, "packed_linears", recording_packing)
    monkeypatch.setattr(model, "generate", recording_generate)
    results = run_strategies(model, [torch.tensor([[5, 6, 7, 8, 5, 6]])], tiny_domino(model),
                             ["prompt_lookup", "prompt_lookup_packed"], max_new_tokens=8, progress=False, lean=False)
    assert calls == [(False, False), (False, True), (True, True)]  # stock, prompt lookup, prompt lookup packed
    assert all(r.equal == 1 for r in results)


def test_generate_takes_the_strategy_written_as_bench_writes_it(saved_pair, capsys, monkeypatch):
    """``hf-treegen generate --strategy conditional@3+lookup2+nostore`` reaches generate() as the same
    TreeOptions the bench name parses to, and prints the tokens lookup supplied."""
    from hf_treegen.bench.harness import parse_tree_spec
    from hf_treegen.generation import TreeGenerationMixin, TreeOptions

    seen = []
    real = TreeGenerationMixin.generate

    def recording(self, *args, **kwargs):
        seen.append(TreeOptions.from_kwargs(**{k: v for k, v in kwargs.items() if k.startswith("tree_")}))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(TreeGenerationMixin, "generate", recording)
    written = "conditional@3+lookup2+nostore"
    rc = main(["generate", "a b a b a b", "--model", str(saved_pair / "model"), "--drafter",
               str(saved_pair / "drafter"), "--max-new-tokens", "6", "--strategy", written, "--budget", "9"])
    assert rc == 0 and "tokens from lookup" in capsys.readouterr().err
    assert seen == [parse_tree_spec(written, 9).options]
    assert seen[0] == TreeOptions("conditional", budget=3, lookup=2, datastore=False)


def test_bench_batch_size_measures_batches_against_stock_batched_generate(saved_pair, capsys):
    rc = main(["bench", "--model", str(saved_pair / "model"), "--drafter", str(saved_pair / "drafter"),
               "--prompts", "builtin:chat", "--num-prompts", "4", "--max-new-tokens", "6", "--batch-size", "2",
               "--strategies", "ar,ar_packed,conditional@3,auto"])
    out = capsys.readouterr().out
    assert rc == 0 and "in batches of 2" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[-4:]}
    assert set(rows) == {"ar", "ar_packed", "conditional@3", "auto"}
    assert all(row[-2] == "4/4" for row in rows.values())  # every row's tokens equal stock batched generate()'s
    assert main(["bench", "--batch-size", "2", "--strategies", "ar,prompt_lookup"]) == 2
    assert "drop prompt_lookup" in capsys.readouterr().err
