"""Local paraphrasers, the obfuscation filter, fallback and cache; offline, on tiny models and fake WordNet files."""

from __future__ import annotations

import copy
import json
import logging
import re
import socket

import pytest
import torch

from privft.paraphrase import (
    INSTRUCTIONS,
    PARAPHRASERS,
    SYSTEM_PROMPT,
    LLMParaphraser,
    MissingResourceError,
    NeighbourParaphraser,
    ParaphraseCache,
    Paraphraser,
    WordNetParaphraser,
    build_messages,
    build_paraphraser,
    clean_reply,
    obfuscate,
    split_prefix,
    word_similarity,
)
from privft.paraphrase.obfuscate import NAMED_TEXTS, ObfuscationResult, fallback_summary
from privft.paraphrase.wordnet import load_synonyms

TEXT = "the quick brown fox jumps over the lazy dog near the river bank"
PREFIX, SUFFIX = "the quick brown fox jumps over ", "the lazy dog near the river bank"
GOOD = "the sleepy dog near the river bank"
UNRELATED = "a violin concerto premiered in vienna"
CHAT_TEMPLATE = (
    "{% for message in messages %}<|endoftext|>{{ message['role'] }}\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|endoftext|>assistant\n{% endif %}"
)
FAKE_WORDNET = {
    "data.noun": [
        "  1 This software and database is being provided to you, the LICENSEE, by  ",
        "  2 Princeton University under the following license.  By obtaining, using  ",
        "02958343 06 n 05 car 0 auto 0 automobile 0 machine 0 motorcar 0 001 @ 03791235 n 0000 | a motor vehicle",
        "03791235 06 n 02 motor_vehicle 0 automotive_vehicle 0 000 | a self-propelled wheeled vehicle",
    ],
    "data.verb": ["01835496 38 v 02 travel 0 journey 0 000 01 + 02 00 | change location"],
    "data.adj": ["01386883 00 s 02 great(a) 0 big(a) 0 000 | relatively large in size"],
    "data.adv": [
        "00085811 02 r 03 quickly 0 rapidly 0 speedily 0 000 | with rapid movements",
        "00031899 02 r 02 very 0 really 0 000 | to a high degree",
    ],
}


class Scripted(Paraphraser):
    """A paraphraser that answers from a function of (text, seed) and records its calls."""

    name = "scripted"

    def __init__(self, reply):
        self.reply, self.calls = reply, []

    def rewrite(self, text: str, *, seed: int) -> str:
        self.calls.append((text, seed))
        return self.reply(text, seed)

    def settings(self) -> dict:
        return {"version": 1}


def by_seed(*replies: str):
    """A reply function returning replies[seed]."""
    return lambda text, seed: replies[seed]


@pytest.fixture()
def chat_tokenizer(tokenizer):
    """A copy of the test tokenizer with a minimal chat template."""
    chat = copy.deepcopy(tokenizer)
    chat.chat_template = CHAT_TEMPLATE
    return chat


@pytest.fixture()
def wordnet_dir(tmp_path):
    """A folder of WordNet data files in the real format, a few lines each."""
    for name, lines in FAKE_WORDNET.items():
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


def letter_skeleton(text: str) -> str:
    """`text` with every run of letters replaced by one placeholder: what a word-for-word swap keeps."""
    return re.sub(r"[^\W\d_]+", "W", text)


# --- splitting, filter, fallback ---------------------------------------------------------------

def test_split_keeps_the_first_share_of_words_with_their_spacing():
    assert split_prefix(TEXT, 0.5) == (PREFIX, SUFFIX)
    assert split_prefix(TEXT, 0.0) == ("", TEXT)
    assert split_prefix("one  two\nthree four", 0.5) == ("one  two\n", "three four")


@pytest.mark.parametrize("ratio", [-0.1, 1.0, 1.5])
def test_prefix_keep_ratio_outside_0_1_is_refused(ratio):
    with pytest.raises(ValueError, match=r"prefix_keep_ratio=.* must be in \[0, 1\)"):
        obfuscate([TEXT], Scripted(lambda text, seed: text), prefix_keep_ratio=ratio)


