"""Sizing a drafter's training for 1-8B targets: computed from the model shapes, nothing timed.

    .venv/bin/python benchmarks/training_sizing.py              # prints, writes docs/results/training_sizing.txt
    .venv/bin/python benchmarks/training_sizing.py --no-write   # prints only

Each target is built from the shape in its public ``config.json`` (hidden size, layers, heads,
intermediate size, vocabulary, tied embeddings) with transformers' own class, on the ``meta`` device:
no memory is allocated and no weights are read. Each drafter is built the way ``hf-treegen
train-drafter`` builds one, with ``DrafterConfig.for_target`` and hf_treegen's drafter class, also on
``meta``. The SmolLM2-135M row is there to check the arithmetic against what was measured with it
(the shipped drafter has 18.3M parameters; its four-tap feature cache took 8.2 GB for 1.77M tokens).
Two drafter shapes are sized for every target:

* **1 layer, 4 taps, block 8**: the recipe of the drafter shipped for SmolLM2 (Domino head, r = 256,
  G = 256);
* **5 layers, 5 taps, block 16**: the shape of the published DFlash and Domino drafters for Qwen3-4B
  and -8B (Domino head, r = 256, G = 1024).

What is computed, and from what:

* parameters: counted from the built modules (the target's tied embedding counted once; the drafter
  borrows the target's embedding and LM head, so they are not the drafter's);
* target weights: parameters x 2 bytes (bf16), or x 4 (fp32, ``--dtype fp32``, train-drafter's default);
* drafter training state: fp32 weights, fp32 gradients and AdamW's two fp32 moments, 16 bytes per
  parameter (activations are not counted; the logits of one step over the full vocabulary in fp32,
  rows x vocabulary x 4 bytes, are shown for scale; a draft vocabulary shrinks them);
* feature cache: taps x hidden size x 2 bytes (fp16) per token, for every token of a sequence, prompt
  included;
* data generation, per million tokens: target forwards (generated answers: one forward per new token
  for a batch of 32 answers, generate-data's default; teacher-forced labels: one forward per batch of 8
  chunks of 512 tokens, teacher-forced-data's defaults), the weight bytes those forwards read (each
  reads all the target's weights once, in fp32: generate-data always loads the target in fp32, and
  teacher-forced-data does by default and must with --feature-layers), and the arithmetic, 2 x
  parameters FLOPs per token (attention over the context not counted);
* the KV cache of one generate-data batch: 32 sequences of 512 prompt + 128 new tokens, fp32.

Time is estimated only for generated data, as a lower bound per GPU type: the larger of weight bytes
read / memory bandwidth and FLOPs / peak FP32 FLOP/s, from the datasheet figures in
``benchmarks/gpu_peaks.json``. A run's own ``summary.json`` (``train_seconds``) and the data manifest
(tokens per second) give the real figures.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from hf_treegen.drafters.config import DrafterConfig, default_target_layer_ids
from hf_treegen.train.drafter_setup import drafter_class

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "training_sizing.txt"
GPU_PEAKS = Path(__file__).with_name("gpu_peaks.json")
COMMAND = ".venv/bin/python benchmarks/training_sizing.py"

GB = 1e9
MILLION = 1_000_000
GENERATE_BATCH = 32  # generate-data --batch-size default
GENERATE_PROMPT, GENERATE_NEW = 512, 128  # generate-data --max-prompt-tokens and --max-new-tokens defaults
TF_BATCH, TF_CHUNK = 8, 512  # teacher-forced-data --batch-size and --chunk-tokens defaults
SEQUENCES, ANCHORS = 8, 16  # train-drafter --sequences and --anchors defaults


# Public config.json shapes (Hugging Face model pages): hidden, layers, heads, kv heads, head_dim,
# intermediate, vocabulary, tied embeddings.
TARGETS = {
    "SmolLM2-135M": (LlamaConfig, LlamaForCausalLM,  # the embedded target, for reference against what was measured
                     dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                          head_dim=64, intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True)),
    "Llama-3.2-1B": (LlamaConfig, LlamaForCausalLM,
                     dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                          head_dim=64, intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True)),
    "Llama-3.2-3B": (LlamaConfig, LlamaForCausalLM,
                     dict(hidden_size=3072, num_hidden_layers=28, num_attention_heads=24, num_key_value_heads=8,
                          head_dim=128, intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True)),
    "Qwen3-4B": (Qwen3Config, Qwen3ForCausalLM,
                 dict(hidden_size=2560, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                      head_dim=128, intermediate_size=9728, vocab_size=151936, tie_word_embeddings=True)),
    "Llama-3.1-8B": (LlamaConfig, LlamaForCausalLM,
                     dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                          head_dim=128, intermediate_size=14336, vocab_size=128256, tie_word_embeddings=False)),
    "Qwen3-8B": (Qwen3Config, Qwen3ForCausalLM,
                 dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                      head_dim=128, intermediate_size=12288, vocab_size=151936, tie_word_embeddings=False)),
}


@dataclass(frozen=True)
class DrafterShape:
    name: str
    layers: int
    taps: int
    block: int
    gru_hidden: int


DRAFTERS = (DrafterShape("1 layer, 4 taps, block 8 (the shipped SmolLM2 recipe)", 1, 4, 8, 256),
            DrafterShape("5 layers, 5 taps, block 16 (the published Qwen3 DFlash / Domino shape)", 5, 5, 16, 1024))


def count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())  # parameters() yields a tied weight once


def build_target(name: str):
    config_class, model_class, shape = TARGETS[name]
    config = config_class(**shape)
    with torch.device("meta"):
        model = model_class(config)
    return config, model


def build_drafter(target_config, shape: DrafterShape):
    taps = default_target_layer_ids(target_config.num_hidden_layers, shape.taps)
    config = DrafterConfig.for_target(target_config, num_hidden_layers=shape.layers, block_size=shape.block,
                                      projector_type="domino", target_layer_ids=taps, gru_hidden_dim=shape.gru_hidden)
    with torch.device("meta"):
        drafter = drafter_class(config)(config)
    return config, drafter


def kv_bytes_per_token(config, bytes_per_value: int = 4) -> int:
    return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * bytes_per_value  # K and V


def fmt_params(n: float) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def tables() -> str:
    out = []
    targets = {name: build_target(name) for name in TARGETS}

    out.append("Targets (public config.json shapes; parameters counted from the built model)")
    head = f"{'target':<14}{'layers':>7}{'hidden':>7}{'vocab':>8}{'params':>8}{'bf16 GB':>9}{'fp32 GB':>9}" \
           f"{'KV MB/token':>12}{'generate-data batch KV GB':>27}"
    out += [head, "-" * len(head)]
    for name, (config, model) in targets.items():
        params = count(model)
        kv = kv_bytes_per_token(config)
        batch_kv = kv * GENERATE_BATCH * (GENERATE_PROMPT + GENERATE_NEW)
        out.append(f"{name:<14}{config.num_hidden_layers:>7}{config.hidden_size:>7}{config.vocab_size:>8}"
                   f"{fmt_params(params):>8}{2 * params / GB:>9.1f}{4 * params / GB:>9.1f}{kv / 1e6:>12.3f}"
                   f"{batch_kv / GB:>27.1f}")
    out.append(f"KV: K and V of every layer in fp32 (generate-data loads the target in fp32); generate-data batch: "
               f"{GENERATE_BATCH} sequences x ({GENERATE_PROMPT} prompt + {GENERATE_NEW} new) tokens")

    for shape in DRAFTERS:
        out += ["", f"Drafter: {shape.name}; Domino head r = 256, G = {shape.gru_hidden}"]
        head = (f"{'target':<14}{'taps':<18}{'params':>8}{'saved bf16 MB':>14}{'train state GB':>15}"
                f"{'rows/step':>10}{'logits/step GB':>15}{'features GB/M tokens':>21}")
        out += [head, "-" * len(head)]
        for name, (config, _) in targets.items():
            dconfig, drafter = build_drafter(config, shape)
            params = count(drafter)
            rows = SEQUENCES * ANCHORS * dconfig.num_draft_positions
            logits = rows * config.vocab_size * 4
            features = dconfig.feature_size * 2 * MILLION
            taps = ",".join(str(i) for i in dconfig.target_layer_ids)
            out.append(f"{name:<14}{taps:<18}{fmt_params(params):>8}{2 * params / 1e6:>14.0f}{16 * params / GB:>15.2f}"
                       f"{rows:>10}{logits / GB:>15.2f}{features / GB:>21.1f}")
        out.append(f"train state: 16 bytes per parameter (fp32 weights, gradients, two AdamW moments); rows/step: "
                   f"{SEQUENCES} sequences x {ANCHORS} anchors x draft positions (train-drafter's defaults); "
                   f"logits/step: rows x full vocabulary x 4 bytes, one tensor")

    out += ["", "Data generation per million tokens (weights read in fp32, as generate-data and teacher-forced-data "
                "load the target; FLOPs = 2 x params per token)"]
    head = (f"{'target':<14}{'TFLOP':>8}{'generated: forwards':>21}{'weights read TB':>17}"
            f"{'teacher-forced: forwards':>26}{'weights read TB':>17}")
    out += [head, "-" * len(head)]
    for name, (config, model) in targets.items():
        params = count(model)
        generated = MILLION / GENERATE_BATCH
        forced = MILLION / (TF_BATCH * TF_CHUNK)
        out.append(f"{name:<14}{2 * params * MILLION / 1e12:>8.0f}{generated:>21,.0f}"
                   f"{generated * 4 * params / 1e12:>17.1f}"
                   f"{forced:>26,.0f}{forced * 4 * params / 1e12:>17.2f}")
    out.append(f"generated: one forward per new token for a batch of {GENERATE_BATCH} answers (prefills not counted); "
               f"teacher-forced: one forward per {TF_BATCH} chunks of {TF_CHUNK} tokens")
    out += ["", *generation_hours(targets)]
    return "\n".join(out)


def generation_hours(targets) -> list[str]:
    """Estimated GPU-hours per million generated tokens: a lower bound, the larger of the weight bytes
    the forwards read over memory bandwidth and their FLOPs over peak FP32 throughput (datasheet figures
    of benchmarks/gpu_peaks.json). N processes on N GPUs each answer their own batches: divide by N."""
    peaks = {k: v for k, v in json.loads(GPU_PEAKS.read_text()).items() if not k.startswith("_")}
    out = ["Generated data: estimated GPU-hours per million tokens, lower bound (fp32 target, batch "
           f"{GENERATE_BATCH}; max of weights read / bandwidth and FLOPs / peak FP32; datasheet peaks, not measured)"]
    head = f"{'target':<14}" + "".join(f"{gpu:>16}" for gpu in peaks)
    out += [head, "-" * len(head)]
    for name, (_, model) in targets.items():
        params = count(model)
        read_bytes = MILLION / GENERATE_BATCH * 4 * params
        flops = 2 * params * MILLION
        cells = [max(read_bytes / (p["bandwidth_tb_s"] * 1e12), flops / (p["fp32_tflop_s"] * 1e12)) / 3600
                 for p in peaks.values()]
        out.append(f"{name:<14}" + "".join(f"{hours:>16.2f}" for hours in cells))
    out.append("with N processes on N GPUs (accelerate launch --num_processes N): about 1/N of these hours each")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help=f"print only; do not write {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    text = (f"{COMMAND}\n# computed from the model shapes with transformers' and hf_treegen's classes on the meta "
            f"device; nothing is timed or measured\n\n{tables()}\n")
    print(text, end="")
    if not args.no_write:
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
