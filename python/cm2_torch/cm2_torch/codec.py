"""Encrypted payloads, the TypeScript codec's format (src/infra/codec.ts), on when CM2_CODEC_KEY is set.

CM2_CODEC_KEY is a key ring: comma-separated entries `[id:]base64`, 32 bytes of key each; the first encrypts, every
one decrypts; an entry without an id gets `k` + the first 12 hex digits of sha256("cm2-codec-key-id\\0" + key). An
encrypted payload is the original Payload's protobuf bytes as iv(12) ‖ ciphertext ‖ tag(16) under AES-256-GCM with the
key id as associated data, metadata `encoding: binary/encrypted`, `encryption-cipher: AES256-GCM`,
`encryption-key-id: <id>`. Payloads without that encoding pass through decoding. Failure messages and stack traces are
encoded as payloads too (the TypeScript side's `encodeCommonAttributes`). AES-GCM from pycryptodome (a dependency of
the pinned minio). Errors name key ids and entry positions, never key material.
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import re
from typing import Iterable, Mapping, Optional, Sequence

import temporalio.converter
from Crypto.Cipher import AES
from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter, PayloadCodec

CODEC_KEY_ENV = "CM2_CODEC_KEY"
ENCRYPTED = b"binary/encrypted"
CIPHER = b"AES256-GCM"
IV, TAG = 12, 16


class CodecKeyError(ValueError):
    def __init__(self, message: str):
        super().__init__(f"{CODEC_KEY_ENV}: {message}")


def derived_key_id(key: bytes) -> str:
    return "k" + hashlib.sha256(b"cm2-codec-key-id\0" + key).hexdigest()[:12]


def parse_key_ring(value: str) -> list[tuple[str, bytes]]:
    entries = [e.strip() for e in value.split(",") if e.strip()]
    if not entries:
        raise CodecKeyError("no key given")
    ring: list[tuple[str, bytes]] = []
    for i, entry in enumerate(entries):
        kid, b64 = (entry.split(":", 1) + [""])[:2] if ":" in entry else (None, entry)
        kid = kid.strip() if kid is not None else None
        b64 = b64.strip()
        where = f"entry {i + 1}" + (f" (id {kid!r})" if kid else "")
        if kid is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", kid):
            raise CodecKeyError(f"{where}: a key id is 1-64 letters, digits, '.', '_' or '-'")
        if not re.fullmatch(r"[A-Za-z0-9+/_-]+={0,2}", b64):
            raise CodecKeyError(f"{where}: the key is not base64")
        key = base64.b64decode(b64.replace("-", "+").replace("_", "/") + "=" * (-len(b64) % 4))
        if len(key) != 32:
            raise CodecKeyError(f"{where}: the key is {len(key)} bytes, AES-256 needs 32 (e.g. `openssl rand -base64 32`)")
        kid = kid or derived_key_id(key)
        if any(r[0] == kid for r in ring):
            raise CodecKeyError(f"{where}: key id {kid} appears twice")
        ring.append((kid, key))
    return ring


class AesGcmCodec(PayloadCodec):
    def __init__(self, ring: Sequence[tuple[str, bytes]]):
        if not ring:
            raise CodecKeyError("no key given")
        self.ring = list(ring)
        self.by_id = dict(ring)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        kid, key = self.ring[0]
        out = []
        for p in payloads:
            iv = os.urandom(IV)
            c = AES.new(key, AES.MODE_GCM, nonce=iv)
            c.update(kid.encode())
            body, tag = c.encrypt_and_digest(p.SerializeToString())
            out.append(Payload(metadata={"encoding": ENCRYPTED, "encryption-cipher": CIPHER, "encryption-key-id": kid.encode()}, data=iv + body + tag))
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for p in payloads:
            if p.metadata.get("encoding") != ENCRYPTED:
                out.append(p)
                continue
            kid = p.metadata.get("encryption-key-id", b"").decode()
            cipher = p.metadata.get("encryption-cipher", b"").decode()
            if cipher != CIPHER.decode():
                raise ValueError(f"encrypted payload with cipher {cipher!r}: this codec reads {CIPHER.decode()}")
            key = self.by_id.get(kid)
            if key is None:
                raise ValueError(f"payload encrypted with key id {kid!r}, which is not in {CODEC_KEY_ENV} (ids: {', '.join(k for k, _ in self.ring)}); add that key to the ring")
            data = bytes(p.data)
            if len(data) < IV + TAG:
                raise ValueError(f"encrypted payload (key id {kid}) is too short: {len(data)} bytes")
            c = AES.new(key, AES.MODE_GCM, nonce=data[:IV])
            c.update(kid.encode())
            try:
                plain = c.decrypt_and_verify(data[IV:-TAG], data[-TAG:])
            except ValueError:
                raise ValueError(f"encrypted payload (key id {kid}) does not authenticate: altered, or encrypted under another key with that id") from None
            out.append(Payload.FromString(plain))
        return out


def data_converter(env: Mapping[str, str] = os.environ) -> Optional[DataConverter]:
    """The converter of the worker's client when CM2_CODEC_KEY is set (None otherwise)."""
    value = env.get(CODEC_KEY_ENV)
    if not value:
        return None
    return dataclasses.replace(temporalio.converter.default(), payload_codec=AesGcmCodec(parse_key_ring(value)),
                               failure_converter_class=temporalio.converter.DefaultFailureConverterWithEncodedAttributes)
