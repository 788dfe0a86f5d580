"""The text normaliser (``mediafleet.discovery.normalise``) with known answers: both sides alike."""

from __future__ import annotations

import pytest

from mediafleet.discovery.text import matched_form, query_terms


@pytest.mark.parametrize(("written", "asked"), [
    ("Mr. John Dashwood", "mister john dashwood"),
    ("Dr. Watson lives on Baker St.", "doctor watson lives on baker street"),
    ("the 14th of March", "the fourteenth of march"),
    ("fourteen days", "14 days"),
    ("ill-disposed", "ill disposed"),
    ("leave a voicemail", "leave a voice-mail"),
    ("touchtone keypad", "touch tone key pad"),
    ("the colour of the harbour", "the color of the harbor"),
    ("we organised it", "we organized it"),
    ("Don't hang up", "do not hang up"),
    ("It's late; we've gone", "it is late we have gone"),
    ("I can\u2019t", "i cannot"),
    ("twenty-one guns", "21 guns"),
    ("one hundred and five", "105"),
    ("1,000 people", "one thousand people"),
    ("the party's name", "the party name"),
])
def test_the_extractors_words_and_the_agents_meet(written: str, asked: str) -> None:
    assert matched_form(written) == matched_form(asked)


def test_known_forms() -> None:
    assert matched_form("Mr. John Dashwood was ill-disposed.") == "mister john dashwood was ill disposed"
    assert matched_form("Weasels have eaten our phone system.") == "weasels have eaten our phone system"
    assert matched_form("one two three, first second third") == "1 2 3 1 2 3"
    assert matched_form("two thousand and twenty four") == "2024"
    assert matched_form("a hundred men") == "a 100 men"
    assert matched_form("ﬁle") == "file"  # NFKC first


def test_a_query_is_still_only_words() -> None:
    assert query_terms('"Mr." NEAR/2 dashwood* OR 14th') == ["mister", "near", "2", "dashwood", "or", "14"]