def test_modes_keep_the_prefix_or_return_the_rewritten_suffix_alone():
    paraphraser = Scripted(lambda text, seed: text.replace("lazy", "sleepy"))
    [kept] = obfuscate([TEXT], paraphraser)
    [alone] = obfuscate([TEXT], paraphraser, mode="rewrite-only")
    [whole] = obfuscate(["a lazy cat sat on the lazy mat"], paraphraser, prefix_keep_ratio=0)
    assert kept.text == PREFIX + GOOD and alone.text == GOOD
    assert (kept.attempts, kept.fallback, kept.reason, kept.original) == (1, False, None, TEXT)
    assert whole.text == "a sleepy cat sat on the sleepy mat"
    assert paraphraser.calls[0] == (SUFFIX, 0)
    with pytest.raises(ValueError, match="prefix\\+rewrite, rewrite-only"):
        obfuscate([TEXT], paraphraser, mode="suffix")


def test_rejected_rewrites_are_retried_with_the_next_seed():
    paraphraser = Scripted(by_seed("", SUFFIX.upper(), "word " * 40, UNRELATED, GOOD))
    [result] = obfuscate([TEXT], paraphraser, retries=4, seed=0)
    assert [seed for _, seed in paraphraser.calls] == [0, 1, 2, 3, 4]
    assert (result.text, result.attempts, result.fallback) == (PREFIX + GOOD, 5, False)
    for reason in ("seed 0: empty", "seed 1: unchanged", "seed 2: too long", "seed 3: too dissimilar"):
        assert reason in result.reason


def test_when_every_try_fails_the_last_changed_candidate_is_kept_and_logged(caplog):
    paraphraser = Scripted(by_seed(UNRELATED, "", "dog", SUFFIX))
    with caplog.at_level(logging.WARNING, logger="privft.paraphrase"):
        [result] = obfuscate([TEXT], paraphraser, retries=3)
    assert (result.text, result.attempts, result.fallback) == (PREFIX + "dog", 4, True)
    assert "too short" in result.reason and "last non-empty changed candidate" in result.reason
    assert ('1 of 1 texts had every rewrite rejected by the similarity and length filter (text 0; first: "all 4 '
            'rewrites rejected (seed 0: too dissimilar') in caplog.text


def test_when_no_candidate_changes_anything_the_original_is_kept_and_flagged(caplog):
    with caplog.at_level(logging.WARNING, logger="privft.paraphrase"):
        [result] = obfuscate([TEXT], Scripted(lambda text, seed: text), retries=1)
        [empty] = obfuscate(["   "], Scripted(lambda text, seed: "never called"))
    assert (result.text, result.fallback, result.attempts) == (TEXT, True, 2)
    assert "kept the original text" in result.reason
    assert (empty.fallback, empty.attempts) == (True, 0) and "nothing to rewrite" in empty.reason
    assert [record.name for record in caplog.records] == ["privft.paraphrase"] * 2


def test_fallbacks_are_one_summary_line_and_skip_serves_the_originals(caplog):
    texts = [f"{PREFIX}the {word} dog near the river bank" for word in ("lazy", "calm", "wild", "shy")] * 3
    texts[5] = "   "  # nothing to rewrite
    paraphraser = Scripted(lambda text, seed: text.replace("lazy", "sleepy") if "lazy" in text else UNRELATED)
    with caplog.at_level(logging.WARNING, logger="privft.paraphrase"):
        served = obfuscate(texts, paraphraser, retries=1)
        skipped = obfuscate(texts, paraphraser, retries=1, failed_rewrites="skip", mode="rewrite-only")
    failed = [i for i in range(12) if i % 4 and i != 5]
    assert [i for i, result in enumerate(served) if result.failed_filter] == failed
    assert served[1].text == PREFIX + UNRELATED and served[5].fallback and not served[5].failed_filter
    assert [skipped[i].text for i in failed] == [texts[i] for i in failed]  # the whole original, in either mode
    assert skipped[0].text == GOOD and "failed_rewrites='skip'" in skipped[1].reason
    first, second = (record.getMessage() for record in caplog.records)  # one line per call, not one per text
    assert first.startswith("8 of 12 texts had every rewrite rejected by the similarity and length filter (texts 1, "
                            '2, 3, 6, 7, 9, 10, 11; first: "all 2 rewrites rejected (seed 0: too dissimilar')
    assert "): the last non-empty changed candidate is served" in first
    assert "1 of 12 texts have no words after the kept prefix (text 5)" in first
    assert '"): the original text is served instead' in second and "obfuscations.json" in second
    with pytest.raises(ValueError, match="failed_rewrites='drop' must be one of serve, skip"):
        obfuscate(texts, paraphraser, failed_rewrites="drop")


