"""The one username rule, for every way an account is made (the admin, single sign-on, the demo
seed): NFKC-normalised, written in one script, and not confusable with another account's name.

"Confusable" compares skeletons: each character replaced by a fixed representative of its Unicode
confusables class (the `confusable-homoglyphs` package's copy of the Unicode TR39 data), case
folded; so "оps" (Cyrillic о), "орѕ" (all Cyrillic), "OPS" and "0ps" all look like "ops". One script:
Latin, Cyrillic, Greek, ... each alone (digits and `@ . + - _` belong to none), or the mixes a
language needs (Unicode TR39 "highly restrictive": Latin with Han and kana, Han with Bopomofo or
Hangul)."""

from __future__ import annotations

import unicodedata
from functools import cache

from confusable_homoglyphs import categories, confusables
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

# TR39 "highly restrictive": one script, or one of these sets (Common belongs to every script).
_SCRIPT_SETS = (
    frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"LATIN", "HAN", "BOPOMOFO"}),
    frozenset({"LATIN", "HAN", "HANGUL"}),
)


@cache
def _classes() -> dict[str, str]:
    """{character: representative of its confusables class}: a union of every single-character
    confusable pair and of each ASCII letter with its capital; the smallest member represents."""
    parent: dict[str, str] = {}

    def find(char: str) -> str:
        parent.setdefault(char, char)
        while parent[char] != char:
            parent[char] = parent[parent[char]]
            char = parent[char]
        return char

    def union(first: str, second: str) -> None:
        a, b = find(first), find(second)
        if a != b:
            parent[max(a, b)] = min(a, b)

    for char, homoglyphs in confusables.confusables_data.items():
        if len(char) == 1:
            for homoglyph in homoglyphs:
                if len(homoglyph["c"]) == 1:
                    union(char, homoglyph["c"])
    for letter in "abcdefghijklmnopqrstuvwxyz":
        union(letter, letter.upper())
    return {char: find(char) for char in parent}


def username_skeleton(username: str) -> str:
    """What a username looks like: NFKC, each character its confusables class's representative,
    case folded. Two names with one skeleton are confusable."""
    classes = _classes()
    text = unicodedata.normalize("NFKC", username)
    return "".join(classes.get(char, char) for char in text).casefold()


def _is_one_script(username: str) -> bool:
    scripts = categories.unique_aliases(username) - {"COMMON"}
    return len(scripts) <= 1 or any(scripts <= allowed for allowed in _SCRIPT_SETS)


def check_new_username(
    username: str, *, user_pk: int | None = None, others_named_alike_only: bool = False
) -> str:
    """The username an account is made with (or renamed to), NFKC-normalised; raises ValidationError
    naming `username` when it mixes scripts or is confusable with another account's name (any
    case). `user_pk`: the account being renamed, which may keep looking like itself.

    Reads every username once (skeletons are not stored): fine for account creation, which is rare."""
    name = unicodedata.normalize("NFKC", username)
    if not _is_one_script(name):
        raise ValidationError(
            {
                "username": (
                    f"The username {name!r} mixes scripts (e.g. Latin and Cyrillic letters), so it "
                    "could pass for another name: write it in one script."
                )
            }
        )
    skeleton = username_skeleton(name)
    others = get_user_model().objects.values_list("username", flat=True)
    if user_pk is not None:
        others = others.exclude(pk=user_pk)
    if others_named_alike_only:
        others = others.exclude(username=name)
    for existing in others.iterator():
        if username_skeleton(existing) == skeleton:
            raise ValidationError(
                {
                    "username": (
                        f"The username {name!r} looks too much like the existing account "
                        f"{existing!r}: choose one that cannot be mistaken for it."
                    )
                }
            )
    return name


def validate_username(value: str) -> None:
    """The rule as a validator of the user model's username field (portal.apps), so that every way an
    account is made through Django's own code, `manage.py createsuperuser` included, applies it."""
    try:
        check_new_username(value, others_named_alike_only=True)
    except ValidationError as exc:
        raise ValidationError(exc.message_dict["username"]) from exc
