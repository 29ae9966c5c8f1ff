"""``kubectl gpuaccept release NODE``: the request, and what it says about who asks.

Pure: the requester's username from a SelfSubjectReview's answer, the annotations
that make the request (who, when, why), and whether a NodeAcceptance's status shows
it applied. The operator applies it (``gpuaccept.operator.core.phases.released``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gpuaccept.contracts.api import (
    RELEASE_AT_ANNOTATION,
    RELEASE_BY_ANNOTATION,
    RELEASE_REASON_ANNOTATION,
)

# authentication.k8s.io/v1 since Kubernetes 1.28 (v1beta1 in 1.27): who the API
# server says the caller is, whatever the kubeconfig calls them.
SELF_SUBJECT_REVIEW_PATHS = (
    "/apis/authentication.k8s.io/v1/selfsubjectreviews",
    "/apis/authentication.k8s.io/v1beta1/selfsubjectreviews",
)
MAX_REASON = 512


def self_subject_review(version: str) -> dict[str, Any]:
    return {"apiVersion": f"authentication.k8s.io/{version}", "kind": "SelfSubjectReview"}


def username_of(review: Mapping[str, Any]) -> str | None:
    """The username a SelfSubjectReview's answer names (None: none)."""
    user = (review.get("status") or {}).get("userInfo") or {}
    name = user.get("username") if isinstance(user, Mapping) else None
    return str(name) if name else None


def request_annotations(by: str, at: datetime, reason: str) -> dict[str, str | None]:
    """The NodeAcceptance annotations of a release asked for by ``by`` at ``at``
    (a merge patch: an earlier request's reason is removed when none is given)."""
    return {
        RELEASE_BY_ANNOTATION: by,
        RELEASE_AT_ANNOTATION: at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        RELEASE_REASON_ANNOTATION: reason[:MAX_REASON] or None,
    }


def applied(acceptance: Mapping[str, Any], annotations: Mapping[str, str | None]) -> bool:
    """The operator has applied the request ``annotations`` make (``status.release``)."""
    record = (acceptance.get("status") or {}).get("release") or {}
    return (record.get("by"), record.get("requestedAt")) == (
        annotations[RELEASE_BY_ANNOTATION],
        annotations[RELEASE_AT_ANNOTATION],
    )
