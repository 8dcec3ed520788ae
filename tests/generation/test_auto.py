"""tree_strategy="auto": exact, deterministic for a fixed cost profile, and back to plain steps when
drafting does not pay."""

import dataclasses
import json

import pytest
import torch

import hf_treegen as htg
from hf_treegen.builders.auto import MAX_CAP, MIN_CAP, tree_cap
from hf_treegen.calibration import calibrate as real_calibrate  # imported before conftest pins it
from hf_treegen.calibration import calibration_dir, clear_calibration_cache, profile_key
from hf_treegen.generation.policy import StepFallback
from tests.helpers import (CPU_LIKE, FLAT_COSTS, ScriptedDomino, ScriptedDrafter, greedy_reference, random_prompts,
                           tiny_domino, tiny_target)


def run(model, drafter, prompt, new_tokens, **kw):
    return model.generate(prompt, assistant_model=drafter, tree_strategy="auto", max_new_tokens=new_tokens,
                          do_sample=False, return_dict_in_generate=True, **kw)


@pytest.mark.parametrize("profile", [FLAT_COSTS, CPU_LIKE], ids=["flat", "cpu_like"])
@pytest.mark.parametrize("domino", [False, True], ids=["dflash", "domino"])
def test_auto_matches_stock_greedy_with_a_noisy_oracle(profile, domino):
    model = tiny_target("llama", torch.float32)
    for i, prompt in enumerate(random_prompts(6, model.config.vocab_size, seed=21)):
        ref = greedy_reference(model, prompt, 40)
        cls = ScriptedDomino if domino else ScriptedDrafter
        out = run(model, cls(model, ref, block_size=8, noise=0.3, seed=i), prompt, 40, tree_costs=profile)
        assert torch.equal(out.sequences, ref)
        assert out.tree_stats.rounds > out.tree_stats.plain_steps  # it drafted


def test_auto_falls_back_to_plain_steps_with_a_drafter_that_never_matches():
    model = tiny_target("qwen3", torch.float32)
    prompt = random_prompts(1, model.config.vocab_size, seed=5)[0]
    ref = greedy_reference(model, prompt, 96)
    adversary = ScriptedDrafter(model, ref, block_size=8, adversarial=True)
    # no context lookup: this random model's output loops, and lookup's continuations would (rightly) pay
    out = run(model, adversary, prompt, 96, tree_costs=CPU_LIKE, tree_lookup=0)
    assert torch.equal(out.sequences, ref)
    stats = out.tree_stats
    drafted = stats.rounds - stats.plain_steps
    # about seven rounds to lose the optimistic start (the memory spans ~20 rounds), then probes after
    # waits of 4, 8, 16, 32 steps
    assert stats.plain_steps >= 80 and drafted <= 12, (stats.plain_steps, drafted)


def test_auto_keeps_drafting_with_an_oracle_and_builds_identical_trees_when_called_twice():
    model = tiny_target("llama", torch.float32)
    prompt = random_prompts(1, model.config.vocab_size, seed=9)[0]
    ref = greedy_reference(model, prompt, 48)
    oracle = ScriptedDomino(model, ref, block_size=8)
    first, second = (run(model, oracle, prompt, 48, tree_costs=CPU_LIKE) for _ in range(2))
    assert torch.equal(first.sequences, ref) and torch.equal(second.sequences, ref)
    assert first.tree_stats.plain_steps == 0 and first.tree_stats.tau > 6
    assert first.tree_stats.tree_sizes == second.tree_stats.tree_sizes
    assert first.tree_stats.accepted_lengths == second.tree_stats.accepted_lengths


def test_auto_with_a_random_domino_drafter_matches_stock():
    model = tiny_target("qwen3", torch.float64)
    drafter = tiny_domino(model)
    for prompt in random_prompts(8, model.config.vocab_size, seed=2):
        ref = greedy_reference(model, prompt, 24)
        out = run(model, drafter, prompt, 24, tree_costs=CPU_LIKE)
        assert torch.equal(out.sequences, ref)