def test_a_summary_names_the_first_texts_and_counts_the_rest():
    results = [ObfuscationResult("x", "y", 4, True, "all 4 rewrites rejected")] * (NAMED_TEXTS + 3)
    assert (f'(texts {", ".join(map(str, range(NAMED_TEXTS)))} and 3 more; first: "all 4 rewrites rejected")'
            in fallback_summary(results, "serve"))
    assert fallback_summary([ObfuscationResult("x", "y", 1, False)], "serve") is None


def test_filter_settings_and_texts_are_validated():
    paraphraser = Scripted(lambda text, seed: text)
    with pytest.raises(ValueError, match="min_similarity"):
        obfuscate([TEXT], paraphraser, min_similarity=1.5)
    with pytest.raises(ValueError, match="max_length_ratio"):
        obfuscate([TEXT], paraphraser, max_length_ratio=0.5)
    with pytest.raises(TypeError, match="Text 1 is a int"):
        obfuscate([TEXT, 3], Scripted(lambda text, seed: text.replace("lazy", "idle")))


def test_word_similarity_is_a_word_level_ratio():
    assert word_similarity("The cat sat.", "the CAT sat") == 1.0
    assert word_similarity("one two", "three four") == 0.0
    assert word_similarity(SUFFIX, GOOD) == pytest.approx(2 * 6 / 14)


# --- cache ------------------------------------------------------------------------------------

def test_cache_serves_repeated_inputs_without_calling_the_paraphraser(tmp_path):
    """Each (text, seed) is rewritten once; entries sit in the paraphraser's own folder, which can travel alone."""
    cache = ParaphraseCache(tmp_path / "cache")
    paraphraser = Scripted(lambda text, seed: text.replace("lazy", "sleepy"))
    first = obfuscate([TEXT, "an afternoon in the lazy sun"], paraphraser, cache=cache)
    assert len(paraphraser.calls) == 2
    second = obfuscate([TEXT, "an afternoon in the lazy sun"], paraphraser, cache=cache)
    assert second == first and len(paraphraser.calls) == 2
    obfuscate([TEXT], paraphraser, cache=cache, seed=7)
    [suffix_only] = obfuscate([TEXT], paraphraser, cache=cache, mode="rewrite-only")  # the same suffix's rewrite
    assert len(paraphraser.calls) == 3
    assert suffix_only.text == "the sleepy dog near the river bank" and first[0].text.endswith(suffix_only.text)
    entries = sorted((tmp_path / "cache").rglob("*.json"))
    assert len(entries) == 3 and {entry.relative_to(tmp_path / "cache").parts[0] for entry in entries} == {"scripted"}
    assert {json.loads(entry.read_text())["original"] for entry in entries} == {TEXT, "an afternoon in the lazy sun"}


def test_a_cached_fallback_is_logged_again(tmp_path, caplog):
    cache = ParaphraseCache(tmp_path / "cache")
    paraphraser = Scripted(lambda text, seed: text)
    with caplog.at_level(logging.WARNING, logger="privft.paraphrase"):
        first = obfuscate([TEXT], paraphraser, cache=cache, retries=0)
        second = obfuscate([TEXT], paraphraser, cache=cache, retries=0)
    assert second == first and first[0].fallback and len(paraphraser.calls) == 1
    assert [record.getMessage() for record in caplog.records] == [fallback_summary(first, "serve")] * 2


# --- neighbour paraphraser ---------------------------------------------------------------------

def test_neighbour_swaps_whole_words_reproducibly(tiny_model, tokenizer, local_texts):
    paraphraser = NeighbourParaphraser(tiny_model, tokenizer, fraction=0.3, top_k=5)
    text = local_texts[3]
    rewrites = [paraphraser.rewrite(text, seed=seed) for seed in (0, 0, 1)]
    assert rewrites[0] == rewrites[1] != rewrites[2]
    assert all(letter_skeleton(rewrite) == letter_skeleton(text) for rewrite in rewrites)
    assert rewrites[0].split()[0] == text.split()[0]
    changed = sum(a != b for a, b in zip(text.split(), rewrites[0].split()))
    assert 1 <= changed <= len(text.split()) * 0.3 + 1
    assert json.loads(json.dumps(paraphraser.settings()))["device"] == "cpu"


