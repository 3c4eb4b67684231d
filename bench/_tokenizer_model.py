"""A small real model directory for the served-model path, trained here with the `tokenizers` library (nothing is
downloaded): a byte-level BPE with a BOS post-processor, and a tokenizer_config.json with a ChatML chat template,
laid out as a Hugging Face model directory is. Used by bench/route_served_model.py and by the tests
(tests/fixtures/tokenizer.py)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIALS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]


def train_tokenizer(directory: Path, texts: Iterable[str], vocab_size: int) -> tuple[Path, Path]:
    """``directory/tokenizer.json`` (a byte-level BPE of ``vocab_size`` tokens trained on ``texts``) and
    ``directory/tokenizer_config.json`` (the ChatML template; the EOS token as an AddedToken object, the shape many
    models ship)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = directory / "tokenizer.json"
    tok.save(str(tokenizer))
    config = directory / "tokenizer_config.json"
    config.write_text(
        json.dumps(
            {
                "bos_token": "<s>",
                "eos_token": {"content": "<|im_end|>", "special": True},
                "chat_template": CHATML,
            }
        )
    )
    return tokenizer, config
