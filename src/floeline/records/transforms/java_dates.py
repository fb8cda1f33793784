"""java.text.SimpleDateFormat, in UTC: the patterns Kafka's TimestampConverter and
TimestampRouter take."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from floeline.records.transforms.base import TransformFailure

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def epoch_ms(value: datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return (value - EPOCH) // timedelta(milliseconds=1)


_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_JAVA_LETTERS = set("GyMdkHmsSEDFwWahKzZYuXL")
_UNSUPPORTED_LETTERS = {"F": "day of week in month", "w": "week in year", "W": "week in month",
                        "Y": "week year (did you mean y, the year?)"}
_NUMERIC = set("yMLdHkKhmsSDu")
_ZONE = r"(?i:Z|[+-]\d{2}(?::?\d{2})?|(?:UTC|GMT|UT)(?:[+-]\d{1,2}(?::?\d{2})?)?)"


class JavaDateFormat:
    """The parts of SimpleDateFormat Kafka's TimestampConverter relies on, always in UTC:
    letters G y M L d H k K h m s S E u D a z Z X, quoted 'literals' and ''. Parsing is
    lenient like Java's (fields overflow into the next unit, text after the pattern is
    ignored); English month and day names; zones Z, +hh[:mm], UTC/GMT[+hh:mm]."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self.tokens = tuple(self._tokenize(pattern))
        self.regex = re.compile(self._parse_regex())

    @staticmethod
    def _tokenize(pattern: str):
        literal, i = "", 0
        while i < len(pattern):
            ch = pattern[i]
            if ch == "'":
                if pattern[i + 1:i + 2] == "'":
                    literal, i = literal + "'", i + 2
                    continue
                i += 1
                while True:
                    if i >= len(pattern):
                        raise ValueError("unterminated quote")
                    if pattern[i] == "'":
                        if pattern[i + 1:i + 2] != "'":
                            break
                        i += 1
                    literal, i = literal + pattern[i], i + 1
                i += 1
            elif ch.isascii() and ch.isalpha():
                if ch not in _JAVA_LETTERS:
                    raise ValueError(f"illegal pattern character {ch!r}")
                if ch in _UNSUPPORTED_LETTERS:
                    raise ValueError(f"pattern letter {ch!r} ({_UNSUPPORTED_LETTERS[ch]}) is not supported")
                end = i
                while end < len(pattern) and pattern[end] == ch:
                    end += 1
                if literal:
                    yield literal
                    literal = ""
                yield (ch, end - i)
                i = end
            else:
                literal, i = literal + ch, i + 1
        if literal:
            yield literal

    @staticmethod
    def _numeric(token) -> bool:
        return isinstance(token, tuple) and token[0] in _NUMERIC and not (token[0] in "ML" and token[1] >= 3)

    def _parse_regex(self) -> str:
        parts = []
        for index, token in enumerate(self.tokens):
            if isinstance(token, str):
                parts.append(re.escape(token))
                continue
            letter, count = token
            following = self.tokens[index + 1] if index + 1 < len(self.tokens) else None
            if self._numeric(token):
                body = rf"\d{{{count}}}" if self._numeric(following) else r"\d+"
            elif letter in "ML":
                body = "(?i:" + "|".join(_MONTHS + tuple(m[:3] for m in _MONTHS)) + ")"
            elif letter == "E":
                body = "(?i:" + "|".join(_DAYS + tuple(d[:3] for d in _DAYS)) + ")"
            elif letter == "a":
                body = "(?i:AM|PM)"
            elif letter == "G":
                body = "(?i:AD)"
            else:  # z Z X
                body = _ZONE
            parts.append(f"(?P<f{index}>{body})")
        return "".join(parts)

    def format(self, ms: int) -> str:
        try:
            t = EPOCH + timedelta(milliseconds=ms)
        except OverflowError:
            raise TransformFailure(f"timestamp {ms} ms is out of range") from None
        out = []
        for token in self.tokens:
            if isinstance(token, str):
                out.append(token)
                continue
            letter, n = token
            if letter == "y":
                out.append(f"{t.year % 100:02d}" if n == 2 else f"{t.year:0{n}d}")
            elif letter in "ML":
                out.append(_MONTHS[t.month - 1] if n >= 4 else _MONTHS[t.month - 1][:3] if n == 3
                           else f"{t.month:0{n}d}")
            elif letter == "E":
                out.append(_DAYS[t.weekday()] if n >= 4 else _DAYS[t.weekday()][:3])
            elif letter == "G":
                out.append("AD")
            elif letter == "a":
                out.append("AM" if t.hour < 12 else "PM")
            elif letter == "z":
                out.append("Coordinated Universal Time" if n >= 4 else "UTC")
            elif letter == "Z":
                out.append("+0000")
            elif letter == "X":
                out.append("Z")
            else:
                number = {"d": t.day, "H": t.hour, "k": t.hour or 24, "K": t.hour % 12,
                          "h": t.hour % 12 or 12, "m": t.minute, "s": t.second,
                          "S": t.microsecond // 1000, "D": t.timetuple().tm_yday,
                          "u": t.isoweekday()}[letter]
                out.append(f"{number:0{n}d}")
        return "".join(out)

    def parse(self, text: str) -> int:
        """Epoch milliseconds; ValueError when the text does not match."""
        match = self.regex.match(text)
        if match is None:
            raise ValueError(text)
        year, month, day, day_of_year = 1970, 1, 1, None
        hour = hour12 = pm = None
        minute = second = millis = offset = 0
        for index, token in enumerate(self.tokens):
            if isinstance(token, str):
                continue
            letter, count = token
            value = match.group(f"f{index}")
            if letter == "y":
                year = _two_digit_year(int(value)) if count <= 2 and len(value) == 2 else int(value)
            elif letter in "ML":
                month = int(value) if count <= 2 else _month_number(value)
            elif letter == "d":
                day = int(value)
            elif letter == "D":
                day_of_year = int(value)
            elif letter == "H":
                hour = int(value)
            elif letter == "k":
                hour = int(value) % 24
            elif letter in "hK":
                hour12 = int(value) % 12
            elif letter == "a":
                pm = value.upper() == "PM"
            elif letter == "m":
                minute = int(value)
            elif letter == "s":
                second = int(value)
            elif letter == "S":
                millis = int(value)
            elif letter in "zZX":
                offset = _zone_offset_minutes(value)
        if hour is None:
            hour = (hour12 or 0) + (12 if pm else 0)
        year += (month - 1) // 12
        month = (month - 1) % 12 + 1
        if day_of_year is not None and not any(isinstance(t, tuple) and t[0] in "MLd" for t in self.tokens):
            month, day = 1, day_of_year
        try:
            moment = (datetime(year, month, 1, tzinfo=timezone.utc)
                      + timedelta(days=day - 1, hours=hour, minutes=minute - offset, seconds=second,
                                  milliseconds=millis))
        except (ValueError, OverflowError):
            raise ValueError(text) from None
        return epoch_ms(moment)


def _month_number(name: str) -> int:
    name = name.lower()
    return next(i + 1 for i, m in enumerate(_MONTHS) if m.lower() == name or m[:3].lower() == name)


def _two_digit_year(yy: int) -> int:
    """SimpleDateFormat's rule for yy: within 80 years before and 20 after today."""
    start = datetime.now(timezone.utc).year - 80
    year = start // 100 * 100 + yy
    return year + 100 if year < start else year


def _zone_offset_minutes(text: str) -> int:
    upper = text.upper()
    for name in ("UTC", "GMT", "UT"):
        if upper.startswith(name):
            upper = upper[len(name):]
            break
    if upper in ("", "Z"):
        return 0
    sign = -1 if upper[0] == "-" else 1
    digits = upper[1:].replace(":", "")
    if len(digits) <= 2:
        hours, minutes = int(digits), 0
    else:
        hours, minutes = int(digits[:-2]), int(digits[-2:])
    return sign * (hours * 60 + minutes)
