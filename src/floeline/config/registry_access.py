"""How a converter reaches its schema registry, read from its `<key|value>.converter.*`
options as Confluent's converters name them:

- `schema.registry.url`: one or more base URLs, comma-separated;
- Basic auth: `basic.auth.credentials.source=USER_INFO` with `basic.auth.user.info`
  (or `schema.registry.basic.auth.user.info`) as `user:password`, or `URL` with them in
  the URL (`https://user:password@host`);
- bearer auth: `bearer.auth.credentials.source=STATIC_TOKEN` with `bearer.auth.token`,
  and the headers a managed registry routes by, `bearer.auth.logical.cluster`
  (target-sr-cluster) and `bearer.auth.identity.pool.id` (Confluent-Identity-Pool-Id);
- TLS: `schema.registry.ssl.*` (config/tls.py: truststore, keystore for mutual TLS, in
  JKS, PKCS12 or PEM form, and the host name check).

Basic and bearer auth are exclusive, as in Confluent's client. The result is a frozen,
hashable RegistryAccess the executors build their client from."""

from __future__ import annotations

from dataclasses import dataclass, field

from floeline import secrets
from floeline.config.tls import TlsSettings, read_tls

TLS_PREFIX = "schema.registry."
BEARER_SOURCES = ("STATIC_TOKEN",)
# Sources Confluent's client knows that floeline does not implement (yet): named as such.
_OTHER_BEARER_SOURCES = ("OAUTHBEARER", "SASL_OAUTHBEARER_INHERIT", "CUSTOM")


@dataclass(frozen=True)
class RegistryAccess:
    urls: str  # schema.registry.url as given
    user_info: str | None = field(default=None, repr=False)  # Basic auth's user:password
    bearer_token: str | None = field(default=None, repr=False)
    logical_cluster: str | None = None  # bearer.auth.logical.cluster
    identity_pool: str | None = None  # bearer.auth.identity.pool.id
    tls: TlsSettings = TlsSettings(f"value.converter.{TLS_PREFIX}")
    key: str = "value.converter"  # where the options came from, for messages

    def headers(self) -> dict[str, str]:
        """The headers every request carries: Authorization, and a managed registry's
        routing headers."""
        import base64

        found = {}
        if self.user_info:
            found["Authorization"] = "Basic " + base64.b64encode(self.user_info.encode()).decode()
        elif self.bearer_token:
            found["Authorization"] = "Bearer " + self.bearer_token
            if self.logical_cluster:
                found["target-sr-cluster"] = self.logical_cluster
            if self.identity_pool:
                found["Confluent-Identity-Pool-Id"] = self.identity_pool
        return found

    def auth_fix(self) -> str:
        """What to check when the registry refuses the credentials."""
        if self.bearer_token:
            return (f"check {self.key}.bearer.auth.token (is it current, and allowed to read "
                    f"this subject?)" + (f" and {self.key}.bearer.auth.logical.cluster"
                                         if self.logical_cluster else ""))
        if self.user_info:
            return f"check {self.key}.basic.auth.user.info (user:password)"
        return (f"the registry needs credentials: set {self.key}.basic.auth.credentials.source="
                f"USER_INFO with {self.key}.basic.auth.user.info, or "
                f"{self.key}.bearer.auth.credentials.source=STATIC_TOKEN with "
                f"{self.key}.bearer.auth.token")


def read_registry_access(options: dict[str, str], key: str, problems: list[str]) -> RegistryAccess:
    """The RegistryAccess of a converter's options (`key` is `value.converter` or
    `key.converter`); problems name the full setting and never a secret's value."""

    def value(name: str) -> str | None:
        found = options.get(name)
        return found.strip() if found is not None else None

    basic = (value("basic.auth.credentials.source") or "").upper()
    bearer = (value("bearer.auth.credentials.source") or "").upper()
    user_info = token = None
    urls = value("schema.registry.url") or ""
    if basic and bearer:
        problems.append(f"{key}.basic.auth.credentials.source and {key}.bearer.auth.credentials.source "
                        f"are both set; a registry client uses one of them, keep one")
    elif basic:
        if basic == "URL":
            urls, user_info = _url_user_info(urls)
            if not user_info:
                problems.append(f"{key}.basic.auth.credentials.source=URL needs the credentials in "
                                f"{key}.schema.registry.url (https://user:password@host:port)")
        elif basic != "USER_INFO":
            problems.append(f"{key}.basic.auth.credentials.source={basic} is not supported; accepted "
                            f"values: USER_INFO (with {key}.basic.auth.user.info=user:password), URL")
        else:
            user_info = value("basic.auth.user.info") or value("schema.registry.basic.auth.user.info")
            if not user_info:
                problems.append(f"{key}.basic.auth.credentials.source=USER_INFO needs "
                                f"{key}.basic.auth.user.info (user:password)")
            elif ":" not in user_info:
                problems.append(f"{key}.basic.auth.user.info must be user:password (it has no ':')")
    elif bearer:
        if bearer in _OTHER_BEARER_SOURCES:
            problems.append(f"{key}.bearer.auth.credentials.source={bearer} is not supported by "
                            f"floeline; use STATIC_TOKEN with {key}.bearer.auth.token (a token your "
                            f"identity provider issued), or Basic auth (API key and secret)")
        elif bearer not in BEARER_SOURCES:
            problems.append(f"{key}.bearer.auth.credentials.source={bearer} is not a bearer credentials "
                            f"source; accepted value: STATIC_TOKEN (with {key}.bearer.auth.token)")
        else:
            token = value("bearer.auth.token")
            if not token:
                problems.append(f"{key}.bearer.auth.credentials.source=STATIC_TOKEN needs "
                                f"{key}.bearer.auth.token (the token itself)")
            elif any(c.isspace() for c in token):
                problems.append(f"{key}.bearer.auth.token holds white space; give the token alone "
                                f"(without 'Bearer ')")
    elif value("bearer.auth.token"):
        problems.append(f"{key}.bearer.auth.token is set but {key}.bearer.auth.credentials.source is "
                        f"not; set it to STATIC_TOKEN")
    secrets.remember(user_info, token)
    # The TLS keys are named in full (value.converter.schema.registry.ssl.*) in messages.
    prefix = f"{key}.{TLS_PREFIX}"
    tls = read_tls(lambda name: value(name[len(key) + 1:]), problems, prefix)
    return RegistryAccess(urls, user_info, token,
                          value("bearer.auth.logical.cluster") or None,
                          value("bearer.auth.identity.pool.id") or None, tls, key)


def _url_user_info(urls: str) -> tuple[str, str | None]:
    """The URLs without their user:password@ part, and that part (Confluent's
    basic.auth.credentials.source=URL); URLs percent-encode special characters there."""
    import urllib.parse

    found, plain = None, []
    for url in (u.strip() for u in urls.split(",") if u.strip()):
        parts = urllib.parse.urlsplit(url)
        if parts.username is not None:
            found = found or (urllib.parse.unquote(parts.username) + ":"
                              + urllib.parse.unquote(parts.password or ""))
            url = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
        plain.append(url)
    return ",".join(plain), found
