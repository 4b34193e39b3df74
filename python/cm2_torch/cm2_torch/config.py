"""The worker's settings: the `temporal` and `s3` sections of the same cm2 config file the TypeScript workers read
(YAML), over the defaults the TypeScript config gives (contracts.json `defaults`: one definition), with the same
environment overrides (`CM2_CFG__a__b=value`, value parsed as JSON when it parses; TEMPORAL_ADDRESS,
TEMPORAL_NAMESPACE, CM2_S3_ENDPOINT, CM2_S3_BUCKET). Secrets only from the environment: the S3 keys from the variables
the config names (`s3.accessKeyEnv`/`s3.secretKeyEnv`, then AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), a Temporal
Cloud API key from `temporal.apiKeyEnv`. With none set and a local infrastructure started by `cm2 infra up` in the
working directory (.cm2/infra), its addresses and credentials are used, as the TypeScript CLI does.
"""
from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from .contracts import contracts


class ConfigError(ValueError):
    type = "ConfigError"


@dataclass
class Settings:
    temporal_address: str
    namespace: str
    train_queue: str
    api_key: Optional[str]
    tls: bool
    s3_endpoint: str
    s3_region: str
    bucket: str
    access_key: str
    secret_key: str
    session_token: Optional[str]

    def redacted(self) -> dict:
        return {"temporal": self.temporal_address, "namespace": self.namespace, "queue": self.train_queue, "tls": self.tls,
                "s3": self.s3_endpoint, "bucket": self.bucket}


def _set_path(obj: dict, path: list[str], value: Any) -> None:
    for k in path[:-1]:
        nxt = obj.get(k)
        if not isinstance(nxt, dict):
            nxt = obj[k] = {}
        obj = nxt
    obj[path[-1]] = value


def _env_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _merge(base: dict, over: Mapping) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


def _local_infra(cwd: str) -> tuple[dict, dict]:
    """Addresses and credentials of `cm2 infra up` in `cwd` (.cm2/infra), if it was started there."""
    d = os.path.join(cwd, ".cm2", "infra")
    state, creds = {}, {}
    try:
        with open(os.path.join(d, "state.json")) as f:
            state = json.load(f)
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(d, "credentials.env")) as f:
            creds = dict(line.strip().split("=", 1) for line in f if "=" in line)
    except OSError:
        pass
    return state, creds


def load_settings(config_file: Optional[str] = None, env: Mapping[str, str] = os.environ, cwd: Optional[str] = None) -> Settings:
    raw: dict = {}
    if config_file:
        import yaml  # transformers' own dependency

        try:
            with open(config_file) as f:
                raw = yaml.safe_load(f) or {}
        except OSError as e:
            raise ConfigError(f"{config_file}: {e.strerror}") from e
        except yaml.YAMLError as e:
            raise ConfigError(f"{config_file}: not YAML: {e}") from e
        if not isinstance(raw, dict):
            raise ConfigError(f"{config_file}: the top level is not a mapping")
    for name, value in env.items():
        if name.startswith("CM2_CFG__"):
            _set_path(raw, name[len("CM2_CFG__"):].split("__"), _env_value(value))
    state, local_creds = _local_infra(cwd or os.getcwd())
    well_known = [("TEMPORAL_ADDRESS", ["temporal", "address"]), ("TEMPORAL_NAMESPACE", ["temporal", "namespace"]),
                  ("CM2_S3_ENDPOINT", ["s3", "endpoint"]), ("CM2_S3_BUCKET", ["s3", "bucket"])]
    local = {"TEMPORAL_ADDRESS": (state.get("temporal") or {}).get("address"), "CM2_S3_ENDPOINT": (state.get("minio") or {}).get("endpoint")}
    for name, path in well_known:
        value = env.get(name) or local.get(name)
        if value:
            _set_path(raw, path, value)
    d = contracts()["defaults"]
    temporal = _merge(d["temporal"], raw.get("temporal") or {})
    s3 = _merge(d["s3"], raw.get("s3") or {})
    queues = temporal.get("taskQueues") or {}
    queue = queues.get("train") or queues.get("gpu")
    access = env.get(s3["accessKeyEnv"]) or env.get("AWS_ACCESS_KEY_ID") or local_creds.get("CM2_S3_ACCESS_KEY")
    secret = env.get(s3["secretKeyEnv"]) or env.get("AWS_SECRET_ACCESS_KEY") or local_creds.get("CM2_S3_SECRET_KEY")
    if not access or not secret:
        raise ConfigError(f"no S3 credentials: set {s3['accessKeyEnv']} and {s3['secretKeyEnv']} (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
    api_key = env.get(temporal.get("apiKeyEnv") or "TEMPORAL_API_KEY") or None
    tls_cfg = temporal.get("tls") or {}
    tls = bool(tls_cfg.get("enabled", bool(api_key or tls_cfg.get("caFile") or tls_cfg.get("certFile") or tls_cfg.get("serverName"))))
    if tls_cfg.get("caFile") or tls_cfg.get("certFile"):
        raise ConfigError("temporal.tls with certificate files is not supported by the PyTorch worker yet (API key + system roots is)")
    return Settings(temporal_address=temporal["address"], namespace=temporal["namespace"], train_queue=queue, api_key=api_key, tls=tls,
                    s3_endpoint=s3["endpoint"], s3_region=s3["region"], bucket=s3["bucket"], access_key=access, secret_key=secret,
                    session_token=env.get("AWS_SESSION_TOKEN") if not env.get(s3["accessKeyEnv"]) else None)
