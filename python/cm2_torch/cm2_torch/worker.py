"""The PyTorch worker of the train queue: serves `rlTrain` (the GRPO update) with the same name, input and result as
the TypeScript worker (contracts.json), on `temporal.taskQueues.train` (default: the gpu queue).

    python -m cm2_torch.worker -c config/cm2.yaml [--device cuda|cpu] [--bf16]

Failures the workflows must not retry are ApplicationErrors of the contract's non-retryable types (`BadInput`). The
activity heartbeats while it runs (a ticker, with the micro-batch reached as its detail) and stops at the next
micro-batch when cancelled. One task at a time (`max_concurrent_activities` 1): the device holds one update.
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import logging
import os
import signal
import sys
import threading
from typing import Any

import torch
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from .config import ConfigError, Settings, load_settings
from .contracts import ContractError
from .store import Store
from .train import BadInput, PolicyCache, TrainContext, rl_train

log = logging.getLogger("cm2_torch.worker")


class Cancelled(Exception):
    pass


class TrainActivities:
    def __init__(self, store: Store, device: torch.device, autocast: torch.dtype | None):
        self.store, self.device, self.autocast = store, device, autocast
        self.cache = PolicyCache()

    @activity.defn(name="rlTrain")
    def rl_train(self, raw: dict) -> dict:
        info = activity.info()
        progress: dict[str, Any] = {"phase": "start"}
        stop = threading.Event()

        def ticker() -> None:
            while not stop.wait(5.0):
                try:
                    activity.heartbeat(dict(progress))
                except Exception:
                    pass

        def on_micro(done: int, total: int) -> None:
            progress.update(phase="update", micro=done, of=total)
            if activity.is_cancelled():
                raise Cancelled()

        activity.heartbeat(progress)
        hb = threading.Thread(target=_with_context(ticker), daemon=True)
        hb.start()
        try:
            ctx = TrainContext(store=self.store, device=self.device, cache=self.cache, autocast=self.autocast, attempt=info.attempt,
                               on_micro=on_micro, log=lambda m: activity.logger.info(m))
            return rl_train(ctx, raw)
        except (BadInput, ContractError) as e:
            raise ApplicationError(str(e), type="BadInput", non_retryable=True) from e
        except ConfigError as e:
            raise ApplicationError(str(e), type="ConfigError", non_retryable=True) from e
        finally:
            stop.set()


def _with_context(fn):
    """`fn` run in a new thread inside the calling activity's context (heartbeats go to that activity)."""
    import contextvars

    ctx = contextvars.copy_context()
    return lambda: ctx.run(fn)


async def serve(settings: Settings, device: torch.device, autocast: torch.dtype | None) -> None:
    tls: Any = True if settings.tls else False
    client = await Client.connect(settings.temporal_address, namespace=settings.namespace, api_key=settings.api_key, tls=tls)
    acts = TrainActivities(Store(settings), device, autocast)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as executor:
        worker = Worker(client, task_queue=settings.train_queue, activities=[acts.rl_train], activity_executor=executor,
                        max_concurrent_activities=1, graceful_shutdown_timeout=__import__("datetime").timedelta(seconds=30))
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, done.set)
        print(f"cm2_torch worker polling {settings.train_queue} on {settings.temporal_address} (namespace {settings.namespace}, "
              f"device {device}, pid {os.getpid()})", flush=True)
        async with worker:
            await done.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", help="the cm2 config file (its temporal and s3 sections)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--bf16", action="store_true", help="matmuls in bf16 autocast (float32 weights, moments and log-probabilities)")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = load_settings(a.config)
    except ConfigError as e:
        print(f"cm2_torch worker: {e}", file=sys.stderr)
        return 2
    asyncio.run(serve(settings, torch.device(a.device), torch.bfloat16 if a.bf16 else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
