"""The served model's tokenization (capstan.kvcache.ServedTokenizer): a real tokenizer.json trained here with the
`tokenizers` library and a ChatML template, used as vLLM's OpenAI server uses them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capstan.errors import UserError
from capstan.kvcache import ServedModel, ServedTokenizer, VllmBlockHasher
from tests.fixtures.tokenizer import train_tokenizer

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("model")
    train_tokenizer(directory)
    return directory


@pytest.fixture
def served(model_dir: Path) -> ServedTokenizer:
    return ServedTokenizer.from_files(model_dir / "tokenizer.json", model_dir / "tokenizer_config.json")


def raw(model_dir: Path):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(model_dir / "tokenizer.json"))


def test_a_chat_is_the_template_s_text_encoded_without_added_special_tokens(
    served: ServedTokenizer, model_dir: Path
) -> None:
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Which pods"}, {"type": "text", "text": "are GPU?"}],
        },
    ]
    text = served.render_chat(messages)
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhich pods\nare GPU?<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = served.token_ids({"model": "m", "messages": messages})
    tok = raw(model_dir)
    assert ids == tok.encode(text, add_special_tokens=False).ids
    assert ids[0] == tok.token_to_id("<|im_start|>") and tok.token_to_id("<s>") not in ids


def test_a_completion_gets_the_tokenizer_s_bos_and_token_ids_pass_as_they_are(
    served: ServedTokenizer, model_dir: Path
) -> None:
    tok = raw(model_dir)
    ids = served.token_ids({"model": "m", "prompt": "The quick brown fox"})
    assert (
        ids[0] == tok.token_to_id("<s>")
        and ids[1:] == tok.encode("The quick brown fox", add_special_tokens=False).ids
    )
    assert served.token_ids({"model": "m", "prompt": ["The quick", " brown fox"]}) == ids
    assert served.token_ids({"model": "m", "prompt": [5, 6, 7]}) == [5, 6, 7]
    assert served.vocab_size == tok.get_vocab_size(with_added_tokens=True)


def test_the_special_tokens_of_the_configuration_reach_the_template(model_dir: Path, tmp_path: Path) -> None:
    template = tmp_path / "template.jinja"
    template.write_text(
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content | tojson }}{{ eos_token }}{% endfor %}"
        "{% if tools %}{{ tools | tojson }}{% endif %}"
    )
    served = ServedTokenizer.from_files(
        model_dir / "tokenizer.json", model_dir / "tokenizer_config.json", template
    )
    text = served.render_chat([{"role": "user", "content": "héllo"}], tools=[{"type": "function"}])
    assert text == '<s>[user]"héllo"<|im_end|>[{"type": "function"}]'


def test_what_the_template_or_the_body_refuses_is_a_value_error(
    served: ServedTokenizer, model_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="non-empty array"):
        served.token_ids({"model": "m", "messages": []})
    with pytest.raises(ValueError, match=r"messages\[0\].role"):
        served.token_ids({"model": "m", "messages": [{"content": "x"}]})
    with pytest.raises(ValueError, match="neither"):
        served.token_ids({"model": "m"})
    strict = tmp_path / "strict.jinja"
    strict.write_text(
        "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}"
    )
    refusing = ServedTokenizer.from_files(model_dir / "tokenizer.json", chat_template=strict)
    with pytest.raises(ValueError, match="first must be user"):
        refusing.token_ids({"model": "m", "messages": [{"role": "system", "content": "x"}]})
    # a template that breaks on the request's messages (ChatML concatenates a content that is null): a ValueError,
    # so a 400 at the gateway and the engine simulator, never a 500
    for message in ({"role": "user", "content": None}, {"role": "user"}):
        with pytest.raises(ValueError, match="could not render the messages: TypeError"):
            served.token_ids({"model": "m", "messages": [message]})
    bare = ServedTokenizer.from_files(model_dir / "tokenizer.json")
    with pytest.raises(ValueError, match="no chat template"):
        bare.token_ids({"model": "m", "messages": [{"role": "user", "content": "x"}]})


def test_files_that_cannot_work_are_one_line_naming_the_file(model_dir: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(UserError, match=r"nope\.json"):
        ServedTokenizer.from_files(missing)
    broken = tmp_path / "broken.json"
    broken.write_text('{"model": 1}')
    with pytest.raises(UserError, match=r"broken\.json: not a tokenizer\.json"):
        ServedTokenizer.from_files(broken)
    config = tmp_path / "tokenizer_config.json"
    config.write_text("{not json")
    with pytest.raises(UserError, match=r"tokenizer_config\.json: the tokenizer configuration is not JSON"):
        ServedTokenizer.from_files(model_dir / "tokenizer.json", config)
    config.write_text(json.dumps({"chat_template": "{% for %}"}))
    with pytest.raises(UserError, match="does not parse"):
        ServedTokenizer.from_files(model_dir / "tokenizer.json", config)
    with pytest.raises(UserError) as refused:
        ServedTokenizer.from_files(broken)
    assert "\n" not in str(refused.value)


def test_a_served_model_hashes_its_token_ids_with_vllm_s_chain(served: ServedTokenizer) -> None:
    hasher = VllmBlockHasher("sha256_cbor", hash_seed="42", block_size=4)
    model = ServedModel(served, hasher)
    body = {"model": "m", "messages": [{"role": "user", "content": "Prefix caching keeps the KV blocks"}]}
    ids = model.token_ids(body)
    assert len(ids) >= 8 and model.block_size == 4
    assert model.block_hashes(ids, "s", "sql") == hasher.block_hashes(ids, "s", "sql")
    assert model.block_hashes(ids) != model.block_hashes(ids, lora_name="sql")
