"""The contracts against real inputs and results: the rlTrain and sftTrain activities of recorded histories of real
runs (test/fixtures/histories, recorded from a Temporal server by scripts/record-histories.ts) validate; a broken input
is refused naming its field."""
import gzip
import json
import os
import unittest

from temporalio.api.history.v1 import History

from cm2_torch.contracts import ContractError, non_retryable_types, validate

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
HISTORIES = os.path.join(ROOT, "test", "fixtures", "histories")


def activities(file: str, activity: str):
    """(input, result) of every completed `activity` in a recorded history."""
    h = History()
    with gzip.open(os.path.join(HISTORIES, file), "rb") as f:
        h.ParseFromString(f.read())
    scheduled = {}
    out = []
    for e in h.events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            a = e.activity_task_scheduled_event_attributes
            if a.activity_type.name == activity:
                scheduled[e.event_id] = json.loads(a.input.payloads[0].data)
        if e.HasField("activity_task_completed_event_attributes"):
            c = e.activity_task_completed_event_attributes
            if c.scheduled_event_id in scheduled:
                out.append((scheduled[c.scheduled_event_id], json.loads(c.result.payloads[0].data)))
    return out


class ContractsTest(unittest.TestCase):
    def test_recorded_rl_train(self) -> None:
        seen = activities("cm2-smollm2-full1-rl.binpb.gz", "rlTrain") + activities("cm2-tbase3-rl.binpb.gz", "rlTrain")
        self.assertGreater(len(seen), 0)
        for inp, res in seen:
            validate("rlTrain", "input", inp)
            validate("rlTrain", "result", res)

    def test_recorded_sft_train(self) -> None:
        seen = activities("cm2-smollm2-full1-sft.binpb.gz", "sftTrain")
        self.assertGreater(len(seen), 0)
        for inp, res in seen:
            validate("sftTrain", "input", inp)
            validate("sftTrain", "result", res)

    def test_a_broken_input_is_refused_naming_its_field(self) -> None:
        inp, _ = activities("cm2-smollm2-full1-rl.binpb.gz", "rlTrain")[0]
        inp["step"] = 0
        del inp["advantagesKey"]
        with self.assertRaises(ContractError) as e:
            validate("rlTrain", "input", inp)
        self.assertEqual(e.exception.type, "BadInput")
        self.assertIn("step", str(e.exception))
        self.assertIn("advantagesKey", str(e.exception))
        self.assertIn("BadInput", non_retryable_types())


if __name__ == "__main__":
    unittest.main()
