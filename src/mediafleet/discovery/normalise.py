"""One text normaliser for indexing and for queries: the agent's words and the extractor's meet.

Spoken and OCR'd text is where an agent's words and an extractor's differ: Whisper writes
"Mr. John Dashwood" where an agent asks for "mister john dashwood". After NFKC and case folding
(:func:`mediafleet.discovery.text.fold`), :func:`normalise` rewrites text into plain word tokens,
the same way on both sides:

* **contractions** are spelt out (``don't`` -> ``do not``, ``we've`` -> ``we have``, ``it's`` ->
  ``it is``); any other ``'s`` (a possessive) is dropped (``party's`` -> ``party``);
* **words** are runs of letters and digits, as FTS5's ``unicode61`` tokenizer cuts them: hyphens,
  apostrophes and punctuation split (``ill-disposed`` -> ``ill disposed``), and a small table splits
  closed compounds the same way (``voicemail`` -> ``voice mail``, ``touchtone`` -> ``touch tone``);
* **abbreviations** become their spoken form (``mr`` -> ``mister``, ``dr`` -> ``doctor``, ``st`` ->
  ``street``, ...: :data:`ABBREVIATIONS`);
* **numbers and ordinals** become digits (``fourteen``, ``14th``, ``fourteenth`` -> ``14``;
  ``twenty-one`` -> ``21``; ``one hundred and five`` -> ``105``; ``1,000`` -> ``1000``): so
  ``one`` and ``first`` are ``1`` on both sides, whatever they meant;
* **British spellings** become American ones from a small table (``colour`` -> ``color``,
  ``organised`` -> ``organized``: :data:`SPELLINGS`).

The result is the tokens joined by single spaces; the index holds it beside the original text,
which is what is delivered. Pure: no I/O.
"""

from __future__ import annotations

import re

__all__ = ["ABBREVIATIONS", "COMPOUNDS", "SPELLINGS", "normalise", "tokens"]

# FTS5 unicode61's token characters (categories L*, N*, Co) as Python sees them.
_TOKEN = re.compile("(?:[^\\W_]|[\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd])+")
_APOSTROPHE = "['\u2019\u02bc]"
_SPECIAL_CONTRACTIONS = {"won't": "will not", "can't": "can not", "cannot": "can not", "shan't": "shall not",
                         "ain't": "is not", "let's": "let us", "y'all": "you all"}
_IS = ("it", "that", "what", "he", "she", "there", "here", "who", "where", "how", "when", "why")
_CONTRACTION = re.compile(rf"\b(\w+){_APOSTROPHE}(s|t|re|ve|ll|m|d)\b")
_SPECIAL = re.compile(r"\b(" + "|".join(re.escape(k).replace("'", _APOSTROPHE) for k in _SPECIAL_CONTRACTIONS)
                      + r")\b")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_DIGIT_ORDINAL = re.compile(r"(\d+)(?:st|nd|rd|th)")

ABBREVIATIONS: dict[str, str] = {
    "mr": "mister", "mrs": "missus", "dr": "doctor", "st": "street", "prof": "professor", "jr": "junior",
    "sr": "senior", "capt": "captain", "col": "colonel", "gen": "general", "lt": "lieutenant", "sgt": "sergeant",
    "rev": "reverend", "hon": "honorable", "mt": "mount", "ave": "avenue", "rd": "road", "blvd": "boulevard",
    "dept": "department", "govt": "government", "approx": "approximately", "etc": "etcetera", "vs": "versus",
    "ft": "feet", "lb": "pound", "lbs": "pounds", "oz": "ounce", "km": "kilometer", "kg": "kilogram",
    "jan": "january", "feb": "february", "mar": "march", "apr": "april", "aug": "august", "sept": "september",
    "oct": "october", "nov": "november", "dec": "december", "mon": "monday", "tues": "tuesday",
    "wed": "wednesday", "thurs": "thursday", "fri": "friday", "sat": "saturday", "sun": "sunday",
}
COMPOUNDS: dict[str, str] = {
    "voicemail": "voice mail", "touchtone": "touch tone", "email": "e mail", "website": "web site",
    "webpage": "web page", "filename": "file name", "username": "user name", "login": "log in",
    "logout": "log out", "online": "on line", "offline": "off line", "keypad": "key pad",
    "hangup": "hang up", "setup": "set up", "weekend": "week end", "anymore": "any more",
}
_STEMS = {  # British stem -> American stem, with the endings both take
    "colour": ("color", ("", "s", "ed", "ing", "ful")), "favour": ("favor", ("", "s", "ed", "ite", "ites", "able")),
    "honour": ("honor", ("", "s", "ed", "able")), "labour": ("labor", ("", "s", "ed", "er")),
    "neighbour": ("neighbor", ("", "s", "hood", "ing")), "behaviour": ("behavior", ("", "s", "al")),
    "harbour": ("harbor", ("", "s")), "rumour": ("rumor", ("", "s")), "humour": ("humor", ("",)),
    "centre": ("center", ("", "s", "d")), "theatre": ("theater", ("", "s")), "metre": ("meter", ("", "s")),
    "litre": ("liter", ("", "s")), "fibre": ("fiber", ("", "s")), "calibre": ("caliber", ("",)),
    "organis": ("organiz", ("e", "ed", "es", "ing", "ation", "ations", "er", "ers")),
    "realis": ("realiz", ("e", "ed", "es", "ing", "ation")), "recognis": ("recogniz", ("e", "ed", "es", "ing")),
    "apologis": ("apologiz", ("e", "ed", "es", "ing")), "authoris": ("authoriz", ("e", "ed", "es", "ing", "ation")),
    "customis": ("customiz", ("e", "ed", "es", "ing", "ation")), "minimis": ("minimiz", ("e", "ed", "es", "ing")),
    "optimis": ("optimiz", ("e", "ed", "es", "ing", "ation")), "prioritis": ("prioritiz", ("e", "ed", "es", "ing")),
    "summaris": ("summariz", ("e", "ed", "es", "ing")), "initialis": ("initializ", ("e", "ed", "es", "ing", "ation")),
    "analys": ("analyz", ("e", "ed", "es", "ing")), "catalogue": ("catalog", ("", "s", "d")),
    "dialogue": ("dialog", ("", "s")), "programme": ("program", ("", "s")), "licence": ("license", ("", "s")),
    "defence": ("defense", ("", "s")), "offence": ("offense", ("", "s")), "grey": ("gray", ("", "s")),
    "travell": ("travel", ("ed", "ing", "er", "ers")), "cancell": ("cancel", ("ed", "ing")),
    "modell": ("model", ("ed", "ing")), "labell": ("label", ("ed", "ing")), "jewellery": ("jewelry", ("",)),
    "aluminium": ("aluminum", ("",)), "cheque": ("check", ("", "s")), "tyre": ("tire", ("", "s")),
    "aeroplane": ("airplane", ("", "s")), "mould": ("mold", ("", "s", "y")), "plough": ("plow", ("", "s", "ed")),
}
SPELLINGS: dict[str, str] = {b + e: a + e for b, (a, endings) in _STEMS.items() for e in endings}

