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
    s3_ca_file: Optional[str] = None  # PEM of the CA that signed an https endpoint's certificate (s3.caFile)
    # PEM data (from the files temporal.tls names, or the `temporal` CLI's *_DATA variables) and the name to verify
    tls_ca: Optional[bytes] = None
    tls_cert: Optional[bytes] = None
    tls_key: Optional[bytes] = None
    tls_server_name: Optional[str] = None

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


def _pem(env: Mapping[str, str], data_vars: tuple, path: Optional[str], what: str) -> Optional[bytes]:
    """PEM inline from the first set variable of `data_vars` (the `temporal` CLI's *_DATA forms), else from a file."""
    for v in data_vars:
        if env.get(v):
            return env[v].encode()
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"temporal.tls: cannot read the {what} {path}: {e.strerror}") from e


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
    # the TypeScript side's well-known variables (src/run/config.ts): the `temporal` CLI's names and the older short ones
    well_known = [("TEMPORAL_ADDRESS", ["temporal", "address"]), ("TEMPORAL_NAMESPACE", ["temporal", "namespace"]),
                  ("TEMPORAL_TLS_CA", ["temporal", "tls", "caFile"]), ("TEMPORAL_TLS_SERVER_CA_CERT_PATH", ["temporal", "tls", "caFile"]),
                  ("TEMPORAL_TLS_CERT", ["temporal", "tls", "certFile"]), ("TEMPORAL_TLS_CLIENT_CERT_PATH", ["temporal", "tls", "certFile"]),
                  ("TEMPORAL_TLS_KEY", ["temporal", "tls", "keyFile"]), ("TEMPORAL_TLS_CLIENT_KEY_PATH", ["temporal", "tls", "keyFile"]),
                  ("TEMPORAL_TLS_SERVER_NAME", ["temporal", "tls", "serverName"]),
                  ("CM2_S3_ENDPOINT", ["s3", "endpoint"]), ("CM2_S3_BUCKET", ["s3", "bucket"]), ("CM2_S3_CA_FILE", ["s3", "caFile"])]
    local = {"TEMPORAL_ADDRESS": (state.get("temporal") or {}).get("address"), "CM2_S3_ENDPOINT": (state.get("minio") or {}).get("endpoint")}
    for name, path in well_known:
        value = env.get(name) or local.get(name)
        if value:
            _set_path(raw, path, value)
    tls_env = (env.get("TEMPORAL_TLS") or "").strip().lower()
    if tls_env:
        _set_path(raw, ["temporal", "tls", "enabled"], tls_env not in ("0", "false", "no", "off"))
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
    ca = _pem(env, ("TEMPORAL_TLS_SERVER_CA_CERT_DATA", "TEMPORAL_TLS_CA_DATA"), tls_cfg.get("caFile"), "CA certificate (caFile)")
    crt = _pem(env, ("TEMPORAL_TLS_CLIENT_CERT_DATA", "TEMPORAL_TLS_CERT_DATA"), tls_cfg.get("certFile"), "client certificate (certFile)")
    key = _pem(env, ("TEMPORAL_TLS_CLIENT_KEY_DATA", "TEMPORAL_TLS_KEY_DATA"), tls_cfg.get("keyFile"), "client key (keyFile)")
    if (env.get("TEMPORAL_TLS_DISABLE_HOST_VERIFICATION") or "").lower() in ("1", "true"):
        raise ConfigError("TEMPORAL_TLS_DISABLE_HOST_VERIFICATION is not supported: set the name the server certificate is for (temporal.tls.serverName, TEMPORAL_TLS_SERVER_NAME) instead")
    if (crt is None) != (key is None):
        raise ConfigError("temporal.tls: a client certificate needs its key and a key its certificate (certFile and keyFile, or TEMPORAL_TLS_CERT / TEMPORAL_TLS_KEY)")
    tls = bool(tls_cfg["enabled"]) if tls_cfg.get("enabled") is not None else bool(api_key or ca or crt or tls_cfg.get("serverName"))
    s3_ca = s3.get("caFile") or (env.get("AWS_CA_BUNDLE") if str(s3["endpoint"]).startswith("https:") else None)
    if s3_ca and not str(s3["endpoint"]).startswith("https:"):
        raise ConfigError(f"s3.caFile is set but the endpoint {s3['endpoint']} is not https://")
    if s3_ca and not os.path.isfile(s3_ca):
        raise ConfigError(f"s3.caFile: cannot read {s3_ca}")
    return Settings(temporal_address=temporal["address"], namespace=temporal["namespace"], train_queue=queue, api_key=api_key, tls=tls,
                    tls_ca=ca, tls_cert=crt, tls_key=key, tls_server_name=tls_cfg.get("serverName"), s3_ca_file=s3_ca,
                    s3_endpoint=s3["endpoint"], s3_region=s3["region"], bucket=s3["bucket"], access_key=access, secret_key=secret,
                    session_token=env.get("AWS_SESSION_TOKEN") if not env.get(s3["accessKeyEnv"]) else None)