def test_neighbour_handles_texts_longer_than_the_context(tiny_model, tokenizer, local_texts):
    text = " ".join(local_texts[:10])
    assert len(tokenizer(text)["input_ids"]) > 2 * tiny_model.config.max_position_embeddings
    rewrite = NeighbourParaphraser(tiny_model, tokenizer, fraction=1.0).rewrite(text, seed=0)
    assert letter_skeleton(rewrite) == letter_skeleton(text)
    assert rewrite[-200:] != text[-200:]  # the last window was rewritten too


def test_the_neighbour_rewrites_the_filter_rejects_are_one_summary_line(tiny_model, tokenizer, local_texts, caplog):
    paraphraser = NeighbourParaphraser(tiny_model, tokenizer, fraction=1.0)  # every word swapped: dissimilar
    with caplog.at_level(logging.WARNING, logger="privft.paraphrase"):
        results = obfuscate(local_texts[:5], paraphraser, min_similarity=0.95, retries=1)
    assert all(result.failed_filter and result.reason.startswith("all 2 rewrites rejected") for result in results)
    [summary] = [record.getMessage() for record in caplog.records]  # one line for the call, none per text
    assert "\n" not in summary
    assert summary.startswith('5 of 5 texts had every rewrite rejected by the similarity and length filter (texts 0, '
                              '1, 2, 3, 4; first: "all 2 rewrites rejected (seed 0: ')

# --- LLM paraphraser ---------------------------------------------------------------------------

def test_prompts_are_the_papers_verbatim():
    text_instruction = ("Rewrite the following paragraph by replacing every word with an alternative term that does"
                        " not share the same root or spelling. Preserve the same meaning and sentence structure as"
                        " much as possible.")
    code_instruction = ("Rewrite the following code so it preserves the same functionality and flow, but changes all"
                        " variable names, function names, and comments. Maintain the same input-output behavior."
                        " Keep it in the same programming language.")
    assert build_messages("A cat.") == [
        {"role": "system", "content": "You are a helpful text rewriting assistant."},
        {"role": "user", "content": text_instruction + '\n"""\nA cat.\n"""'},
    ]
    assert build_messages("x = 1", "code") == [{"role": "user", "content": code_instruction + '\n"""\nx = 1\n"""'}]
    assert INSTRUCTIONS["text"] == text_instruction and SYSTEM_PROMPT.startswith("You are")


@pytest.mark.parametrize(("reply", "expected"), [
    ('Sure! Here is the rewritten paragraph:\n"""\nA feline sat.\n"""\nNote: I changed words.', "A feline sat."),
    ("Here is the rewritten paragraph:\nA feline sat.\n\nNote: every word was replaced.", "A feline sat."),
    ("Sure, here you go.\nA feline sat.\nIt purred.", "A feline sat.\nIt purred."),
    ("```python\ndef g(y):\n    return y\n```\nThis version renames x.", "def g(y):\n    return y"),
    ("def g(y):\n    return y", "def g(y):\n    return y"),
    ('"""A feline sat.', "A feline sat."),
    ("A feline sat.", "A feline sat."),
])
def test_meta_text_is_stripped_from_replies(reply, expected):
    assert clean_reply(reply) == expected


@pytest.mark.parametrize(("reply", "expected"), [
    ('The cat sat on the rug.\n"""', "The cat sat on the rug."),
    ('A feline rested on a mat."""\nNote: I changed words.', "A feline rested on a mat."),
    ('Here is the rewrite:\n"""\nA feline rested.', "A feline rested."),
    ("```python\nif version:\n    print(version)\n```", "if version:\n    print(version)"),
    ("```python\ndef rewritten_sum(a, b):\n    return a + b\n```", "def rewritten_sum(a, b):\n    return a + b"),
    ("ok.append(1)\nprint(ok)", "ok.append(1)\nprint(ok)"),
    ("The data are shown here:\n- a table of values", "The data are shown here:\n- a table of values"),
    ("Certainly, the cat sat.\nIt purred.", "Certainly, the cat sat.\nIt purred."),
    ("Certainly! Here's a rewritten version of the paragraph:\nA feline sat.", "A feline sat."),
    ("Sure!\n\nRewritten text:\nA feline sat.", "A feline sat."),
])
def test_only_delimiters_and_clear_lead_ins_are_removed_from_prose(reply, expected):
    assert clean_reply(reply) == expected


