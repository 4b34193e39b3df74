"""The PyTorch GRPO update against the golden fixture the TypeScript trainer is checked against too
(test/fixtures/grpo-golden, scripts/make-grpo-golden.ts; test/unit/stages/rl/grpoGolden.test.ts): per-token
log-probabilities of the three policies at the temperature, the update's metrics, the pre-clip gradient, the weights and
AdamW moments after the update with the clip off and on. Models: transformers' own Qwen3 (untied head, QK-norm) and
Llama (tied head), built from the configs transformers wrote (test/fixtures/hf-tiny-*).

    python -m unittest discover -s python/cm2_torch/tests -t python/cm2_torch
"""
import json
import os
import unittest

import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

from cm2_torch.grpo import GrpoSequence, GrpoStepConfig, adamw, collate, grpo_step, token_logprobs

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
GOLDEN = os.path.join(ROOT, "test", "fixtures", "grpo-golden")


def load_model(config_dir: str, weights: str) -> torch.nn.Module:
    config = AutoConfig.from_pretrained(config_dir)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
    state = load_file(weights)
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    assert not unexpected, unexpected
    assert set(missing) <= ({"lm_head.weight"} if tied else set()), missing
    if tied:
        model.tie_weights()
    return model


def assert_close(test: unittest.TestCase, actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float, what: str) -> None:
    a, e = actual.detach().double().flatten(), expected.double().flatten()
    test.assertEqual(a.numel(), e.numel(), f"{what}: size")
    r = (a - e).abs() / (atol + rtol * e.abs())
    i = int(torch.argmax(r))
    test.assertLessEqual(float(r[i]), 1.0, f"{what}: value {i} is {float(a[i])}, expected {float(e[i])} (atol {atol}, rtol {rtol})")


class GoldenTest(unittest.TestCase):
    def check(self, name: str) -> None:
        torch.manual_seed(0)
        d = os.path.join(GOLDEN, name)
        with open(os.path.join(d, "case.json")) as f:
            case = json.load(f)
        config_dir = os.path.join(ROOT, "test", "fixtures", case["model"])
        expected = load_file(os.path.join(d, "expected.safetensors"))
        batch = [GrpoSequence.from_json(s) for s in case["batch"]]
        st = case["step"]
        cfg = lambda max_norm: GrpoStepConfig(
            lr=st["lr"], max_grad_norm=max_norm, micro_batch=st["microBatch"], pad_id=st["padId"], clip_low=st["clipLow"], clip_high=st["clipHigh"],
            clip_ratio_c=st["clipRatioC"], kl_coef=st["klCoef"], temperature=st["temperature"])
        behaviour = load_model(config_dir, os.path.join(d, "behaviour.safetensors")).eval()
        reference = load_model(config_dir, os.path.join(d, "reference.safetensors")).eval()
        rows = collate(batch, st["padId"])
        for label, weights in [("policy", "policy.safetensors"), ("behaviour", "behaviour.safetensors"), ("reference", "reference.safetensors")]:
            m = load_model(config_dir, os.path.join(d, weights)).eval()
            with torch.no_grad():
                lp = token_logprobs(m, rows.ids, rows.targets, st["temperature"])
            assert_close(self, lp, expected[f"logp.{label}"], 2e-5, 2e-5, f"logp.{label}")
        for case_name, max_norm in case["cases"].items():
            policy = load_model(config_dir, os.path.join(d, "policy.safetensors")).train()
            named = dict(policy.named_parameters())
            opt = adamw(list(named.values()), st["weightDecay"])
            r = grpo_step(policy, reference, opt, batch, cfg(max_norm), behaviour=behaviour)
            want = case["metrics"][case_name]
            got = {"loss": r.loss, "pgLoss": r.pg_loss, "kl": r.kl, "clipFrac": r.clip_frac, "gradNorm": r.grad_norm}
            for k, v in got.items():
                assert_close(self, torch.tensor([v]), torch.tensor([want[k]]), 1e-5, 1e-4, f"{case_name}.{k}")
            self.assertEqual([r.policy_tokens, r.sequences, r.active_sequences], [want["policyTokens"], want["sequences"], want["activeSequences"]])
            for n, p in named.items():
                assert_close(self, p, expected[f"{case_name}.weight.{n}"], 1e-5, 1e-4, f"{case_name}.weight.{n}")
                s = opt.state[p]
                assert_close(self, s["exp_avg"], expected[f"{case_name}.m.{n}"], 1e-6, 1e-3, f"{case_name}.m.{n}")
                assert_close(self, s["exp_avg_sq"], expected[f"{case_name}.v.{n}"], 1e-8, 2e-3, f"{case_name}.v.{n}")
                if case_name == "noclip":
                    assert_close(self, p.grad, expected[f"{case_name}.grad.{n}"], 1e-6, 1e-3, f"{case_name}.grad.{n}")

    def test_qwen3(self) -> None:
        self.check("tiny-qwen3")

    def test_llama_tied(self) -> None:
        self.check("tiny-llama-tied")


if __name__ == "__main__":
    unittest.main()
