"""OCI image archives for the local real node — test support, not shipped.

The real node's container runtime (containerd, docs/realnode.md) reaches no
registry, so every image it runs is imported from an OCI image layout archive
(``ctr images import``): a tar of ``oci-layout``, ``index.json`` and
``blobs/sha256/…``. The index names the image with the
``io.containerd.image.name`` annotation, which is what ``ctr`` tags it as.

* :func:`write_files_image` packs a few host files into a one-layer image (the
  sandbox ``pause`` binary; a static busybox for the comparison tests).
* :func:`write_layout_image` re-packs one tag of an OCI layout (what
  ``hack/images/build_image.py`` writes with umoci) under an image name, with
  only that tag's blobs.

Layers are reproducible: sorted entries, mtime 0, owner 0:0.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = [
    "ImageFile",
    "image_config",
    "layout_digest",
    "write_files_image",
    "write_layout_image",
]

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
PLATFORM = {"architecture": "amd64", "os": "linux"}


@dataclass(frozen=True)
class ImageFile:
    """One entry of a layer: a host file copied in, a symlink, or a directory."""

    path: str  # inside the image, without the leading slash
    source: Path | None = None
    link: str | None = None
    mode: int = 0o755

    def tar_info(self) -> tuple[tarfile.TarInfo, bytes | None]:
        info = tarfile.TarInfo(self.path)
        info.mtime, info.uid, info.gid, info.mode = 0, 0, 0, self.mode
        if self.link is not None:
            info.type, info.linkname = tarfile.SYMTYPE, self.link
            return info, None
        if self.source is None:
            info.type = tarfile.DIRTYPE
            return info, None
        data = self.source.read_bytes()
        info.size = len(data)
        return info, data


def layer(files: Iterable[ImageFile]) -> tuple[bytes, str]:
    """A gzip-compressed layer and its diff ID (digest of the uncompressed tar)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(files, key=lambda f: f.path):
            info, data = entry.tar_info()
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    uncompressed = raw.getvalue()
    compressed = gzip.compress(uncompressed, mtime=0)
    return compressed, "sha256:" + hashlib.sha256(uncompressed).hexdigest()


def image_config(
    diff_ids: Sequence[str],
    *,
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    user: str = "",
) -> dict[str, Any]:
    config: dict[str, Any] = {"Entrypoint": list(entrypoint) or None, "Cmd": list(cmd) or None}
    config["Env"] = [f"{k}={v}" for k, v in (env or {"PATH": "/bin"}).items()]
    if user:
        config["User"] = user
    return {**PLATFORM, "config": config, "rootfs": {"type": "layers", "diff_ids": list(diff_ids)}}


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _add(tar: tarfile.TarFile, name: str, data: bytes | IO[bytes], size: int | None = None) -> None:
    info = tarfile.TarInfo(name)
    info.mode, info.mtime = 0o644, 0
    if isinstance(data, bytes):
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        info.size = int(size or 0)
        tar.addfile(info, data)


def _index(name: str, manifest: bytes) -> bytes:
    tag = name.rsplit(":", 1)[-1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    descriptor = {
        "mediaType": MANIFEST_TYPE,
        "digest": _digest(manifest),
        "size": len(manifest),
        "platform": PLATFORM,
        "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag},
    }
    return json.dumps({"schemaVersion": 2, "manifests": [descriptor]}).encode()


def write_files_image(out: IO[bytes], name: str, files: Iterable[ImageFile], **config: Any) -> str:
    """Write an archive of a one-layer image named ``name``; returns the manifest digest.

    ``config`` goes to :func:`image_config` (entrypoint, cmd, env, user).
    """
    blob, diff_id = layer(files)
    config_json = json.dumps(image_config([diff_id], **config), sort_keys=True).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {
                "mediaType": CONFIG_TYPE,
                "digest": _digest(config_json),
                "size": len(config_json),
            },
            "layers": [{"mediaType": LAYER_TYPE, "digest": _digest(blob), "size": len(blob)}],
        }
    ).encode()
    with tarfile.open(fileobj=out, mode="w|") as tar:
        _add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add(tar, "index.json", _index(name, manifest))
        for data in (blob, config_json, manifest):
            _add(tar, "blobs/sha256/" + _digest(data).split(":")[1], data)
    return _digest(manifest)


def _blob_path(layout: Path, digest: str) -> Path:
    algorithm, hex_digest = digest.split(":")
    return layout / "blobs" / algorithm / hex_digest


def layout_digest(layout: Path, tag: str) -> str:
    """The manifest digest of ``tag`` in an OCI layout."""
    index = json.loads((layout / "index.json").read_text())
    found = [
        d
        for d in index["manifests"]
        if d.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag
    ]
    if len(found) != 1:
        raise LookupError(f"{layout}: {len(found)} manifests tagged {tag!r}, expected 1")
    return str(found[0]["digest"])


def write_layout_image(out: IO[bytes], layout: Path, tag: str, name: str) -> str:
    """Write an archive of ``layout:tag`` named ``name`` (its blobs only); returns its digest."""
    manifest_digest = layout_digest(layout, tag)
    manifest_bytes = _blob_path(layout, manifest_digest).read_bytes()
    manifest = json.loads(manifest_bytes)
    digests = [manifest["config"]["digest"], *(entry["digest"] for entry in manifest["layers"])]
    with tarfile.open(fileobj=out, mode="w|") as tar:
        _add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add(tar, "index.json", _index(name, manifest_bytes))
        _add(tar, "blobs/sha256/" + manifest_digest.split(":")[1], manifest_bytes)
        for digest in digests:
            path = _blob_path(layout, digest)
            with path.open("rb") as data:
                _add(tar, "blobs/sha256/" + digest.split(":")[1], data, path.stat().st_size)
    return manifest_digest