def test_auto_builds_the_full_cap_once_then_room_to_grow_past_the_last_cut():
    from hf_treegen.builders.auto import CANDIDATE_GROWTH, AutoBuilder, auto_settings
    from tests.builders.test_conditional import make_block

    model = tiny_target("qwen3", torch.float32)
    drafter = tiny_domino(model)
    builder = AutoBuilder(auto_settings(drafter, model.config.vocab_size, budget=32), profile=CPU_LIKE,
                          conditional=True)
    built: list[int] = []  # candidates built per round
    real_nodes = builder.candidate_nodes

    def counting_nodes(block, budget):
        nodes = real_nodes(block, budget)
        built.append(len(nodes))
        return nodes

    builder.candidate_nodes = counting_nodes
    cuts = []
    for seed in range(6):
        tree = builder(make_block(drafter, seed, scale=6.0), root_token=0)
        cuts.append(tree.num_drafted)
        builder.observe(tree, [0])
    assert built[0] == 32  # the first round sees every candidate the cap allows
    for last_cut, candidates in zip(cuts, built[1:]):
        assert candidates <= min(32, CANDIDATE_GROWTH * last_cut + MIN_CAP)
    assert min(built[1:]) < 32, (cuts, built)  # CPU_LIKE pays for small trees only: later rounds build fewer


def test_tree_cap_follows_the_verify_curve():
    assert tree_cap(FLAT_COSTS) == MAX_CAP
    assert MIN_CAP <= tree_cap(CPU_LIKE) <= 32
    steep = htg.CostProfile.from_verify_seconds({1: 0.01, 2: 0.05, 65: 1.0})
    assert tree_cap(steep) == MIN_CAP


def test_step_fallback_waits_longer_after_each_failed_probe_and_resets_on_success():
    policy = StepFallback(CPU_LIKE, first_wait=2, max_wait=8)
    waits = []  # plain steps after each failed probe, from the first wait on
    while len(waits) < 4:
        assert policy.draft_this_round()
        policy.observe(True, nodes=4, emitted=1)  # a failed probe: one token for a draft round's cost
        n = 0
        while not policy.draft_this_round():
            policy.observe(False, 0, 1)
            n += 1
        if n or waits:
            waits.append(n)
    assert waits == [2, 4, 8, 8], waits
    for _ in range(3):  # rich rounds lift the decayed rate above a step's
        policy.observe(True, nodes=4, emitted=8)
    assert policy.draft_rate() > policy.step_rate and policy.next_wait == 2


@pytest.mark.parametrize("streak", [[3, 1, 1, 1, 1], [5, 1, 1, 1, 1, 1, 1, 1], [6] + [1] * 9,
                                    [8] + [1] * 14])
def test_step_fallback_keeps_drafting_through_dry_streaks_of_a_drafter_that_pays(streak):
    # rounds of 4 nodes emitting these tokens in turn beat plain steps on average (checked below), but
    # each pattern has runs of rounds that accept nothing; a short memory (0.8) took them for a drafter
    # that does not pay and went to plain steps
    policy = StepFallback(CPU_LIKE)
    assert sum(streak) / len(streak) / CPU_LIKE.round_seconds(4) > 1.1 * policy.step_rate
    plain = drafted = 0
    while drafted < 200:
        if policy.draft_this_round():
            policy.observe(True, nodes=4, emitted=streak[drafted % len(streak)])
            drafted += 1
        else:
            policy.observe(False, 0, 1)
            plain += 1
    assert plain == 0


def test_tree_costs_must_be_a_profile_and_needs_a_strategy():
    model = tiny_target("llama", torch.float32)
    prompt = random_prompts(1, model.config.vocab_size)[0]
    with pytest.raises(TypeError, match="CostProfile"):
        model.generate(prompt, assistant_model=tiny_domino(model), tree_strategy="auto", tree_costs={"step": 1},
                       max_new_tokens=4)
    with pytest.raises(ValueError, match="tree_costs given without tree_strategy"):
        model.generate(prompt, tree_costs=FLAT_COSTS, max_new_tokens=4)


def test_calibrate_measures_once_caches_where_the_user_can_find_it_and_clears(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TREEGEN_CACHE", str(tmp_path))
    model = tiny_target("llama", torch.float32)
    drafter = tiny_domino(model)
    profile = real_calibrate(model, drafter, max_rows=9, progress=False)
    path = calibration_dir() / f"{profile_key(model, drafter)}.json"
    assert path.is_file() and path.parent == tmp_path / "calibration"
    assert profile.verify.rows[0] == 1 and profile.verify.rows[-1] == 9
    assert profile.draft_s > 0 and profile.build_s_per_node > 0
    assert json.loads(path.read_text())["round_s"] == profile.round_s >= 0 and profile.step_s >= 0

    def no_measuring(*_, **__):
        raise AssertionError("a cached profile must not be measured again")

    monkeypatch.setattr("hf_treegen.calibration.measure_profile", no_measuring)
    again = real_calibrate(model, drafter, max_rows=9, progress=False)
    assert again == profile
    assert clear_calibration_cache() == [path] and not path.exists()


def test_verify_curve_is_timed_at_every_small_size_in_interleaved_passes(monkeypatch):
    from hf_treegen import calibration

    assert calibration.verify_sizes(9) == list(range(1, 10))
    assert calibration.verify_sizes(65) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 32, 48, 64, 65]
    model = tiny_target("llama", torch.float32)
    timed: list[int] = []  # the widths of the verify forwards, in the order they ran
    real_prefill = calibration.decode_prefill

    def recording_prefill(*args, **kwargs):
        logits, verify = real_prefill(*args, **kwargs)

        def recording_verify(tree, *rest):
            timed.append(tree.num_nodes)
            return verify(tree, *rest)

        return logits, recording_verify

    monkeypatch.setattr(calibration, "decode_prefill", recording_prefill)
    curve = calibration.measure_verify_cost(model, max_rows=12, context=8, repeats=2)
    sizes = calibration.verify_sizes(12)
    assert curve.rows == tuple(sizes)
    assert timed == sizes * 3  # a warm-up pass, then two timed passes over every size


