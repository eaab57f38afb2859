"""What a verl run reads from disk, made locally: nothing can be downloaded here.

- a tiny word-level tokenizer (``tokenizers``), saved as a ``PreTrainedTokenizerFast`` with a
  chat template, so verl's ``hf_tokenizer`` / ``HFModelConfig`` load it from a local path;
- a tiny Llama config (``config.json``, no weights: the stand-in engine and the CPU workers
  build their own random torch modules of the same vocabulary);
- a train/val parquet in verl's RL layout (``data_source``, chat ``prompt``, ``reward_model``).
"""

from __future__ import annotations

import os
from typing import Dict, List

WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "add", "and", "what", "is", "the", "sum", "of", "answer", "yes", "no"]
SPECIALS = ["<pad>", "<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "user", "assistant",
            "system"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|> {{ message['role'] }} {{ message['content'] }} "
    "<|im_end|> {% endfor %}{% if add_generation_prompt %}<|im_start|> assistant {% endif %}")
DATA_SOURCE = "cpu_standin_arith"


def vocabulary() -> Dict[str, int]:
    return {token: index for index, token in enumerate(SPECIALS + WORDS)}


def write_model_dir(path: str) -> str:
    """A loadable model directory (tokenizer + config, no weights) at ``path``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    os.makedirs(path, exist_ok=True)
    vocab = vocabulary()
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", eos_token="<|im_end|>",
        bos_token=None, model_max_length=256)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(path)
    LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32,
                num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                max_position_embeddings=256, pad_token_id=vocab["<pad>"],
                eos_token_id=vocab["<|im_end|>"], bos_token_id=None,
                tie_word_embeddings=True, architectures=["LlamaForCausalLM"]).save_pretrained(path)
    return path


def _rows(count: int) -> List[dict]:
    rows = []
    for index in range(count):
        a, b = WORDS[index % 5], WORDS[(index + 1) % 5]
        rows.append({
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": f"what is the sum of {a} and {b}"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "yes"},
            "extra_info": {"index": index, "split": "train"},
        })
    return rows


def write_dataset(directory: str, train_rows: int, val_rows: int = 2) -> Dict[str, str]:
    """``train.parquet`` and ``val.parquet`` in ``directory``; returns their paths."""
    import pandas as pd

    os.makedirs(directory, exist_ok=True)
    paths = {"train": os.path.join(directory, "train.parquet"),
             "val": os.path.join(directory, "val.parquet")}
    pd.DataFrame(_rows(train_rows)).to_parquet(paths["train"])
    pd.DataFrame(_rows(val_rows)).to_parquet(paths["val"])
    return paths


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """verl's ``custom_reward_function``: 1.0 when the response holds the ground truth word."""
    return 1.0 if ground_truth in str(solution_str).split() else 0.0
