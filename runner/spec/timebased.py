"""Hudi's TimestampBased settings without Spark: Joda patterns and time zone ids.

Pure Python, so `runner validate` can refuse an unsupported pattern or zone without a JVM.
The key generator (runner.keygen.timestamp) uses the translated Spark patterns.

Joda pattern letters supported (docs/keygen.md has the table):
  G era, y/Y year, M month (MMM short text, MMMM full), d day, D day of year, E weekday text,
  a AM/PM, H hour 0-23, k hour 1-24, K hour 0-11, h clock hour 1-12, m minute, s second,
  S fraction; in input formats also Z/ZZ (offset: Joda parses `Z`, `+08`, `+0800`, `+08:00`)
  and ZZZ (zone id).
Refused: x w e C (week-based and century fields Spark cannot parse), z (Joda cannot parse
it either), yy/YY in input formats (Joda pivots two-digit years around today, Spark on 2000),
Z in output formats (paths are wall-clock time in the output zone), any other letter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from functools import cache
from zoneinfo import ZoneInfo, available_timezones

TIMESTAMP_TYPES = (
    "UNIX_TIMESTAMP",
    "DATE_STRING",
    "MIXED",
    "EPOCHMILLISECONDS",
    "EPOCHMICROSECONDS",
    "SCALAR",
)
STRING_TYPES = ("DATE_STRING", "MIXED")
TIME_UNITS = (
    "NANOSECONDS",
    "MICROSECONDS",
    "MILLISECONDS",
    "SECONDS",
    "MINUTES",
    "HOURS",
    "DAYS",
)

# Joda's DateTimeZone.getConvertedId: old three-letter Java ids become regions (EST is
# America/New_York, with DST, not a fixed -05:00 as Spark's ZoneId.SHORT_IDS would have it).
_JODA_OLD_IDS = {
    "GMT": "UTC",
    "MIT": "Pacific/Apia",
    "HST": "Pacific/Honolulu",
    "AST": "America/Anchorage",
    "PST": "America/Los_Angeles",
    "MST": "America/Denver",
    "PNT": "America/Phoenix",
    "CST": "America/Chicago",
    "EST": "America/New_York",
    "IET": "America/Indiana/Indianapolis",
    "PRT": "America/Puerto_Rico",
    "CNT": "America/St_Johns",
    "AGT": "America/Argentina/Buenos_Aires",
    "BET": "America/Sao_Paulo",
    "ART": "Africa/Cairo",
    "CAT": "Africa/Harare",
    "EAT": "Africa/Addis_Ababa",
    "NET": "Asia/Yerevan",
    "PLT": "Asia/Karachi",
    "IST": "Asia/Kolkata",
    "BST": "Asia/Dhaka",
    "VST": "Asia/Ho_Chi_Minh",
    "CTT": "Asia/Shanghai",
    "JST": "Asia/Tokyo",
    "ACT": "Australia/Darwin",
    "AET": "Australia/Sydney",
    "SST": "Pacific/Guadalcanal",
    "NST": "Pacific/Auckland",
    "ECT": "Europe/Paris",
}
# java.util.TimeZone's custom ids: GMT+h, GMT+hh, GMT+h:mm, GMT+hh:mm, GMT+hmm, GMT+hhmm.
_CUSTOM_ID_RE = re.compile(r"^GMT([+-])(?:(\d{1,2})(?::(\d{2}))?|(\d)(\d{2})|(\d{2})(\d{2}))$")


@cache
def _regions() -> frozenset[str]:
    return frozenset(available_timezones())


def resolve_zone(zone_id: str) -> str | None:
    """A Hudi time zone id as the id Spark must use for the same zone, or None when unknown.

    Follows java.util.TimeZone.getTimeZone then Joda's DateTimeZone.forTimeZone: old ids map to
    regions, GMT+8:00 is a fixed offset (returned as +08:00), GMT and UTC are UTC. Hudi turns
    an unknown id into GMT silently; we return None so the caller can refuse it.
    """
    zone_id = zone_id.strip()
    if zone_id in ("UTC", "GMT"):
        return "UTC"
    if zone_id in _JODA_OLD_IDS:
        return _JODA_OLD_IDS[zone_id]
    match = _CUSTOM_ID_RE.match(zone_id)
    if match:
        sign, h1, m1, h2, m2, h3, m3 = match.groups()
        hours = int(h1 or h2 or h3)
        minutes = int(m1 or m2 or m3 or 0)
        if hours > 23 or minutes > 59:
            return None
        if hours == minutes == 0:
            return "UTC"
        return f"{sign}{hours:02d}:{minutes:02d}"
    if zone_id in _regions():
        return zone_id
    return None


def zone_offset_at_epoch(zone: str) -> timedelta:
    """The zone's UTC offset at 1970-01-01T00:00:00.001Z (for Hudi's null-timestamp string)."""
    instant = datetime(1970, 1, 1, 0, 0, 0, 1000, tzinfo=UTC)
    if zone == "UTC":
        return timedelta(0)
    if zone[0] in "+-":
        sign = 1 if zone[0] == "+" else -1
        return sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    offset = instant.astimezone(ZoneInfo(zone)).utcoffset()
    assert offset is not None
    return offset


def joda_offset_text(offset: timedelta, letters: int, zone: str) -> str:
    """How Joda prints Z (+0800), ZZ (+08:00) and ZZZ (the zone id)."""
    if letters >= 3:
        return zone
    tz = timezone(offset)
    text = datetime(2000, 1, 1, tzinfo=tz).strftime("%z")[:5]
    return text if letters == 1 else f"{text[:3]}:{text[3:]}"


@dataclass(frozen=True)
class _Token:
    letter: str  # "" for literal text
    count: int = 0
    text: str = ""


def _tokens(pattern: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "'":
            # Quoted literal; '' is a single quote, inside or outside quotes.
            j = i + 1
            text = ""
            if j < len(pattern) and pattern[j] == "'":
                tokens.append(_Token("", text="'"))
                i += 2
                continue
            while j < len(pattern):
                if pattern[j] == "'":
                    if j + 1 < len(pattern) and pattern[j + 1] == "'":
                        text += "'"
                        j += 2
                        continue
                    break
                text += pattern[j]
                j += 1
            if j >= len(pattern):
                raise ValueError(f"unterminated quote in {pattern!r}")
            tokens.append(_Token("", text=text))
            i = j + 1
        elif ch.isascii() and ch.isalpha():
            j = i
            while j < len(pattern) and pattern[j] == ch:
                j += 1
            tokens.append(_Token(ch, count=j - i))
            i = j
        else:
            tokens.append(_Token("", text=ch))
            i += 1
    # One literal per run: Java reads '' inside a quoted literal as a quote character.
    merged: list[_Token] = []
    for token in tokens:
        if merged and not token.letter and not merged[-1].letter:
            merged[-1] = _Token("", text=merged[-1].text + token.text)
        else:
            merged.append(token)
    return merged


_MAX_COUNT = {"d": 2, "D": 3, "H": 2, "h": 2, "k": 2, "K": 2, "m": 2, "s": 2, "S": 9, "a": 1}
_REFUSED = {
    "x": "week-based year is not supported (Spark cannot parse week-based fields)",
    "w": "week of week-year is not supported (Spark cannot parse week-based fields)",
    "e": "day-of-week number is not supported (Spark cannot parse week-based fields)",
    "C": "century of era is not supported",
    "z": "time zone names are not supported (Joda cannot parse them either)",
}


def _letter(token: _Token, parse: bool) -> str:
    """The Spark pattern for one Joda letter run; raises ValueError when unsupported."""
    letter, count = token.letter, token.count
    if letter in _REFUSED:
        raise ValueError(f"pattern letter '{letter}': {_REFUSED[letter]}")
    if letter in ("y", "Y"):
        if count == 2 and parse:
            raise ValueError(
                f"'{letter * 2}' in an input format: Joda pivots two-digit years around the "
                "current year and Spark on 2000; use yyyy"
            )
        return "y" * count  # Joda's Y is year of era, which is Spark's y
    if letter == "M":
        return "M" * min(count, 4)
    if letter == "E":
        return "EEEE" if count >= 4 else "E"
    if letter == "G":
        return "G"
    if letter in _MAX_COUNT:
        if count > _MAX_COUNT[letter]:
            raise ValueError(f"pattern letter '{letter}' repeated {count} times is not supported")
        return letter * count
    raise ValueError(f"pattern letter '{letter}' is not a supported Joda pattern letter")


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _check(pattern: str) -> list[_Token]:
    if not pattern.strip():
        raise ValueError("the pattern is empty")
    return _tokens(pattern)


def spark_parse_patterns(pattern: str) -> tuple[str, ...]:
    """Spark patterns that together parse what Joda parses with `pattern` (tried in order).

    Joda's Z accepts `Z`, `+08`, `+0800` and `+08:00`; Spark's X accepts the first three and
    XXX the first and last, so a pattern with offsets becomes two Spark patterns.
    """
    variants = [""]
    for token in _check(pattern):
        if token.letter == "Z":
            if token.count >= 3:
                variants = [v + "VV" for v in variants]
            else:
                variants = [v + x for v in variants for x in ("X", "XXX")]
        elif token.letter:
            piece = _letter(token, parse=True)
            variants = [v + piece for v in variants]
        else:
            variants = [v + _literal(token.text) for v in variants]
    return tuple(dict.fromkeys(variants))


def spark_format_pattern(pattern: str, zone: str | None = None) -> str:
    """The Spark pattern that prints what Joda prints with `pattern`.

    Offsets (Z) are refused unless `zone` is given; then they print as that zone's offset at
    the epoch (only Hudi's null-timestamp string needs this).
    """
    out = ""
    for token in _check(pattern):
        if token.letter == "Z":
            if zone is None:
                raise ValueError(
                    "pattern letter 'Z' (time zone offset) is not supported in an output "
                    "format: partition paths are wall-clock time in the output time zone"
                )
            out += _literal(joda_offset_text(zone_offset_at_epoch(zone), token.count, zone))
        elif token.letter:
            out += _letter(token, parse=False)
        else:
            out += _literal(token.text)
    return out


def has_offset(pattern: str) -> bool:
    """Whether the text parsed with this Joda pattern carries its own offset or zone."""
    return any(t.letter == "Z" for t in _tokens(pattern))


DEFAULT_FORMATS_DELIMITER = ","  # Hudi's input.dateformat.list.delimiter.regex default


def split_formats(value: str, delimiter_regex: str | None) -> tuple[str, ...]:
    """Hudi's input.dateformat list: split on the (trimmed) regex, default ',', trim each."""
    regex = (delimiter_regex or "").strip() or DEFAULT_FORMATS_DELIMITER
    return tuple(f.strip() for f in re.split(regex, value) if f.strip())
