"""The worker's settings: the config file's temporal and s3 sections over the exported TypeScript defaults, the
environment overrides, the train queue (else the gpu queue), credentials from the named variables only."""
import base64
import os
import tempfile
import unittest

from cm2_torch.codec import CodecKeyError, derived_key_id, parse_key_ring
from cm2_torch.config import ConfigError, load_settings

CREDS = {"CM2_S3_ACCESS_KEY": "ak", "CM2_S3_SECRET_KEY": "sk"}


class ConfigTest(unittest.TestCase):
    def setUp(self) -> None:
        self.cwd = tempfile.mkdtemp()

    def test_defaults_are_the_typescript_ones(self) -> None:
        s = load_settings(None, CREDS, self.cwd)
        self.assertEqual((s.temporal_address, s.namespace, s.train_queue, s.s3_endpoint, s.bucket), ("127.0.0.1:7233", "default", "cm2-gpu", "http://127.0.0.1:9000", "cm2"))

    def test_file_then_environment(self) -> None:
        path = os.path.join(self.cwd, "c.yaml")
        with open(path, "w") as f:
            f.write("temporal:\n  address: t:1\n  taskQueues: { gpu: g, train: tr }\ns3: { bucket: b1, accessKeyEnv: MY_AK, secretKeyEnv: MY_SK }\n")
        s = load_settings(path, {"MY_AK": "a", "MY_SK": "b", "CM2_CFG__s3__bucket": "b2", "TEMPORAL_ADDRESS": "t:2"}, self.cwd)
        self.assertEqual((s.temporal_address, s.train_queue, s.bucket, s.access_key, s.secret_key), ("t:2", "tr", "b2", "a", "b"))

    def test_missing_credentials_name_the_variables(self) -> None:
        with self.assertRaisesRegex(ConfigError, "CM2_S3_ACCESS_KEY"):
            load_settings(None, {}, self.cwd)

    def test_tls_from_files_and_the_cli_variables(self) -> None:
        fixtures = os.path.join(os.path.dirname(__file__), "..", "..", "..", "test", "fixtures", "tls")
        ca, crt, key = (os.path.join(fixtures, n) for n in ("ca.pem", "client.pem", "client.key"))
        s = load_settings(None, {**CREDS, "TEMPORAL_TLS_SERVER_CA_CERT_PATH": ca, "TEMPORAL_TLS_CLIENT_CERT_PATH": crt, "TEMPORAL_TLS_CLIENT_KEY_PATH": key,
                                 "TEMPORAL_TLS_SERVER_NAME": "localhost"}, self.cwd)
        with open(ca, "rb") as f:
            self.assertEqual(s.tls_ca, f.read())
        self.assertTrue(s.tls and s.tls_cert and s.tls_key)
        self.assertEqual(s.tls_server_name, "localhost")
        s = load_settings(None, {**CREDS, "TEMPORAL_TLS_CLIENT_CERT_DATA": "C", "TEMPORAL_TLS_CLIENT_KEY_DATA": "K"}, self.cwd)
        self.assertEqual((s.tls, s.tls_cert, s.tls_key, s.tls_ca), (True, b"C", b"K", None))
        self.assertFalse(load_settings(None, {**CREDS, "TEMPORAL_API_KEY": "k", "TEMPORAL_TLS": "false"}, self.cwd).tls)
        self.assertTrue(load_settings(None, {**CREDS, "TEMPORAL_API_KEY": "k"}, self.cwd).tls)
        with self.assertRaisesRegex(ConfigError, "needs its key"):
            load_settings(None, {**CREDS, "TEMPORAL_TLS_CLIENT_CERT_PATH": crt}, self.cwd)
        with self.assertRaisesRegex(ConfigError, "cannot read the CA certificate \\(caFile\\) /nonexistent/ca.pem"):
            load_settings(None, {**CREDS, "TEMPORAL_TLS_CA": "/nonexistent/ca.pem"}, self.cwd)
        with self.assertRaisesRegex(ConfigError, "not https"):
            load_settings(None, {**CREDS, "CM2_S3_CA_FILE": ca}, self.cwd)

    def test_bad_yaml_names_the_file(self) -> None:
        path = os.path.join(self.cwd, "bad.yaml")
        with open(path, "w") as f:
            f.write("temporal: [\n")
        with self.assertRaisesRegex(ConfigError, "bad.yaml"):
            load_settings(path, CREDS, self.cwd)


class KeyRingTest(unittest.TestCase):
    def test_ids_and_errors_as_the_typescript_ring(self) -> None:
        key = bytes(range(32))
        b64 = base64.b64encode(key).decode()
        ring = parse_key_ring(f"new:{b64}, {b64}")
        self.assertEqual([k for k, _ in ring], ["new", derived_key_id(key)])
        # the id the TypeScript ring derives for this key (src/infra/codec.ts derivedKeyId)
        self.assertEqual(derived_key_id(key), "k58fcb779cd0d")
        with self.assertRaisesRegex(CodecKeyError, "entry 1.*32"):
            parse_key_ring(base64.b64encode(b"short").decode())
        with self.assertRaisesRegex(CodecKeyError, "twice"):
            parse_key_ring(f"a:{b64},a:{b64}")


if __name__ == "__main__":
    unittest.main()