def test_draft_rounds_are_timed_between_the_verify_passes(monkeypatch):
    from hf_treegen import calibration

    model = tiny_target("llama", torch.float32)
    events: list[str] = []
    for timer, method, name in ((calibration.VerifyTimer, "timed_pass", "verify"),
                                (calibration._DraftTimer, "timed_rounds", "draft")):
        real = getattr(timer, method)

        def recording(self, *args, real=real, name=name, **kwargs):
            events.append(name)
            return real(self, *args, **kwargs)

        monkeypatch.setattr(timer, method, recording)
    passes: list[int] = []
    profile = calibration.measure_profile(model, tiny_domino(model), max_rows=4, context=8, repeats=3,
                                          draft_rounds=2, on_pass=lambda: passes.append(1))
    assert events == ["verify", "draft"] * 4 and len(passes) == 4  # a warm-up pass, then three timed
    assert profile.draft_s > 0 and profile.build_s_per_node > 0 and profile.verify.rows == (1, 2, 3, 4)


def test_a_verify_size_costs_its_fastest_timed_pass(monkeypatch):
    """Other work on the machine only adds time, so a profile keeps each size's fastest pass: one slow
    pass (here the second) changes nothing, where a median of a few passes would move with it."""
    from hf_treegen import calibration

    base = {1: 0.050, 2: 0.052, 3: 0.055, 4: 0.060}
    slowdown = iter([1.3, 1.0, 1.6, 1.1, 1.2])  # per pass, warm-up first

    def scripted_pass(self, keep):
        factor = next(slowdown)
        if keep:
            for rows in self.sizes:
                self.runs[rows].append(base[rows] * factor)

    monkeypatch.setattr(calibration.VerifyTimer, "timed_pass", scripted_pass)
    profile = calibration.measure_profile(tiny_target("llama", torch.float32), max_rows=4, context=8, repeats=4,
                                          packed=False)
    assert profile.verify.rows == (1, 2, 3, 4)
    assert profile.verify.seconds == pytest.approx(tuple(base.values()))


def test_a_timed_draft_includes_the_context_of_the_last_commits(monkeypatch):
    """As in decoding, every timed draft first takes the features of a round's committed tokens; the
    block runs at the next free position after them."""
    from hf_treegen import calibration
    from hf_treegen.drafters.dflash import DraftSession

    model = tiny_target("llama", torch.float32)
    drafts: list[tuple[int, int, int]] = []  # (start, session length, queued feature batches)
    real_draft = DraftSession.draft

    def recording(self, anchor_token, start):
        drafts.append((start, self.length, len(self._pending)))
        return real_draft(self, anchor_token, start)

    monkeypatch.setattr(DraftSession, "draft", recording)
    calibration.measure_profile(model, tiny_domino(model), max_rows=2, context=8, repeats=1, draft_rounds=2)
    per_round = calibration._DraftTimer.COMMITTED_PER_ROUND
    assert [length for _, length, _ in drafts] == [8 + per_round * (i + 1) for i in range(4)]
    assert all(start == length and queued == 1 for start, length, queued in drafts)


def test_an_outdated_cached_profile_is_measured_again_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TREEGEN_CACHE", str(tmp_path))
    model = tiny_target("llama", torch.float32)
    path = calibration_dir() / f"{profile_key(model)}.json"
    path.write_text(json.dumps({**CPU_LIKE.to_dict(), "version": 1}))
    with pytest.warns(UserWarning, match=f"{path}.*version 1.*Measuring again"):
        profile = real_calibrate(model, max_rows=4, progress=False)
    assert profile.verify.rows == (1, 2, 3, 4)
    assert json.loads(path.read_text())["version"] == CPU_LIKE.to_dict()["version"]


