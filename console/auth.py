"""Who a request is from when an OIDC proxy (oauth2-proxy) fronts the console: the moderator a
verified ID token names, or nobody.

The proxy passes the moderator's OIDC ID token on every request it forwards (`Authorization:
Bearer <jwt>`, oauth2-proxy's `--pass-authorization-header`). The console takes no header's word
for who is asking: it checks the token's signature against a key pinned in its own settings (a
PEM public key, or the identity provider's JWKS saved to a file: no network fetch on a request's
path, and never a key the token itself points at), then its issuer, audience, expiry and
not-before (with a small leeway for clock skew), and takes the moderator's id from one claim. A
token that fails any check names nobody (`TokenRefused`, its reason for the log only).

Asymmetric algorithms only: a verifier holding a public key must never accept an HMAC keyed with
that public key (PyJWT refuses it as well; here it is a setting error at start).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jwt
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from moderator.errors import ConfigError, ModeratorError

if TYPE_CHECKING:
    from console.config import ConsoleSettings

ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
              "EdDSA")  # fmt: skip
REQUIRED_CLAIMS = ("exp", "iss", "aud")  # a token without an expiry would be good forever
BEARER = "bearer "


class TokenRefused(ModeratorError):
    """A token that names nobody; the message says why (logged, never shown to the client)."""


@dataclass(frozen=True)
class TokenVerifier:
    """Checks one proxy's ID tokens; `keys` by key id (`None`: the one key of a PEM file, or of
    a JWKS holding a single key, used whatever the token's `kid`)."""

    keys: Mapping[str | None, Any]
    issuer: str
    audience: str
    algorithms: tuple[str, ...]
    claim: str
    header: str = "Authorization"
    leeway_s: float = 30.0

    def token(self, headers: Mapping[str, str]) -> str | None:
        """The token the proxy passed, or None when the request carries none."""
        value = headers.get(self.header, "").strip()
        if self.header.lower() == "authorization":
            if value[: len(BEARER)].lower() != BEARER:
                return None
            value = value[len(BEARER) :].strip()
        return value or None

    def moderator(self, token: str) -> str:
        """The moderator id the token names, once every check has passed."""
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.InvalidTokenError as exc:
            raise TokenRefused(f"not a JWT: {exc}") from None
        key = self.keys.get(None) if None in self.keys else self.keys.get(kid)
        if key is None:
            raise TokenRefused(f"signed with a key not pinned here (kid {kid!r})")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=list(self.algorithms),
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": list(REQUIRED_CLAIMS)},
            )
        except jwt.InvalidTokenError as exc:
            raise TokenRefused(f"{type(exc).__name__}: {exc}") from None
        who = claims.get(self.claim)
        if not isinstance(who, str) or not who.strip():
            raise TokenRefused(f"no {self.claim!r} claim")
        if self.claim == "email" and claims.get("email_verified") is False:
            raise TokenRefused("the identity provider has not verified this email")
        return who.strip()


def verifier_from(settings: ConsoleSettings) -> TokenVerifier | None:
    """The verifier the `oidc_*` settings describe, None when they are all unset; ConfigError
    (naming the setting) when they are only partly set or the key file is not a public key."""
    from console.config import env_name

    needed = ("oidc_issuer", "oidc_audience", "oidc_key_file")
    missing = [env_name(name) for name in needed if not getattr(settings, name)]
    if len(missing) == len(needed):
        return None
    if missing:
        raise ConfigError(f"{', '.join(missing)}: needed too, to verify the proxy's ID tokens")
    algorithms = tuple(filter(None, (a.strip() for a in settings.oidc_algorithms.split(","))))
    loose = ", ".join(a for a in algorithms if a not in ASYMMETRIC)
    if not algorithms or loose:
        raise ConfigError(f"{env_name('oidc_algorithms')}: asymmetric algorithms only (not "
                          f"{loose or 'none'}), of {', '.join(ASYMMETRIC)}")  # fmt: skip
    for name in ("oidc_claim", "oidc_header"):
        if not getattr(settings, name).strip():
            raise ConfigError(f"{env_name(name)}: may not be empty")
    if not 0 <= settings.oidc_leeway_s <= 300:
        raise ConfigError(f"{env_name('oidc_leeway_s')}: 0 to 300 seconds of clock skew")
    return TokenVerifier(
        keys=pinned_keys(Path(settings.oidc_key_file)),
        issuer=settings.oidc_issuer,
        audience=settings.oidc_audience,
        algorithms=algorithms,
        claim=settings.oidc_claim.strip(),
        header=settings.oidc_header.strip(),
        leeway_s=settings.oidc_leeway_s,
    )


def pinned_keys(path: Path) -> dict[str | None, Any]:
    """The public keys of a PEM file (one key) or a JWKS file (`{"keys": [...]}`, by `kid`)."""
    setting = "MODERATOR_CONSOLE_OIDC_KEY_FILE"
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{setting}: {path}: {exc.strerror}") from None
    if raw.lstrip().startswith(b"{"):
        try:
            jwks = jwt.PyJWKSet.from_dict(json.loads(raw))
        except (ValueError, jwt.PyJWKError, jwt.PyJWKSetError) as exc:
            raise ConfigError(f"{setting}: {path} is not a usable JWKS: {exc}") from None
        public = [k for k in jwks.keys if k.key_type != "oct"]  # never an HMAC secret
        signing = [k for k in public if k.public_key_use in (None, "sig")]
        if not signing:
            raise ConfigError(f"{setting}: {path} holds no public signing key")
        if any(k.key_id is None for k in signing) and len(signing) > 1:
            raise ConfigError(f"{setting}: {path}: several keys, so each needs a `kid`")
        if len(signing) == 1:
            return {None: signing[0].key}
        return {k.key_id: k.key for k in signing}
    try:
        key = load_pem_public_key(raw)
    except ValueError as exc:
        raise ConfigError(f"{setting}: {path} is neither a JWKS nor a PEM public key: "
                          f"{exc}") from None  # fmt: skip
    return {None: key}
