"""The object store as the TypeScript side uses it (src/storage/store.ts, checkpoints.ts): one bucket, JSON and files by
key, an object reference `{key, sha256, bytes}` for every checkpoint file, files verified against it on the way down."""
from __future__ import annotations

import hashlib
import io
import json
import os
from typing import Any, Optional
from urllib.parse import urlparse

from minio import Minio
from minio.error import S3Error

from .config import Settings

CHUNK = 8 << 20


class NotFound(KeyError):
    pass


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(CHUNK), b""):
            h.update(b)
    return h.hexdigest()


class Store:
    def __init__(self, s: Settings):
        u = urlparse(s.s3_endpoint)
        self.bucket = s.bucket
        kw = {}
        if s.s3_ca_file:
            import urllib3

            # an https endpoint whose certificate a private CA signed (s3.caFile)
            kw["http_client"] = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=s.s3_ca_file, retries=urllib3.Retry(total=3, backoff_factor=0.2))
        self.client = Minio(u.netloc, access_key=s.access_key, secret_key=s.secret_key, session_token=s.session_token,
                            secure=u.scheme == "https", region=s.s3_region, **kw)

    def exists(self, key: str) -> bool:
        try:
            self.client.stat_object(self.bucket, key)
            return True
        except S3Error as e:
            if e.code in ("NoSuchKey", "NoSuchObject", "NotFound"):
                return False
            raise

    def list(self, prefix: str) -> list[str]:
        """Every key under `prefix`."""
        return [o.object_name for o in self.client.list_objects(self.bucket, prefix=prefix, recursive=True)]

    def get_bytes(self, key: str) -> bytes:
        try:
            r = self.client.get_object(self.bucket, key)
        except S3Error as e:
            if e.code in ("NoSuchKey", "NoSuchObject", "NotFound"):
                raise NotFound(key) from e
            raise
        try:
            return r.read()
        finally:
            r.close()
            r.release_conn()

    def get_json(self, key: str) -> Any:
        return json.loads(self.get_bytes(key))

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream", if_absent: bool = False) -> dict:
        """Writes `data` at `key`; with `if_absent`, only when no object is there (S3's conditional write,
        If-None-Match: *): returns None when one was."""
        try:
            if if_absent:
                # put_object would send any extra header as user metadata (x-amz-meta-…): the plain PutObject call of
                # the pinned minio (7.2.20) sends it as the header it is
                self.client._put_object(self.bucket, key, data, {"Content-Type": content_type, "If-None-Match": "*"})
            else:
                self.client.put_object(self.bucket, key, io.BytesIO(data), len(data), content_type=content_type)
        except S3Error as e:
            if if_absent and e.code in ("PreconditionFailed", "ConditionalRequestConflict"):
                return None
            raise
        return {"key": key, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}

    def put_json(self, key: str, value: Any, if_absent: bool = False) -> Optional[dict]:
        return self.put_bytes(key, json.dumps(value).encode(), "application/json", if_absent)

    def put_file(self, key: str, path: str, sha256: Optional[str] = None) -> dict:
        self.client.fput_object(self.bucket, key, path, part_size=64 << 20)
        return {"key": key, "sha256": sha256 or sha256_file(path), "bytes": os.path.getsize(path)}

    def get_file(self, key: str, path: str) -> None:
        try:
            self.client.fget_object(self.bucket, key, path)
        except S3Error as e:
            if e.code in ("NoSuchKey", "NoSuchObject", "NotFound"):
                raise NotFound(key) from e
            raise

    def get_verified_file(self, ref: dict, path: str) -> None:
        self.get_file(ref["key"], path)
        size, digest = os.path.getsize(path), sha256_file(path)
        if size != ref["bytes"] or digest != ref["sha256"]:
            raise IOError(f"s3 {ref['key']}: {size} bytes, sha256 {digest[:12]}…, but the manifest says {ref['bytes']} bytes, {ref['sha256'][:12]}…")
