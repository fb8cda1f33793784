"""Which settings hold secrets, and the last line of defence that keeps their values out
of what floeline prints.

Secret values are read by the modules that use them (config/kafka_security.py, the AWS
settings) and never put into messages; `remember` records them anyway so that text
floeline did not write itself (a Java exception's message, a traceback) is scrubbed by
`scrub` before it is shown. SECRET_KEY_REGEX is also Spark's redaction pattern
(spark.redaction.regex and spark.sql.redaction.options.regex; see spark.py)."""

from __future__ import annotations

import re
import threading

# Key names whose values are secret: Kafka's sasl.jaas.config and *.password, AWS secret
# keys and session tokens, private keys and their passphrases, OAuth client secrets, a
# schema registry's basic.auth.user.info (user:password) and ssl.keystore.key (a PEM key).
SECRET_KEY_REGEX = (r"(?i)secret|password|passphrase|token|jaas|private[._]?key|credential|"
                    r"access[._]?key|user[._]info|keystore[._]key")
_SECRET_KEY = re.compile(SECRET_KEY_REGEX)
MASK = "****"

_known: set[str] = set()
# One process may validate a config (remember) while another thread scrubs an error
# (the worker: many connectors and REST requests at once); iterating a set another
# thread grows raises "Set changed size during iteration".
_lock = threading.Lock()


def is_secret_key(key: str) -> bool:
    return _SECRET_KEY.search(key) is not None


def remember(*values: str | None) -> None:
    """Values `scrub` replaces from now on (empty or very short ones are skipped: they
    would mask ordinary text and are no secret worth the name)."""
    with _lock:
        _known.update(v for v in values if v and len(v) >= 4)


def remember_settings(settings) -> None:
    """Every secret-keyed value of a config (a mapping of key -> value)."""
    remember(*(v for k, v in settings.items() if is_secret_key(k)))


_ASSIGNMENT = re.compile(r"""\b([\w.]+)(\s*=\s*)'((?:[^']|'')*)'""")


def mask_assignments(text: str) -> str:
    """SQL text with the value of every secret-keyed `KEY = 'value'` masked (a stage's
    CREDENTIALS=(AWS_SECRET_KEY='...') quoted in an error message), keys kept."""
    return _ASSIGNMENT.sub(lambda m: f"{m[1]}{m[2]}'{MASK}'" if is_secret_key(m[1]) else m[0], text)


def scrub(text: str) -> str:
    """`text` with every remembered secret value replaced by ****."""
    with _lock:
        known = sorted(_known, key=len, reverse=True)
    for value in known:
        if value in text:
            text = text.replace(value, MASK)
    return text