@pytest.mark.parametrize(("reply", "expected"), [
    ("ok.append(1)\nprint(ok)", "ok.append(1)\nprint(ok)"),
    ("Here is the rewritten code:\nx = 1", "Here is the rewritten code:\nx = 1"),
    ('def f(x):\n    """Return x."""\n    return x', 'def f(x):\n    """Return x."""\n    return x'),
    ('"""\ndef f(x):\n    """Return x."""\n    return x\n"""', 'def f(x):\n    """Return x."""\n    return x'),
    ("x = 1\n\nNote: renamed y.", "x = 1\n\nNote: renamed y."),
])
def test_code_replies_are_only_cut_at_fences_and_lone_triple_quotes(reply, expected):
    assert clean_reply(reply, "code") == expected


def test_llm_rewrite_is_seeded_and_leaves_the_global_rng_alone(tiny_model, chat_tokenizer):
    paraphraser = LLMParaphraser(tiny_model, chat_tokenizer, max_new_tokens=12)
    torch.manual_seed(123)
    first = paraphraser.rewrite("The cat sat on the mat.", seed=5)
    after = torch.rand(1)
    torch.manual_seed(123)
    assert paraphraser.rewrite("The cat sat on the mat.", seed=5) == first
    assert torch.equal(torch.rand(1), after)
    assert isinstance(first, str)
    assert json.dumps(paraphraser.settings())


@pytest.mark.parametrize("max_new_tokens", [6, None])  # None: each text its own budget, 2 × its tokens + 32
def test_llm_rewrites_a_batch_as_it_rewrites_each_text(tiny_model, chat_tokenizer, max_new_tokens):
    paraphraser = LLMParaphraser(tiny_model, chat_tokenizer, max_new_tokens=max_new_tokens, batch_size=3)
    texts = ["The cat sat on the mat.", "A dog.", "Rivers run to the sea under a grey sky, slowly, every day.", "Hi"]
    seeds = [5, 6, 7, 8]
    batched = paraphraser.rewrite_many(texts, seeds=seeds)
    assert batched == [paraphraser.rewrite(text, seed=seed) for text, seed in zip(texts, seeds)]
    assert len(set(paraphraser.rewrite_many([texts[2]] * 3, seeds=[1, 2, 3]))) > 1  # each row follows its own seed
    with pytest.raises(ValueError, match="4 texts but 1 seeds"):
        paraphraser.rewrite_many(texts, seeds=[0])


def test_obfuscate_batches_a_paraphraser_without_changing_its_rewrites(tiny_model, chat_tokenizer):
    texts = ["The cat sat on the mat by the door.", "Rivers run to the sea under a grey sky.", "...", "A dog ran."]
    one = obfuscate(texts, LLMParaphraser(tiny_model, chat_tokenizer, max_new_tokens=8, batch_size=1), retries=1)
    many = obfuscate(texts, LLMParaphraser(tiny_model, chat_tokenizer, max_new_tokens=8, batch_size=4), retries=1)
    assert many == one and one[2].attempts == 0 and one[2].fallback


def test_llm_settings_follow_the_chat_template_generation_config_and_device(tiny_model, chat_tokenizer):
    paraphraser = LLMParaphraser(tiny_model, chat_tokenizer, max_new_tokens=8)
    keys = [ParaphraseCache.key(settings=paraphraser.settings())]
    chat_tokenizer.chat_template = CHAT_TEMPLATE.replace("assistant", "bot")
    keys.append(ParaphraseCache.key(settings=paraphraser.settings()))
    tiny_model.generation_config.top_k = 2
    keys.append(ParaphraseCache.key(settings=paraphraser.settings()))
    tiny_model.generation_config.repetition_penalty = 1.5
    settings = paraphraser.settings()
    keys.append(ParaphraseCache.key(settings=settings))
    assert len(set(keys)) == 4
    assert settings["generation_config"]["top_k"] == 2 and settings["device"] == "cpu"
    assert "transformers_version" not in settings["generation_config"]


