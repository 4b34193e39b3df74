"""Reads a TensorBoard run folder with TensorBoard's own EventAccumulator and prints every scalar series as JSON:
{tag: [[step, value], ...]} (issue 35's tests: what TensorBoard itself would show, not what cm2 thinks it wrote).

TensorFlow 2 writers (cm2's, through tfjs-node's binding of TensorFlow's summary kernels) write scalars as tensors
with the scalars plugin's metadata; the accumulator's `Tensors` holds them, `Scalars` the TF1-style ones: both read.

    python read_tensorboard.py DIR
"""
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util


def main(path: str) -> None:
    acc = EventAccumulator(path, size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    out = {}
    for tag in tags.get("scalars", []):
        out[tag] = [[e.step, e.value] for e in acc.Scalars(tag)]
    for tag in tags.get("tensors", []):
        out[tag] = [[e.step, float(tensor_util.make_ndarray(e.tensor_proto))] for e in acc.Tensors(tag)]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
