"""Where a sentence ends in Whisper's words: a full stop after "Mr." or "e.g." is not one.

Whisper punctuates and capitalises, so a word that ends in ``?``, ``!`` or an ellipsis ends a
sentence, and so does one that ends in a full stop, except:

* a title or a Latin abbreviation that always has more to follow ("Mr.", "Mrs.", "Dr.", "St.",
  "Prof.", "e.g.", "i.e.", "vs.", ...) or a single capital initial ("J.");
* "No." or a number before a number ("No. 5", "3. 5");
* any full stop followed by a word that starts with a small letter: this is how an abbreviation
  that may end a sentence or not ("etc.", "a.m.", "p.m.", "Inc.", "U.S.") is told apart.

Pure functions of the words (no clock, no I/O), so segmentation is the same on every machine.
"""

from __future__ import annotations

__all__ = ["abbreviation", "ends_sentence"]

_ALWAYS = (".", "?", "!", "…", "。", "？", "！")
_CLOSERS = "\"')]}»”’"
_OPENERS = "\"'([{«“‘¿¡"
# Never the end of a sentence: more always follows (lower case, without the final full stop).
# Abbreviations that may also end one ("etc.", "a.m.", "Inc.", "U.S.") are left to the next word.
_TITLES = frozenset({
    "mr", "mrs", "ms", "mx", "messrs", "mmes", "dr", "drs", "prof", "profs", "rev", "revd", "st", "sts",
    "mt", "hon", "col", "capt", "cpt", "lt", "sgt", "cmdr", "adm", "maj", "gov", "sen", "supt", "insp",
    "fr", "mme", "mlle", "e.g", "eg", "i.e", "ie", "cf", "viz", "vs", "approx", "fig", "figs", "vol",
    "vols", "pp", "dept", "incl", "esp",
})
_BEFORE_NUMBER = frozenset({"no", "nos", "art", "nr", "tel"})


def ends_sentence(word: str, following: str | None = None) -> bool:
    """Whether ``word`` ends a sentence, given the word that follows it (None: nothing does).

    Args:
        word: one of Whisper's words, with its leading space and punctuation.
        following: the next word in the same stretch of speech, or None at its end.
    """
    token = word.strip().rstrip(_CLOSERS)
    if not token.endswith(_ALWAYS):
        return False
    if not token.endswith("."):
        return True
    core = token.rstrip(".").lstrip(_OPENERS).lower()
    nxt = (following or "").strip().lstrip(_OPENERS)
    if token.endswith("..."):  # Whisper's trailing off: an end unless the sentence plainly goes on
        return not nxt[:1].islower()
    if not core:
        return True
    if core in _TITLES:
        return False
    if len(core) == 1 and core.isalpha() and core != "i" and token.lstrip(_OPENERS)[:1].isupper():
        return False  # an initial: "J. R. Tolkien" (but "so did I.")
    if nxt[:1].isdigit() and (core in _BEFORE_NUMBER or core[-1:].isdigit()):
        return False
    # Whisper starts a sentence with a capital: "etc. and", "p.m. on", "Inc. said" go on.
    return not nxt[:1].islower()


def abbreviation(word: str, following: str | None = None) -> bool:
    """Whether ``word``'s final full stop is an abbreviation's ("Mr.", "e.g.", "etc." before "and").

    A segment never ends after one, not even at a long pause: more of the sentence follows.
    """
    token = word.strip().rstrip(_CLOSERS)
    return token.endswith(".") and not token.endswith("...") and not ends_sentence(word, following)
