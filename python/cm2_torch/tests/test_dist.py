"""Rank invariance: the golden GRPO update, SFT step and LoRA update with the policy sharded by FSDP2 over 2 ranks of a torchrun launch (gloo,
CPU; micro-batches split between the ranks, gradients summed) equals the fixture, as one process does
(cm2_torch/dist_check.py)."""
import json
import os
import subprocess
import sys
import unittest

PKG = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


class RankInvarianceTest(unittest.TestCase):
    def test_two_ranks_give_the_single_process_update(self) -> None:
        env = {**os.environ, "PYTHONPATH": PKG, "OMP_NUM_THREADS": "1"}
        r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "cm2_torch.dist_check"],
                           cwd=PKG, env=env, capture_output=True, text=True, timeout=600)
        out = r.stdout + r.stderr
        self.assertEqual(r.returncode, 0, out[-4000:])
        rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        self.assertEqual(sorted(x["case"] for x in rows), ["lora:tiny-llama-tied", "lora:tiny-qwen3", "sft:tiny-llama-tied", "sft:tiny-qwen3", "tiny-llama-tied", "tiny-qwen3"], out[-2000:])
        for x in rows:
            self.assertEqual(x["world"], 2)
            self.assertEqual(x["failed"], 0, x)


if __name__ == "__main__":
    unittest.main()
