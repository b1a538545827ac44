"""A throw-away identity provider for the console's proxy mode: a signing key made in the test,
its public half written where the console's settings pin it, and ID tokens as an OIDC provider
issues them (and as oauth2-proxy passes them on: `Authorization: Bearer <jwt>`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

ISSUER = "https://idp.example.com/realms/moderation"
AUDIENCE = "moderator-console"


@dataclass
class Provider:
    """One identity provider's key (`rsa`: RS256, else an EC P-256 key for ES256)."""

    rsa: bool = True
    kid: str = "key-1"
    issuer: str = ISSUER
    key: Any = field(init=False)

    def __post_init__(self) -> None:
        self.key = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            if self.rsa
            else ec.generate_private_key(ec.SECP256R1())
        )

    @property
    def algorithm(self) -> str:
        return "RS256" if self.rsa else "ES256"

    def pem(self, path: Path) -> Path:
        path.write_bytes(
            self.key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return path

    def jwk(self) -> dict[str, Any]:
        algorithm = RSAAlgorithm if self.rsa else ECAlgorithm
        public: dict[str, Any] = algorithm.to_jwk(self.key.public_key(), as_dict=True)
        return {**public, "kid": self.kid, "use": "sig", "alg": self.algorithm}

    def token(self, email: str = "carol@example.com", **claims: Any) -> str:
        """An ID token for `email`, valid for five minutes unless `claims` say otherwise."""
        now = int(time.time())
        body = {"iss": self.issuer, "aud": AUDIENCE, "sub": f"sub-{email}", "email": email,
                "email_verified": True, "iat": now, "exp": now + 300, **claims}  # fmt: skip
        return jwt.encode(body, self.key, algorithm=self.algorithm, headers={"kid": self.kid})


def jwks(path: Path, *providers: Provider) -> Path:
    """The providers' public keys as one JWKS file."""
    path.write_text(json.dumps({"keys": [p.jwk() for p in providers]}))
    return path


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