def test_profile_round_trips_through_a_file(tmp_path):
    path = tmp_path / "costs.json"
    CPU_LIKE.save(path)
    assert htg.CostProfile.load(path) == CPU_LIKE
    mixed = dataclasses.replace(CPU_LIKE, packed_from_rows=5)  # default kernels below 5 rows
    mixed.save(path)
    assert htg.CostProfile.load(path) == mixed and htg.CostProfile.load(path).packed_from_rows == 5
    own_head = dataclasses.replace(CPU_LIKE, head_shortcut=False)
    own_head.save(path)
    assert htg.CostProfile.load(path) == own_head and not htg.CostProfile.load(path).head_shortcut
    assert CPU_LIKE.round_seconds(8) == pytest.approx(0.005 + 8 * 0.0001 + 0.080)
    assert CPU_LIKE.step_seconds() == pytest.approx(0.060)
    with_overhead = dataclasses.replace(CPU_LIKE, round_s=0.004)  # a round's fixed cost
    with_overhead.save(path)
    assert htg.CostProfile.load(path) == with_overhead
    assert with_overhead.round_seconds(8) == pytest.approx(CPU_LIKE.round_seconds(8) + 0.004)
    assert with_overhead.step_seconds() == CPU_LIKE.step_seconds()  # a plain step pays no draft round's cost
    both = dataclasses.replace(with_overhead, step_s=0.001)
    both.save(path)
    assert htg.CostProfile.load(path) == both and both.step_seconds() == pytest.approx(0.061)
    assert both.per_sequence(4).round_s == pytest.approx(0.001) and both.per_sequence(4).step_s == pytest.approx(0.00025)


def test_the_public_calibrate_also_times_a_rounds_fixed_costs(tmp_path, monkeypatch):
    from hf_treegen import calibration

    monkeypatch.setenv("HF_TREEGEN_CACHE", str(tmp_path))
    monkeypatch.setattr(calibration, "calibrate", real_calibrate)  # undo conftest's pin
    model = tiny_target("llama", torch.float32)
    drafter = tiny_domino(model)
    assert real_calibrate(model, drafter, max_rows=9, progress=False).round_s == 0.0  # no timer handed in
    profile = htg.calibrate(model, drafter, max_rows=9, progress=False, use_cache=False)
    assert profile.round_s > 0 and profile.step_s > 0
    assert htg.CostProfile.load(calibration_dir() / f"{profile_key(model, drafter)}.json") == profile


def test_the_fixed_costs_are_what_the_profile_leaves_out_of_measured_rounds_and_steps():
    from hf_treegen.generation.loop import measure_fixed_costs, repeating_prompt

    model = tiny_target("llama", torch.float32)
    drafter = tiny_domino(model)
    ids = repeating_prompt(random_prompts(1, model.config.vocab_size, seed=5, min_len=16, max_len=16)[0])
    assert ids.shape == (1, 96) and torch.equal(ids[:, 16:32], ids[:, :16])
    # the verify forwards count as they ran; the profile prices the draft and the build
    free = htg.CostProfile.from_verify_seconds({1: 1e-9, 65: 1e-9})  # drafting and building cost nothing
    dear = htg.CostProfile.from_verify_seconds({1: 1e-9, 65: 1e-9}, draft_s=10.0)  # a draft takes ten seconds
    round_s, step_s = measure_fixed_costs(model, drafter, free, ids, rounds=4)
    assert round_s > 0 and step_s > 0  # the walk, the commit and the loop take some time
    round_s, step_s = measure_fixed_costs(model, drafter, dear, ids, rounds=4)
    assert round_s == 0.0 and step_s > 0  # plain steps draft nothing


def test_measuring_inside_a_sampling_call_leaves_its_tokens_alone(tmp_path, monkeypatch):
    """The first auto call measures the cost profile; that must not advance the global RNG, or the same
    seeded call would sample other tokens once the profile is cached."""
    from hf_treegen import calibration

    monkeypatch.setenv("HF_TREEGEN_CACHE", str(tmp_path))
    monkeypatch.setattr(calibration, "calibrate", lambda *a, **kw: real_calibrate(*a, **{**kw, "progress": False}))
    model = tiny_target("llama", torch.float32)
    drafter = tiny_domino(model)
    prompt = random_prompts(1, model.config.vocab_size, seed=4)[0]

    def sample():
        torch.manual_seed(3)
        return model.generate(prompt, assistant_model=drafter, tree_strategy="auto", do_sample=True,
                              max_new_tokens=24)

    first = sample()  # nothing cached: this call measures
    assert list(calibration_dir().glob("*.json"))
    assert torch.equal(first, sample())  # read from the cache this time
    torch.manual_seed(0)
    state = torch.get_rng_state()
    calibration.measure_profile(model, drafter, max_rows=4, context=8, repeats=1, draft_rounds=1)
    assert torch.equal(state, torch.get_rng_state())


