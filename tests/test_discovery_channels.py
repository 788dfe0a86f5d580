"""Finding what was said in the agent's words: normalised matching, partial matches, the semantic channel.

Known answers on real prompt texts (Asterisk's English core prompts, as their Debian package lists
them, and a LibriVox reading of Sense and Sensibility as Whisper writes it), on SQLite and
PostgreSQL alike: the normaliser makes "mister john dashwood" a match of "Mr. John Dashwood", a unit
holding most of a query's words is ranked after those holding them all, and with the semantic
channel on, lexical nominations come first and the semantic ones after, and each item says which
channel nominated it and which query words it holds.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from mediafleet.discovery import DiscoveryService, LeaseHost, NavigationBudget, ReceiptKey, Scope, create_key_file
from mediafleet.discovery.index import EvidenceIndex, Nomination
from mediafleet.discovery.index_open import open_index
from mediafleet.discovery.operations import allow_active_bindings, fuse, parse_channels
from mediafleet.discovery.text import query_terms
from tests.discovery_fixtures import PostgresServer, index, postgres_server, unit  # noqa: F401

HARBOUR = Scope("harbour")
SAID = [
    "Mr. John Dashwood had not the strong feelings of the rest of the family; but he was affected by a "
    "recommendation of such a nature at such a time.",  # 0
    "Weasels have eaten our phone system.",  # 1
    "At the tone, please say your name.",  # 2
    "All circuits are busy now.",  # 3
    "The number you have dialed is not in service. Please check the number and try again.",  # 4
    "I am sorry, that's not a valid extension. Please try again.",  # 5
    "Please enter the first three letters of your party's last name using your touch tone keypad.",  # 6
    "Goodbye. Thank you for trying out the Asterisk Open Source PBX.",  # 7
    "The conference is now being recorded.",  # 8
    "Something is terribly wrong!",  # 9
    "To leave the conference...",  # 10
    "All of our representatives are currently busy. Please stay on the line and your call will be answered by "
    "the next available representative.",  # 11
    "The phone system is down.",  # 12
    "Weasels and stoats in the garden.",  # 13
]
UNITS = [unit(text, n) for n, text in enumerate(SAID)]
NUMBER = {u.unit_id: n for n, u in enumerate(UNITS)}


def lexical(index: EvidenceIndex, query: str) -> list[int]:
    return [NUMBER[n.unit_id] for n in index.search(HARBOUR, query_terms(query), 20)]


def semantic(index: EvidenceIndex, query: str, limit: int = 3) -> list[int]:
    return [NUMBER[n.unit_id] for n in index.nearest(HARBOUR, query, limit)]


@pytest.fixture
def said(index: EvidenceIndex) -> EvidenceIndex:
    index.add_units(HARBOUR, UNITS)
    return index


def test_the_agents_words_find_the_extractors(said: EvidenceIndex) -> None:
    assert lexical(said, "mister john dashwood") == [0]
    assert lexical(said, "enter the 1st 3 letters using your touch-tone key pad") == [6]
    assert lexical(said, "Weasels haven't eaten our phone system") == [1]  # "have not": one word more, partial


def test_one_word_off_is_ranked_not_dropped(said: EvidenceIndex) -> None:
    # Five words, none held by every unit; three are enough: both units holding three come, the one
    # holding the rarer words (weasels) first.
    assert lexical(said, "weasels ate the phone system") == [1, 12]
    # The unit holding every word comes before the one holding most of them.
    assert lexical(said, "weasels phone system") == [1, 12]
    assert lexical(said, "that extension does not exist") == [5]
    # Two words: "most" is both, so one word off still finds nothing lexically.
    assert lexical(said, "weasels ate") == []


def test_the_semantic_channel_finds_words_it_never_saw(said: EvidenceIndex) -> None:
    assert semantic(said, "mister john dashwood", 1) == [0]
    assert semantic(said, "weasels ate the phone system", 2) == [1, 12]
    assert semantic(said, "this meeting is being taped", 1) == [8]
    assert semantic(said, "hang on, someone will pick up soon", 1) == [11]
    scores = [n.score for n in said.nearest(HARBOUR, "weasels ate", 14)]
    assert scores == sorted(scores, reverse=True) and len(scores) == 14 and -1 <= scores[-1] < scores[0] <= 1


def test_a_superseded_unit_is_never_nominated_by_meaning(said: EvidenceIndex) -> None:
    again = [unit(text, n, derivation="eg:derivation:" + "2" * 32) for n, text in enumerate(SAID[:2])]
    said.add_units(HARBOUR, again)  # same artifact, another extraction: the first units are superseded
    nearest = [n.unit_id for n in said.nearest(HARBOUR, "weasels ate the phone system", 20)]
    assert UNITS[1].unit_id not in nearest and again[1].unit_id == nearest[0]


def test_both_indexes_give_the_same_answers(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    server: PostgresServer = request.getfixturevalue("postgres_server")
    both = [open_index(f"sqlite:{tmp_path / 'index.db'}"), open_index(server.database("c" + uuid.uuid4().hex[:12]))]
    try:
        for index in both:
            index.add_units(HARBOUR, UNITS)
        for query in ("mister john dashwood", "weasels ate the phone system", "that extension does not exist",
                      "enter the 1st 3 letters", "this meeting is being taped", "record a voicemail at the beep"):
            lexical_answers = [lexical(index, query) for index in both]
            semantic_answers = [semantic(index, query, 5) for index in both]
            assert lexical_answers[0] == lexical_answers[1] and semantic_answers[0] == semantic_answers[1], query
    finally:
        for index in both:
            index.close()


def test_lexical_nominations_stay_first_and_the_semantic_ones_follow() -> None:
    def n(name: str) -> Nomination:
        return Nomination(name, "eg:derivation:x", 0.0)

    fused = fuse({"lexical": [n("a"), n("b")], "semantic": [n("c"), n("b"), n("d")]}, 4)
    # a and b hold the query's words (lexical order kept, b says both channels); then c and d by meaning.
    assert [(x.unit_id, by) for x, by in fused] == [("a", ("lexical",)), ("b", ("lexical", "semantic")),
                                                   ("c", ("semantic",)), ("d", ("semantic",))]
    assert [x.unit_id for x, _ in fuse({"lexical": [n("a"), n("b")], "semantic": [n("c")]}, 2)] == ["a", "b"]
    assert [x.unit_id for x, _ in fuse({"lexical": [], "semantic": [n("c"), n("d")]}, 20)] == ["c", "d"]
    assert parse_channels("semantic, lexical") == ("lexical", "semantic")
    for bad in ("", "semantic", "lexical,vector"):
        with pytest.raises(ValueError):
            parse_channels(bad)


def search(index: EvidenceIndex, tmp_path: Path, channels: tuple[str, ...], query: str) -> dict[str, Any]:
    key = tmp_path / "receipt.key"
    if not key.exists():
        create_key_file(key)
    host = LeaseHost(tmp_path / "host.db")
    service = DiscoveryService(host, index, ReceiptKey(key), allow_active_bindings, channels=channels)
    lease, credential = host.open_lease(host.bind(HARBOUR, "agent"), ttl_s=60, budget=NavigationBudget(5, 50, 100_000),
                                        generation=index.scope_generation(HARBOUR))
    try:
        return service.search(credential, lease.lease_id, query)
    finally:
        host.close()


def test_an_answer_says_which_channels_took_part_and_which_nominated_each_item(said: EvidenceIndex,
                                                                               tmp_path: Path) -> None:
    answer = search(said, tmp_path, ("lexical", "semantic"), "mister john dashwood")
    assert answer["channels"] == ["lexical", "semantic"] and answer["sufficiency"] == "not_assessed"
    first = answer["evidence"][0]
    assert first["text"] == SAID[0] and first["nominated_by"] == ["lexical", "semantic"]
    assert first["matched_terms"] == ["mister", "john", "dashwood"]
    assert len(answer["evidence"]) == len(SAID)  # the semantic channel nominates its nearest, whatever their distance
    assert all(e["nominated_by"] == ["semantic"] and e["matched_terms"] == [] for e in answer["evidence"][1:])

    answer = search(said, tmp_path, ("lexical", "semantic"), "weasels ate the phone system")
    assert [e["text"] for e in answer["evidence"][:2]] == [SAID[1], SAID[12]]
    assert answer["evidence"][0]["matched_terms"] == ["weasels", "phone", "system"]

    answer = search(said, tmp_path, ("lexical",), "weasels ate the phone system")
    assert answer["channels"] == ["lexical"]
    assert [(e["text"], e["nominated_by"], e["matched_terms"]) for e in answer["evidence"]] == [
        (SAID[1], ["lexical"], ["weasels", "phone", "system"]), (SAID[12], ["lexical"], ["the", "phone", "system"])]


def test_the_closest_keep_every_tie_at_the_cut() -> None:
    import numpy as np

    from mediafleet.discovery.index_base import _closest

    assert _closest(np.array([5, 1, 3, 1, 3, 9], dtype=np.uint16), 3).tolist() == [1, 2, 3, 4]
    assert _closest(np.array([2, 0], dtype=np.uint8), 3).tolist() == [0, 1]


def test_a_large_scope_compares_the_first_bits_first_with_the_same_nearest(said: EvidenceIndex,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import mediafleet.discovery.index_base as index_base

    exact = semantic(said, "weasels ate the phone system", 2)
    monkeypatch.setattr(index_base, "FIRST_BITS_ABOVE", 4)  # as if the 14 units were a million
    monkeypatch.setattr(index_base, "FIRST_BITS_KEEP", 6)
    said.add_units(HARBOUR, [unit("A new prompt arrives.", 99, digest="sha256:" + "cd" * 32)])  # a new generation
    assert semantic(said, "weasels ate the phone system", 2) == exact == [1, 12]


def test_the_channel_setting_is_read_once_with_the_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from pydantic import ValidationError

    from mediafleet.settings import Settings

    monkeypatch.setenv("MEDIAFLEET_DISCOVERY_CHANNELS", "semantic, lexical")
    assert Settings(blob_root=tmp_path).discovery_channels == "lexical,semantic"
    monkeypatch.delenv("MEDIAFLEET_DISCOVERY_CHANNELS")
    assert Settings(blob_root=tmp_path).discovery_channels == "lexical"
    for bad in ("semantic", "lexical,vector", ""):
        with pytest.raises(ValidationError):
            Settings(blob_root=tmp_path, discovery_channels=bad)
