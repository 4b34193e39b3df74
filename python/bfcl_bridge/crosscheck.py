"""bfcl-eval's own multi-turn evaluation of decoded results, for cross-checking cm2's (issue 34 item 4).

    python crosscheck.py IN.jsonl OUT.json

IN.jsonl: rows {"id", "result": [[[call strings of a step], ...steps], ...turns]} of one or more multi-turn categories.
For each category the rows are scored by BFCL's file-level `eval_runner.multi_turn_runner`, with BFCL's own prompts
and possible answers for the same ids, in a fresh process of its own: nothing of python/bfcl_bridge/bridge.py is
used. OUT.json: {id: {"valid": bool, "error_type": str}}.

The steps are handed to the runner already decoded (its handler's `decode_execute` returns them as they are). They
are not written as a prompting model's text "[call, call]" and decoded again, because BFCL's prompting decoder keeps
keyword arguments only: the ground truth's `sort('final_report.pdf')` would come back as `sort()` and fail.
"""
import json
import sys
import tempfile
import types
from pathlib import Path

sys.stdout = sys.stderr  # BFCL prints progress
_registry = types.ModuleType("bfcl_eval.constants.model_config")
_registry.MODEL_CONFIG_MAPPING = {}  # eval_runner imports the model registry (every vendor SDK); it is not used here
sys.modules.setdefault("bfcl_eval.constants.model_config", _registry)

from bfcl_eval.eval_checker import eval_runner  # noqa: E402
from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry  # noqa: E402


class DecodedHandler:
    """What eval_runner asks of a handler for multi-turn: each step's calls, here given already decoded."""

    def decode_execute(self, result, has_tool_call_tag=False):
        if not isinstance(result, list):
            raise ValueError(f"not a list of call strings: {result!r}")
        return result


def main(src: str, dst: str) -> None:
    rows = [json.loads(line) for line in Path(src).read_text().splitlines() if line.strip()]
    by_category: dict = {}
    for row in rows:
        by_category.setdefault(row["id"].rsplit("_", 1)[0], []).append(row)
    verdicts = {}
    for category, cat_rows in by_category.items():
        ids = [r["id"] for r in cat_rows]
        prompts = {e["id"]: e for e in load_dataset_entry(category)}
        truth = {t["id"]: t for t in load_ground_truth_entry(category)}
        model_result = [
            {"id": r["id"], "result": r["result"]}
            for r in cat_rows
        ]
        with tempfile.TemporaryDirectory() as score_dir:
            eval_runner.multi_turn_runner(
                DecodedHandler(), model_result, [prompts[i] for i in ids], [truth[i] for i in ids],
                "cm2-crosscheck", category, Path(score_dir),
            )
            failed = {}
            for f in Path(score_dir).rglob("*.json"):
                for line in f.read_text().splitlines():
                    row = json.loads(line)
                    if "id" in row and row.get("valid") is False:
                        failed[row["id"]] = row.get("error", {}).get("error_type", "")
        for i in ids:
            verdicts[i] = {"valid": i not in failed, "error_type": failed.get(i, "")}
    Path(dst).write_text(json.dumps(verdicts))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
