"""The PyTorch GRPO update against the golden fixture the TypeScript trainer is checked against too
(test/fixtures/grpo-golden, scripts/make-grpo-golden.ts; test/unit/stages/rl/grpoGolden.test.ts): per-token
log-probabilities of the three policies at the temperature, the update's metrics, the pre-clip gradient, the weights and
AdamW moments after the update with the clip off and on (cm2_torch/golden.py); the same for one SFT step, and for the
update training LoRA adapters through PEFT (from the adapter the tfjs trainer trained, in PEFT's format). Models: transformers' own Qwen3 (untied
head, QK-norm) and Llama (tied head), built from the configs transformers wrote (test/fixtures/hf-tiny-*).

    python -m unittest discover -s python/cm2_torch/tests -t python/cm2_torch
"""
import unittest

from cm2_torch.golden import check_case, check_lora_case, check_sft_case


class GoldenTest(unittest.TestCase):
    def check(self, name: str, sft: bool = False, lora: bool = False) -> None:
        devs = check_sft_case(name) if sft else check_lora_case(name) if lora else check_case(name)
        self.assertGreater(len(devs), 10)
        for d in devs:
            self.assertLessEqual(d.ratio, 1.0, f"{d.what}: value {d.index} is {d.actual}, expected {d.expected}")

    def test_qwen3(self) -> None:
        self.check("tiny-qwen3")

    def test_llama_tied(self) -> None:
        self.check("tiny-llama-tied")

    def test_sft_qwen3(self) -> None:
        self.check("tiny-qwen3", sft=True)

    def test_sft_llama_tied(self) -> None:
        self.check("tiny-llama-tied", sft=True)

    def test_lora_qwen3(self) -> None:
        self.check("tiny-qwen3", lora=True)

    def test_lora_llama_tied(self) -> None:
        self.check("tiny-llama-tied", lora=True)


if __name__ == "__main__":
    unittest.main()