def test_first_use_sizes_spread_first_then_fill_in_and_reach_the_widest():
    from hf_treegen import calibration

    assert calibration.first_use_sizes(65) == [1, 4, 16, 2, 8, 32, 3, 6, 12, 64, 65]
    assert calibration.first_use_sizes(512) == [1, 4, 16, 2, 8, 32, 3, 6, 12, 64, 128, 256, 512]
    assert calibration.first_use_sizes(3) == [1, 2, 3]


def test_a_quick_calibration_with_time_to_spare_times_the_whole_grid(monkeypatch):
    from hf_treegen import calibration

    monkeypatch.setattr(calibration, "FIRST_USE_SECONDS", 1e9)  # never out of time: the passes cap it
    passes: list[int] = []
    model = tiny_target("llama", torch.float32)
    profile = calibration.measure_profile(model, tiny_domino(model), max_rows=20, context=8, repeats=3,
                                          draft_rounds=1, on_pass=lambda: passes.append(1), quick=True)
    assert profile.quick and profile.verify.rows == (1, 2, 3, 4, 6, 8, 12, 16, 20)
    assert len(passes) == 4 and profile.draft_s > 0  # a warm-up pass, then three timed


def test_a_quick_calibration_out_of_time_keeps_what_it_reached_in_one_timed_pass(monkeypatch):
    """However slow the machine, a quick calibration runs one forward per warmed size and one timed
    pass; the sizes the warm-up did not reach are left to the curve's linear extension."""
    from hf_treegen import calibration

    monkeypatch.setattr(calibration, "FIRST_USE_SECONDS", 0.0)
    passes: list[int] = []
    model = tiny_target("llama", torch.float32)
    profile = calibration.measure_profile(model, max_rows=65, context=8, repeats=5, quick=True,
                                          on_pass=lambda: passes.append(1), packed=False)
    assert profile.quick and profile.verify.rows == (1,) and len(passes) == 2


def test_the_packing_threshold_only_falls_where_the_default_kernels_were_timed():
    from hf_treegen.calibration import kernel_plan

    packed = {1: 0.050, 2: 0.051, 3: 0.052, 4: 0.053, 8: 0.055, 16: 0.060}
    cheap_defaults = {1: 0.010, 2: 0.020, 3: 0.030}  # faster than packed up to 3 rows, not timed wider
    assert kernel_plan({True: cheap_defaults}, packed) == (4, True)
    assert kernel_plan({True: {r: 1.0 for r in cheap_defaults}}, packed) == (1, True)


def test_a_first_call_measures_quickly_and_a_full_calibration_replaces_it(tmp_path, monkeypatch):
    from hf_treegen import calibration

    monkeypatch.setenv("HF_TREEGEN_CACHE", str(tmp_path))
    asked: list[dict] = []

    def recording(*args, **kwargs):
        asked.append(kwargs)
        return real_calibrate(*args, **{**kwargs, "progress": False})

    monkeypatch.setattr(calibration, "calibrate", recording)
    model = tiny_target("llama", torch.float32)
    drafter = tiny_domino(model)
    prompt = random_prompts(1, model.config.vocab_size, seed=5)[0]
    out = run(model, drafter, prompt, 8)
    assert torch.equal(out.sequences, greedy_reference(model, prompt, 8))
    assert asked and all(kwargs["quick"] for kwargs in asked)
    path = calibration_dir() / f"{profile_key(model, drafter)}.json"
    assert json.loads(path.read_text())["quick"]

    def no_measuring(*_, **__):
        raise AssertionError("a cached profile must not be measured again")

    with monkeypatch.context() as patch:
        patch.setattr(calibration, "measure_profile", no_measuring)
        assert real_calibrate(model, drafter, progress=False, quick=True).quick  # a quick call reads it
    full = real_calibrate(model, drafter, progress=False)  # a full call measures over it
    assert not full.quick and not json.loads(path.read_text())["quick"]
    monkeypatch.setattr(calibration, "measure_profile", no_measuring)
    assert real_calibrate(model, drafter, progress=False, quick=True) == full
