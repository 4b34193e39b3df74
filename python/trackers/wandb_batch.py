"""Writes one cm2 tracking batch as a W&B run with W&B's own client (issue 35; src/tracking/sinks.ts WandbSink).

Reads the batch as JSON on stdin and prints {"steps": n} (the W&B steps it used). The batch's points are grouped into
rows by (section, step): section `sft`, `rl`, `heldout`, ... each gets its own x-axis (`<section>/step`, W&B's
`define_metric(step_metric=...)`), and every row a W&B step of its own, `stepOffset + i`, so W&B's single run-wide
step only grows across batches. `offline` mode writes the run files into `outDir` (the caller moves them into place,
so a batch written again replaces its files); `wandb sync` uploads them (`online` uploads as it logs: WANDB_API_KEY).
The run's settings go to W&B's config, cm2's links under `cm2_links`; the batch's end finishes the run.

    python wandb_batch.py < batch.json
"""
import json
import os
import re
import sys

import wandb


def main() -> None:
    b = json.load(sys.stdin)
    wandb_id = re.sub(r"[^A-Za-z0-9_-]", "-", b["runId"])
    os.makedirs(b["outDir"], exist_ok=True)
    run = wandb.init(
        project=b["project"],
        entity=b.get("entity"),
        id=wandb_id,
        name=b["runId"],
        mode=b["mode"],
        dir=b["outDir"],
        resume="allow",
        settings=wandb.Settings(silent=True, console="off", x_disable_stats=True, save_code=False, disable_git=True),
    )
    rows: dict = {}
    for p in b["points"]:
        section = p["key"].split("/", 1)[0]
        rows.setdefault((section, p["step"]), {})[p["key"]] = p["value"]
    sections = sorted({s for s, _ in rows})
    for s in sections:
        run.define_metric(f"{s}/step", hidden=True)
        run.define_metric(f"{s}/*", step_metric=f"{s}/step")
    if b["params"]:
        run.config.update(b["params"], allow_val_change=True)
    if b["tags"]:
        run.config.update({"cm2_links": b["tags"]}, allow_val_change=True)
    step = int(b["stepOffset"])
    for (section, s) in sorted(rows, key=lambda k: (k[1], k[0])):
        run.log({f"{section}/step": s, **rows[(section, s)]}, step=step)
        step += 1
    end = b.get("end")
    run.finish(exit_code=0 if end in (None, "FINISHED") else 1)
    json.dump({"steps": step - int(b["stepOffset"])}, sys.stdout)


if __name__ == "__main__":
    main()
