"""One update outside Temporal, for tests and debugging:

    python -m cm2_torch.cli update -c CONFIG --input rlTrain-input.json --attempt N

runs the update of an `rlTrain` input as an attempt would once past its checks (no recorded result or manifest is looked
for first: two of these started together race for the step's manifest, as a zombie attempt and its retry would) and
prints the result as JSON.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

from .checkpoint import new_attempt_tag
from .config import load_settings
from .contracts import validate
from .store import Store
from .train import TrainContext, update


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("update")
    u.add_argument("-c", "--config")
    u.add_argument("--input", required=True)
    u.add_argument("--attempt", type=int, default=1)
    u.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    with open(a.input) as f:
        inp = validate("rlTrain", "input", json.load(f))
    ctx = TrainContext(store=Store(load_settings(a.config)), device=torch.device(a.device), attempt=a.attempt, log=lambda m: print(m, file=sys.stderr))
    print(json.dumps(update(ctx, inp, new_attempt_tag(a.attempt))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
