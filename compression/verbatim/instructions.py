"""Which user messages state or change an instruction (pure).

A compression keeps every user message it can; when their budget binds, the ones that say how
the work must be done go first: constraints ("never…", "only…", "must…"), corrections ("no,
…", "that's wrong"), updates ("from now on…", "instead…", "actually…", "use X rather than Y",
"not X but Y"). A message that merely asks or acknowledges ("ok, go on", "what does this do?")
does not.

The reading is a table of phrasings in several languages, matched in the head of the message:
rules are stated up front, and the rest of a long message is pasted material.
"""

from __future__ import annotations

import re
from functools import lru_cache

SCAN_CHARS = 4000

# Each entry one kind of phrasing; word boundaries keep "only" out of "commonly".
_ENGLISH = (
    # constraints and prohibitions
    r"must(?:n[’']?t)?|never|always|do not|don[’']?t|does not|doesn[’']?t|cannot|can[’']?t|"
    r"won[’']?t|should(?:n[’']?t)?|shall not|only|avoid|prefer(?:ably|red)?|without|"
    r"make sure|ensure|require[sd]?|at (?:least|most)|no (?:more|later|earlier|less) than|"
    r"deadline|budget|forbidden|not allowed|no need to|stop (?:using|doing|\w+ing)|"
    # updates and corrections
    r"from now on|going forward|henceforth|from here on|instead|rather than|rather|"
    r"actually|correction|scratch that|change of plans?|on second thought|"
    r"that(?:[’']s| is) (?:wrong|incorrect|not (?:right|what))|not what I (?:asked|meant|want)|"
    r"I meant|let[’']?s (?:use|switch|go with)|switch to|use \S+(?: \S+){0,4} (?:instead|not)|"
    r"keep (?:it|them|the)|please (?:use|keep|do not|don[’']?t|stick)|stick (?:to|with)|"
    r"remember (?:to|that)|important:|note:|"
    # "not X, but Y" / "X, not Y"
    r"not \S+(?: \S+){0,3},? but|, not \S+"
)
_ENGLISH_OPENERS = r"no[,.!]|nope\b|wait[,.!]|stop[,.!]"
_FRENCH = (
    r"ne (?:\w+ )?(?:jamais|pas|plus)|toujours|jamais|il faut|doit|doivent|seulement|"
    r"uniquement|plutôt que|plutôt|au lieu de|désormais|dorénavant|à partir de maintenant|"
    r"en fait|n[’']utilise pas|évite[rz]?|assure-toi|veille[rz]? à"
)
_GERMAN = (
    r"nie(?:mals)?|immer|nicht mehr|kein(?:e|en)?|muss|müssen|darfst nicht|dürfen nicht|"
    r"nur|stattdessen|anstatt|statt|lieber|ab jetzt|von nun an|ab sofort|eigentlich|"
    r"vermeide|achte darauf|stelle sicher"
)
_SPANISH = (
    r"nunca|siempre|no (?:uses|hagas|toques|cambies)|debe[sn]?|tienes que|hay que|solo|"
    r"sólo|únicamente|en (?:vez|lugar) de|a partir de ahora|de ahora en adelante|"
    r"mejor|evita|asegúrate|en realidad"
)
_PORTUGUESE = (
    r"nunca|sempre|não (?:use|faça|mexa|altere)|deve[ms]?|tem que|apenas|somente|"
    r"em vez de|ao invés de|a partir de agora|daqui (?:pra|para) frente|evite|certifique-se"
)
# Scripts without spaces between words: no word boundaries.
_CJK = (
    r"不要|别|不能|不许|禁止|必须|务必|一定要|只(?:能|用|要)|总是|永远|始终|改(?:用|成|为)|"
    r"换成|而不是|不是.{1,12}而是|从现在(?:开始|起)|以后都|今后|其实|注意|"
    r"しないで|するな|しては(?:いけ|なら)ない|禁止|必ず|常に|だけ|代わりに|ではなく|"
    r"今後|これから(?:は)?|하지 ?마|반드시|항상|대신|앞으로|만 사용"
)
_WORDS = re.compile(
    rf"\b(?:{_ENGLISH}|{_FRENCH}|{_GERMAN}|{_SPANISH}|{_PORTUGUESE})(?!\w)", re.IGNORECASE
)
_OPENERS = re.compile(rf"^\s*(?:{_ENGLISH_OPENERS})", re.IGNORECASE)
_SCRIPTS = re.compile(_CJK)