def test_llm_needs_a_chat_template(tiny_model, tokenizer):
    with pytest.raises(ValueError, match="no chat template"):
        LLMParaphraser(tiny_model, tokenizer)
    with pytest.raises(ValueError, match="domain='poetry'"):
        build_messages("x", "poetry")
    with pytest.raises(ValueError, match="domain='poetry'"):
        clean_reply("x", "poetry")


# --- WordNet paraphraser -----------------------------------------------------------------------

def test_wordnet_data_files_are_parsed(wordnet_dir):
    synonyms = load_synonyms(wordnet_dir)
    assert synonyms["car"] == ("auto", "automobile", "machine", "motorcar")
    assert synonyms["motor vehicle"] == ("automotive vehicle",)
    assert synonyms["big"] == ("great",) and synonyms["journey"] == ("travel",)
    assert not any(key.startswith("1") or "(" in key for key in synonyms)


def test_wordnet_substitutes_synonyms_in_the_original_case(wordnet_dir):
    paraphraser = WordNetParaphraser(fraction=1.0, wordnet_dir=wordnet_dir)
    text = "The Car moved QUICKLY and very far, my big car."
    rewrite = paraphraser.rewrite(text, seed=0)
    assert rewrite == paraphraser.rewrite(text, seed=0)
    words = rewrite.split()
    assert words[0] == "The" and words[1] in {"Auto", "Automobile", "Machine", "Motorcar"}
    assert words[3] in {"RAPIDLY", "SPEEDILY"} and words[5] == "very" and words[8] == "great"
    assert letter_skeleton(rewrite) == letter_skeleton(text)


def test_missing_or_malformed_wordnet_files_are_reported(tmp_path, wordnet_dir):
    with pytest.raises(MissingResourceError, match=r"apt-get install wordnet-base.*wordnet_dir="):
        WordNetParaphraser(wordnet_dir=tmp_path / "empty")
    (wordnet_dir / "data.adv").write_text("00085811 02 r zz quickly 0\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"data.adv:1: not a WordNet 3.0 data line"):
        WordNetParaphraser(wordnet_dir=wordnet_dir)


# --- registry and offline guarantee -------------------------------------------------------------

def test_registry_builds_by_name_and_lists_known_names(wordnet_dir, tiny_model, tokenizer, tmp_path):
    assert set(PARAPHRASERS) == {"neighbour", "llm", "wordnet"}
    assert isinstance(build_paraphraser("wordnet", wordnet_dir=wordnet_dir), WordNetParaphraser)
    tiny_model.save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    neighbour = build_paraphraser("neighbour", model=str(tmp_path / "tiny"), top_k=3)
    assert isinstance(neighbour, NeighbourParaphraser) and neighbour.top_k == 3
    with pytest.raises(ValueError, match="known paraphrasers: llm, neighbour, wordnet"):
        build_paraphraser("gpt-4o")


def test_paraphrasing_works_with_sockets_blocked(monkeypatch, tiny_model, chat_tokenizer, wordnet_dir):
    def refuse(*args, **kwargs):
        raise OSError("network access attempted during paraphrasing")

    for target, name in ((socket.socket, "connect"), (socket.socket, "connect_ex"), (socket, "create_connection")):
        monkeypatch.setattr(target, name, refuse)
    texts = ["The car moved quickly along the river bank in the early morning light."]
    paraphrasers = [
        NeighbourParaphraser(tiny_model, chat_tokenizer, fraction=0.5),
        LLMParaphraser(tiny_model, chat_tokenizer, max_new_tokens=8),
        WordNetParaphraser(fraction=1.0, wordnet_dir=wordnet_dir),
    ]
    for paraphraser in paraphrasers:
        [result] = obfuscate(texts, paraphraser, retries=1)
        assert result.text.startswith("The car moved quickly along the ") and 1 <= result.attempts <= 2


@pytest.mark.slow
def test_smollm2_paraphrases_a_wiki_text():
    from privft.data import load_corpus

    texts = load_corpus("wiki", limit=1)
    [result] = obfuscate(texts, LLMParaphraser.default(max_new_tokens=64), retries=0)
    assert result.text.startswith(split_prefix(texts[0], 0.5)[0])
    assert result.fallback is False or result.reason