_UNITS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve thirteen "
                                     "fourteen fifteen sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)}
_ORDINAL_UNITS = {w: i for i, w in enumerate(
    "zeroth first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth fourteenth "
    "fifteenth sixteenth seventeenth eighteenth nineteenth".split())}
_ORDINAL_TENS = {w: 10 * i for i, w in enumerate(
    "twentieth thirtieth fortieth fiftieth sixtieth seventieth eightieth ninetieth".split(), start=2)}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000}
_ORDINAL_SCALES = {"hundredth": 100, "thousandth": 1000, "millionth": 1_000_000}
_NUMBER_WORDS = {**_UNITS, **_TENS, **_ORDINAL_UNITS, **_ORDINAL_TENS}


def _spell_out(text: str) -> str:
    text = _SPECIAL.sub(lambda m: _SPECIAL_CONTRACTIONS[re.sub(_APOSTROPHE, "'", m.group(1))], text)

    def contraction(m: re.Match[str]) -> str:
        word, tail = m.group(1), m.group(2)
        if tail == "t":
            return word[:-1] + " not" if word.endswith("n") else m.group(0)
        if tail == "s":
            return word + " is" if word in _IS else word
        return word + " " + {"re": "are", "ve": "have", "ll": "will", "m": "am", "d": "would"}[tail]

    return _CONTRACTION.sub(contraction, text)


def _numbers(words: list[str]) -> list[str]:
    """Runs of number words (with ``and`` after a hundred) as one number in digits."""
    out: list[str] = []
    i = 0
    while i < len(words):
        if words[i] not in _NUMBER_WORDS and words[i] not in _SCALES and words[i] not in _ORDINAL_SCALES:
            out.append(words[i])
            i += 1
            continue
        total = current = 0
        last = ""  # the kind of the previous word: unit, tens, hundred, scale, and
        j = i
        while j < len(words):
            w = words[j]
            ordinal = w in _ORDINAL_UNITS or w in _ORDINAL_TENS or w in _ORDINAL_SCALES
            if w in _UNITS or w in _ORDINAL_UNITS:
                value = _UNITS[w] if w in _UNITS else _ORDINAL_UNITS[w]
                if last == "tens" and 0 < value < 10 or last in ("", "hundred", "scale", "and"):
                    current, last = current + value, "unit"
                else:
                    break
            elif w in _TENS or w in _ORDINAL_TENS:
                if last not in ("", "hundred", "scale", "and"):
                    break
                current, last = current + (_TENS[w] if w in _TENS else _ORDINAL_TENS[w]), "tens"
            elif (_SCALES.get(w) or _ORDINAL_SCALES.get(w)) == 100:
                if last not in ("", "unit", "tens", "scale"):
                    break
                current, last = (current or 1) * 100, "hundred"
            elif w in _SCALES or w in _ORDINAL_SCALES:
                if last not in ("", "unit", "tens", "hundred"):
                    break
                total, current, last = total + (current or 1) * (_SCALES.get(w) or _ORDINAL_SCALES[w]), 0, "scale"
            elif w == "and" and last in ("hundred", "scale") and j + 1 < len(words) and words[j + 1] in _NUMBER_WORDS:
                last = "and"
            else:
                break
            j += 1
            if ordinal:
                break
        out.append(str(total + current))
        i = j
    return out


def tokens(text: str) -> list[str]:
    """The normalised word tokens of already folded text (see the module's rules)."""
    text = _THOUSANDS.sub("", _spell_out(text))
    words: list[str] = []
    for word in _TOKEN.findall(text):
        word = ABBREVIATIONS.get(word, word)
        word = SPELLINGS.get(word, word)
        ordinal = _DIGIT_ORDINAL.fullmatch(word)
        if ordinal:
            word = ordinal.group(1)
        words.extend(COMPOUNDS[word].split() if word in COMPOUNDS else (word,))
    return _numbers(words)


def normalise(text: str) -> str:
    """The normalised form of already folded text: its tokens joined by single spaces."""
    return " ".join(tokens(text))
