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
