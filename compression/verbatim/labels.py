"""Labels: a few words that say what an anchor is, read off the text it was found in (pure).

A handoff's anchor index writes each anchor with what it is (`compression.verbatim.anchors`).
The cheapest honest answer is the key the anchor is the value of: `"flight_number": "HAT009"`
says HAT009 is a flight number, and `reservations: [A, B]` that A and B are reservations. Else
the words just before it on its line (`Your reservation 4BMN53` -> `reservation`), else its
kind by shape (`file`, `path`, `error`, `url`, `id`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_LABEL_CHARS = 32
LABEL_SCAN_CHARS = 80  # of the line before an anchor, where its key or describing words are
LINE_WORDS = 2  # besides the anchor, fewest words a line needs to say more than a label
LABEL_OCCURRENCES = 4  # of an anchor in one text, searched for a `key: value` line
PRESENT_OCCURRENCES = 16  # of an anchor in the view, searched for it with its key

_KEY = re.compile(r"([A-Za-z_][\w.-]{1,40})[\"']?\s*[:=]")  # "key": value, key=value, Key: value
_WORD = re.compile(r"(?<![\w-])[A-Za-z][A-Za-z_-]+(?![\w-])")  # whole words, not an id's letters
# What a line says besides its anchor: words, values, numbers (not a list's `2.` marker).
_SAYS = re.compile(r"[A-Za-z0-9][\w.:/-]*")
_STOP_WORDS = frozenset(
    "a an and are as at be by for from has have in is it its my of on or our that the their "
    "this to was were will with you your".split()
)
# From a key's `:` to its value: quotes and brackets, and a list's earlier items.
_KEYED_GAP = re.compile(r"[\s\"'\[{(]*(?:[\w./-]+[\"']?\s*,\s*[\"']?)*")
_KEY_LABEL = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[_.-][A-Za-z0-9]+)+")  # one identifier, parted
_NOT_KEYS = frozenset(("http", "https", "ftp", "file"))
# A setting's line: a config key (`VAULT_CODE`, `DATABASE_URL`) at its start, then its value.
_SETTING = re.compile(
    r"^[ \t\"']*([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)[\"']?[ \t]*[:=][ \t]*[\"']?([^\s\"',]{4,200})", re.M
)
_ERROR = re.compile(r"[A-Z][A-Za-z0-9]*(?:Error|Exception)")
_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}$")
_SYSTEM_ROOTS = tuple(
    f"/{root}/" for root in "bin sbin usr lib lib64 etc var run proc sys dev boot".split()
)


def label(text: str, value: str) -> str:
    """A few words that say what `value` is, read off `text` (where it was found): the key it
    is the value of on any of its first lines, else the words just before it, else its kind.
    Never empty."""
    befores = list(_befores(text, value))
    for before in befores:
        keys = _keys(before, value)
        if keys:
            return keys[-1][0][:MAX_LABEL_CHARS]
    if befores and kind(value) == "id":  # a path, an error, a URL: its kind says more
        words: list[str] = [
            w for w in _WORD.findall(befores[0])[-5:] if w.lower() not in _STOP_WORDS
        ]
        if words:
            return " ".join(words[-2:])[:MAX_LABEL_CHARS]
    return kind(value)


def says_more(line: str, value: str) -> bool:
    """Whether `line` says more of `value` than a label would: at least `LINE_WORDS` words
    besides it (`2. **Flight HAT102**` says "Flight", which its label says for a share of
    the cost; `The code for the south gate is X` says what X is for)."""
    rest = line.replace(value, " ")
    said = (word.rstrip(".:/-") for word in _SAYS.findall(rest))
    words = [
        word
        for word in said
        if word.lower() not in _STOP_WORDS and not (word.isdigit() and len(word) <= 2)
    ]
    return len(words) >= LINE_WORDS


def keyed(text: str, value: str) -> str:
    """The key `value` is the value of (`"flight_number": "HAT009"`, `user_id=mia_li_3668`,
    `ids: [A, B]`) on one of its first lines of `text`, or "": then `key: value` says what it
    is, and its line would say no more at a higher cost."""
    for before in _befores(text, value):
        keys = _keys(before, value)
        if keys and _KEYED_GAP.fullmatch(before[keys[-1][1] :]):
            return keys[-1][0][:MAX_LABEL_CHARS]
    return ""


def is_key(said: str) -> bool:
    """Whether a label is a key (`flight_number`, `VAULT_CODE`), not words or a kind."""
    return _KEY_LABEL.fullmatch(said) is not None


def keyed_as(text: str, value: str, key: str) -> bool:
    """Whether `text` holds `value` as the value of `key` (`key: value`, `"key": "value"`,
    `key=value`) on one of its first `PRESENT_OCCURRENCES`: a value in view without its key
    (a command's argument, a sentence) does not say what it is."""
    if f"{key}: {value}" in text:
        return True
    at = text.find(value)
    for _ in range(PRESENT_OCCURRENCES):
        if at < 0:
            return False
        before = text[max(0, text.rfind("\n", 0, at) + 1, at - LABEL_SCAN_CHARS) : at]
        keys = _keys(before, value)
        if keys and keys[-1][0][:MAX_LABEL_CHARS] == key:
            if _KEYED_GAP.fullmatch(before[keys[-1][1] :]):
                return True
        at = text.find(value, at + len(value))
    return False


def _keys(before: str, value: str) -> list[tuple[str, int]]:
    """The keys in `before`, each with where its `:` or `=` ends."""
    return [
        (m.group(1), m.end())
        for m in _KEY.finditer(before)
        if m.group(1).lower() not in _NOT_KEYS and m.group(1) != value
    ]


def _befores(text: str, value: str) -> Iterable[str]:
    """What stands before `value` on its line, for its first few occurrences."""
    at = text.find(value)
    for _ in range(LABEL_OCCURRENCES):
        if at < 0:
            return
        yield text[max(0, text.rfind("\n", 0, at) + 1, at - LABEL_SCAN_CHARS) : at]
        at = text.find(value, at + len(value))


def system_path(value: str) -> bool:
    """Whether `value` is a directory or program of the operating system (`/usr/sbin`,
    `/var/spool/lpd`, `/bin/bash`): a listing of the system names dozens, and they are seldom
    what the task works on. A file with an extension (`/etc/app.yaml`) is not."""
    return value.startswith(_SYSTEM_ROOTS) and not _EXTENSION.search(value)


def kind(value: str) -> str:
    """What an anchor is by its shape alone."""
    if value.startswith(("http://", "https://")):
        return "url"
    if _ERROR.fullmatch(value):
        return "error"
    if _EXTENSION.search(value):
        return "file"
    if "/" in value:
        return "path"
    return "id"


def settings(text: str) -> list[tuple[str, str]]:
    """Each setting of `text`, the whole of it (`VAULT_CODE: value`, `DATABASE_URL=value`
    at a line's start), as (value, its line): a full scan of a long tool output reads only
    its head and tail, and an older one not at all."""
    return [(match.group(2), match.group(0).strip(" \t\"'")) for match in _SETTING.finditer(text)]
