"""A legacy ServiceAccount token, as kube-controller-manager's tokens controller
writes it into a ``kubernetes.io/service-account-token`` Secret — test support, not
shipped.

The local control plane runs no controller-manager, so nothing fills such a Secret
in. This module signs the token the tokens controller would (kube-controller-manager
1.37: ``pkg/serviceaccount/legacy.go`` ``LegacyClaims``, issuer
``kubernetes/serviceaccount``) with the control plane's ServiceAccount signing key
(``pki/sa.key``, ECDSA P-256, so ES256), using the ``openssl`` command line for the
signature. The API server's legacy authenticator then accepts it while the Secret
holds it (``legacyValidator.Validate``: the Secret, its token and the
ServiceAccount's UID are looked up).
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

__all__ = ["LEGACY_ISSUER", "sign_legacy_token"]

LEGACY_ISSUER = "kubernetes/serviceaccount"
_P256_BYTES = 32


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _der_int(der: bytes, at: int) -> tuple[int, int]:
    """The INTEGER at ``der[at]`` and the offset after it."""
    if der[at] != 0x02:  # ASN.1 INTEGER
        raise ValueError("not a DER INTEGER")
    length = der[at + 1]
    start = at + 2
    return int.from_bytes(der[start : start + length], "big"), start + length


def _jose_signature(der: bytes) -> bytes:
    """openssl's DER ECDSA-Sig-Value (SEQUENCE of r, s) as JOSE's r || s."""
    if der[0] != 0x30:  # ASN.1 SEQUENCE
        raise ValueError("not a DER SEQUENCE")
    at = 3 if der[1] & 0x80 else 2
    r, at = _der_int(der, at)
    s, _ = _der_int(der, at)
    return r.to_bytes(_P256_BYTES, "big") + s.to_bytes(_P256_BYTES, "big")


def sign_legacy_token(
    signing_key: Path, *, namespace: str, service_account: str, uid: str, secret: str
) -> str:
    """The legacy token of ServiceAccount ``namespace/service_account`` (``uid``) held
    in Secret ``secret``, signed with ``signing_key`` (PEM, ECDSA P-256)."""
    header = {"alg": "ES256"}
    claims = {
        "iss": LEGACY_ISSUER,
        "sub": f"system:serviceaccount:{namespace}:{service_account}",
        "kubernetes.io/serviceaccount/namespace": namespace,
        "kubernetes.io/serviceaccount/secret.name": secret,
        "kubernetes.io/serviceaccount/service-account.name": service_account,
        "kubernetes.io/serviceaccount/service-account.uid": uid,
    }
    signing_input = ".".join(
        _b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
    )
    der = subprocess.run(
        ["openssl", "dgst", "-sha256", "-sign", str(signing_key)],
        input=signing_input.encode(),
        capture_output=True,
        check=True,
    ).stdout
    return f"{signing_input}.{_b64url(_jose_signature(der))}"
