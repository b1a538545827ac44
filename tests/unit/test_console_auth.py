"""The proxy mode's token check (console/auth.py) on its own: which ID tokens name a moderator,
which name nobody, and which settings refuse to start. Keys are made in the test (tests/oidc.py)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest

from console.auth import TokenRefused, TokenVerifier, verifier_from
from console.config import ConsoleSettings
from moderator.errors import ConfigError
from tests.oidc import AUDIENCE, ISSUER, Provider, jwks


@pytest.fixture(scope="module")
def idp() -> Provider:
    return Provider()


def verifier(key_file: Path, **settings: Any) -> TokenVerifier:
    made = verifier_from(ConsoleSettings(oidc_issuer=ISSUER, oidc_audience=AUDIENCE,
                                         oidc_key_file=str(key_file), **settings))  # fmt: skip
    assert made is not None
    return made


def refused(check: TokenVerifier, token: str) -> str:
    with pytest.raises(TokenRefused) as caught:
        check.moderator(token)
    return str(caught.value)


def test_a_token_signed_by_the_pinned_key_names_the_moderator_of_its_claim(
    idp: Provider, tmp_path: Path
) -> None:
    check = verifier(idp.pem(tmp_path / "idp.pem"))
    assert check.moderator(idp.token("carol@example.com")) == "carol@example.com"
    by_subject = verifier(tmp_path / "idp.pem", oidc_claim="sub")
    assert by_subject.moderator(idp.token("carol@example.com")) == "sub-carol@example.com"


def test_a_token_signed_by_another_key_is_refused_even_under_the_pinned_kid(
    idp: Provider, tmp_path: Path
) -> None:
    check = verifier(idp.pem(tmp_path / "idp.pem"))
    mallory = Provider(kid=idp.kid)  # same issuer, audience and key id: only the key differs
    assert "InvalidSignatureError" in refused(check, mallory.token("alice@example.com"))
    good = idp.token("carol@example.com")
    head, body, signature = good.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=="))
    forged_body = base64.urlsafe_b64encode(
        json.dumps({**claims, "email": "alice@example.com"}).encode()
    )
    forged = f"{head}.{forged_body.decode().rstrip('=')}.{signature}"  # claims changed after
    assert "InvalidSignatureError" in refused(check, forged)


def test_expired_not_yet_valid_and_expiry_free_tokens_are_refused(
    idp: Provider, tmp_path: Path
) -> None:
    check = verifier(idp.pem(tmp_path / "idp.pem"), oidc_leeway_s=30)
    now = int(time.time())
    assert "ExpiredSignatureError" in refused(check, idp.token(exp=now - 120))
    assert "ImmatureSignatureError" in refused(check, idp.token(nbf=now + 120))
    no_expiry = jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "email": "carol@example.com"},
                           idp.key, algorithm="RS256")  # fmt: skip
    assert "exp" in refused(check, no_expiry)
    # Within the leeway, a clock a few seconds behind the provider's still agrees.
    assert check.moderator(idp.token(exp=now - 5)) == "carol@example.com"


def test_a_token_for_another_issuer_or_audience_is_refused(idp: Provider, tmp_path: Path) -> None:
    check = verifier(idp.pem(tmp_path / "idp.pem"))
    assert "InvalidIssuerError" in refused(check, idp.token(iss="https://evil.example"))
    assert "InvalidAudienceError" in refused(check, idp.token(aud="another-app"))


def test_unsigned_and_hmac_tokens_are_refused_even_keyed_with_the_public_key(
    idp: Provider, tmp_path: Path
) -> None:
    """The algorithm confusion attack: HS256 with the (public) PEM as the secret."""
    pem = idp.pem(tmp_path / "idp.pem")
    check = verifier(pem)
    claims = {"iss": ISSUER, "aud": AUDIENCE, "email": "alice@example.com",
              "exp": int(time.time()) + 300}  # fmt: skip
    assert "InvalidAlgorithmError" in refused(check, jwt.encode(claims, "", algorithm="none"))

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    signed = f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(claims)}"
    mac = hmac.new(pem.read_bytes(), signed.encode(), hashlib.sha256).digest()
    confused = f"{signed}.{base64.urlsafe_b64encode(mac).decode().rstrip('=')}"
    assert "InvalidAlgorithmError" in refused(check, confused)
    assert "not a JWT" in refused(check, "mallory@evil")


def test_a_jwks_picks_the_key_by_kid_and_refuses_a_kid_it_does_not_pin(tmp_path: Path) -> None:
    rsa_key, ec_key = Provider(kid="rsa-1"), Provider(rsa=False, kid="ec-1")
    check = verifier(jwks(tmp_path / "jwks.json", rsa_key, ec_key),
                     oidc_algorithms="RS256,ES256")  # fmt: skip
    assert check.moderator(rsa_key.token("a@example.com")) == "a@example.com"
    assert check.moderator(ec_key.token("b@example.com")) == "b@example.com"
    stranger = Provider(kid="rsa-2")
    assert "not pinned" in refused(check, stranger.token())


def test_a_token_without_the_claim_or_with_an_unverified_email_names_nobody(
    idp: Provider, tmp_path: Path
) -> None:
    check = verifier(idp.pem(tmp_path / "idp.pem"))
    assert "no 'email' claim" in refused(check, idp.token(email=""))
    assert "not verified" in refused(check, idp.token(email_verified=False))


def test_the_token_is_read_from_the_bearer_header_or_the_configured_one(
    idp: Provider, tmp_path: Path
) -> None:
    check = verifier(idp.pem(tmp_path / "idp.pem"))
    assert check.token({"Authorization": "Bearer abc.def.ghi"}) == "abc.def.ghi"
    assert check.token({"Authorization": "bearer  abc.def.ghi "}) == "abc.def.ghi"
    assert check.token({"Authorization": "Basic YWxpY2U6cHc="}) is None
    assert check.token({}) is None
    raw = verifier(tmp_path / "idp.pem", oidc_header="X-Forwarded-Access-Token")
    assert raw.token({"X-Forwarded-Access-Token": "abc.def.ghi"}) == "abc.def.ghi"


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        ({"oidc_audience": None}, "MODERATOR_CONSOLE_OIDC_AUDIENCE"),
        ({"oidc_issuer": None, "oidc_key_file": None}, "MODERATOR_CONSOLE_OIDC_ISSUER"),
        ({"oidc_key_file": "/nonexistent/jwks.json"}, "MODERATOR_CONSOLE_OIDC_KEY_FILE"),
        ({"oidc_algorithms": "RS256,HS256"}, "MODERATOR_CONSOLE_OIDC_ALGORITHMS"),
        ({"oidc_algorithms": ""}, "MODERATOR_CONSOLE_OIDC_ALGORITHMS"),
        ({"oidc_claim": " "}, "MODERATOR_CONSOLE_OIDC_CLAIM"),
        ({"oidc_leeway_s": 3600.0}, "MODERATOR_CONSOLE_OIDC_LEEWAY_S"),
    ],
)
def test_a_half_made_or_unsafe_proxy_set_up_refuses_to_start_naming_the_setting(
    idp: Provider, tmp_path: Path, changed: dict[str, Any], named: str
) -> None:
    full = {
        "oidc_issuer": ISSUER,
        "oidc_audience": AUDIENCE,
        "oidc_key_file": str(idp.pem(tmp_path / "idp.pem")),
        "tokens": "alice:alice-token-1",
    }
    settings = {k: v for k, v in {**full, **changed}.items() if v is not None}  # None: unset
    with pytest.raises(ConfigError, match=named):
        ConsoleSettings(**settings).check()


def test_a_key_file_that_is_no_public_key_refuses_to_start(idp: Provider, tmp_path: Path) -> None:
    garbage, secret_only = tmp_path / "garbage.pem", tmp_path / "oct.json"
    garbage.write_text("-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n")
    secret_only.write_text(json.dumps({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}]}))
    for path in (garbage, secret_only):
        with pytest.raises(ConfigError, match="MODERATOR_CONSOLE_OIDC_KEY_FILE"):
            verifier(path)


def test_a_bare_identity_header_setting_is_refused_not_ignored() -> None:
    with pytest.raises(ConfigError, match=r"IDENTITY_HEADER .* not authentication"):
        ConsoleSettings.from_env({"MODERATOR_CONSOLE_IDENTITY_HEADER": "X-Forwarded-Email",
                                  "MODERATOR_CONSOLE_TOKENS": "alice:alice-token-1"})  # fmt: skip


def test_token_logins_alone_or_the_proxy_mode_alone_may_start(
    idp: Provider, tmp_path: Path
) -> None:
    ConsoleSettings(tokens="alice:alice-token-1").check()
    ConsoleSettings(oidc_issuer=ISSUER, oidc_audience=AUDIENCE,
                    oidc_key_file=str(idp.pem(tmp_path / "idp.pem"))).check()  # fmt: skip
    with pytest.raises(ConfigError, match="no way to log in"):
        ConsoleSettings().check()