# A message that explicitly takes back an earlier one: "ignore my previous message", "forget
# the earlier instruction", "scratch that". Which one it takes back: `supersedes`.
_BACK = (
    r"ignore|disregard|forget|scratch|never ?mind|withdraw|replaces|"
    r"ignor[ea]z?|oublie[zr]?|annule[zr]?|ignoriere|vergiss|olvida|ignora|esquece|desconsidere"
)
_EARLIER = (
    r"(?:(?:my|the|that|your|mon|ma|mes|le|la|les|meine|die|den|das|mi|el|lo|o|a|minha|meu)"
    r"\s+)?(?:previous|last|earlier|above|prior|former|précédente?s?|dernière?s?|"
    r"letzten?|vorherigen?|früheren?|anterior(?:es)?|últim[oa]s?)"
)
_RULE = (
    r"instructions?|rules?|constraints?|requirements?|directions?|consignes?|"
    r"Anweisung(?:en)?|Vorgabe|instrucci[oó]n(?:es)?|instru[cç](?:[aã]o|[oõ]es)|regras?|指示"
)
_THING = (
    rf"{_RULE}|message|request|question|prompt|"
    r"Nachricht|Frage|mensaje|mensagem|pedido|demande"
)
_SUPERSEDES = re.compile(
    rf"\b(?:{_BACK})\b[^.!?\n]{{0,24}}?\b(?:{_EARLIER})\s+(?:\w+\s+)?(?:{_THING})\b|"
    rf"\b(?:{_BACK})\b\s+(?:\w+\s+)?(?:{_THING})\b\s+(?:{_EARLIER})|"
    # Alone at the start, these take back what was just said; "scratch that file" does not.
    r"^\s*(?:(?:scratch that|forget (?:that|it)|ignore that|oublie ça|vergiss das|olvida eso|"
    r"esquece isso)(?=\s*(?:[,.;:!\u2014-]|$))|never ?mind\b)|"
    r"(?:忽略|无视|不要管|忘掉|撤回)(?:我)?(?:之前|上一条|上面|前面|刚才)的?(?:指示|要求|规则|消息|话)|"
    r"(?:前の|さっきの)(?:指示|メッセージ)は(?:無視|取り消)",
    re.IGNORECASE,
)
_RULE_WORD = re.compile(rf"(?:{_RULE})", re.IGNORECASE)


def supersedes(text: str) -> str | None:
    """What earlier message a user message explicitly takes back: "instruction" (the newest
    one stating an instruction), "message" (the one just before), or None."""
    return _supersedes(text[:SCAN_CHARS])


@lru_cache(maxsize=4096)
def _supersedes(head: str) -> str | None:
    found = _SUPERSEDES.search(head)
    if found is None:
        return None
    return "instruction" if _RULE_WORD.search(found.group(0)) else "message"


def states_instruction(text: str) -> bool:
    """Whether a user message states or changes how the work must be done."""
    return _states(text[:SCAN_CHARS])


@lru_cache(maxsize=4096)  # the same messages come back at every compression of a session
def _states(head: str) -> bool:
    return bool(_OPENERS.search(head) or _WORDS.search(head) or _SCRIPTS.search(head))


def clear_cache() -> None:
    """Forget memoized judgements (benchmarks measuring a cold pass)."""
    _states.cache_clear()
    _supersedes.cache_clear()
