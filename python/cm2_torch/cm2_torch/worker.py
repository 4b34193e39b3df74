"""The PyTorch worker of the train queue: serves `rlTrain` (the GRPO update) and `sftTrain` (cold-start SFT, from the
files `sftPrepare` writes) with the same names, inputs and results as the TypeScript worker (contracts.json), on
`temporal.taskQueues.train` (default: the gpu queue).

    python -m cm2_torch.worker -c config/cm2.yaml [--device cuda|cpu] [--bf16]
    torchrun --nproc_per_node N -m cm2_torch.worker -c config/cm2.yaml        (N ranks; --nnodes for several machines)

Under torchrun rank 0 polls Temporal and sends each task to the other ranks; every rank holds an FSDP2 shard of the
policy and runs the update on its share of the micro-batches (the update equals the single-process one: grpo.py);
rank 0 gathers the shards and writes the checkpoint. When an update fails after the ranks started it, the process
group cannot be trusted: the activity fails (Temporal retries it) and every rank exits non-zero, for torchrun
(`--max-restarts`) or the supervisor to start the group again.

Failures the workflows must not retry are ApplicationErrors of the contract's non-retryable types (`BadInput`). The
activity heartbeats while it runs (a ticker, with the micro-batch reached as its detail) and stops at the next
micro-batch when cancelled. One task at a time (`max_concurrent_activities` 1): the device holds one update.
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import datetime
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

from .codec import CodecKeyError, data_converter
from .config import ConfigError, Settings, load_settings
from .contracts import ContractError
from .fsdp import broadcast_object, distributed, init_distributed, rank_device
from .store import Store
from .sft import sft_train
from .train import BadInput, PolicyCache, TrainContext, follow, rl_train

log = logging.getLogger("cm2_torch.worker")


class Cancelled(Exception):
    pass


class TrainActivities:
    def __init__(self, store: Store, device: torch.device, autocast: torch.dtype | None):
        self.store, self.device, self.autocast = store, device, autocast
        self.cache = PolicyCache()
        self.group = threading.Lock()  # one user of the process group at a time: an update, or the idle ping
        self.broken = threading.Event()

    @activity.defn(name="rlTrain")
    def rl_train(self, raw: dict) -> dict:
        return self.heartbeating(lambda ctx: rl_train(ctx, raw))

    @activity.defn(name="sftTrain")
    def sft_train(self, raw: dict) -> dict:
        return self.heartbeating(lambda ctx: sft_train(ctx, raw))

    def heartbeating(self, body) -> dict:
        """Runs `body(ctx)` with a heartbeat ticker (the micro-batch and step reached as its detail) and cancellation
        checked at each micro-batch."""
        info = activity.info()
        progress: dict[str, Any] = {"phase": "start"}
        stop = threading.Event()

        hb_timeout = info.heartbeat_timeout.total_seconds() if info.heartbeat_timeout else 60.0
        interval = max(0.5, min(5.0, hb_timeout / 4))

        def ticker() -> None:
            while not stop.wait(interval):
                try:
                    activity.heartbeat(dict(progress))
                except Exception:
                    pass

        def on_micro(done: int, total: int) -> None:
            progress.update(phase="update", micro=done, of=total)
            if activity.is_cancelled():
                raise Cancelled()

        def on_step(step: int, total: int, loss: float) -> None:
            progress.update(step=step, total=total, loss=loss)

        activity.heartbeat(progress)
        hb = threading.Thread(target=_with_context(ticker), daemon=True)
        hb.start()
        ctx = TrainContext(store=self.store, device=self.device, cache=self.cache, autocast=self.autocast, attempt=info.attempt,
                           on_micro=on_micro, on_step=on_step, log=lambda m: activity.logger.info(m))
        try:
            with self.group:
                return self.guarded(lambda: body(ctx))
        except BaseException:
            if ctx.broadcast:
                self.broken.set()
            raise
        finally:
            stop.set()

    def guarded(self, fn):
        try:
            return fn()
        except (BadInput, ContractError) as e:
            raise ApplicationError(str(e), type="BadInput", non_retryable=True) from e
        except ConfigError as e:
            raise ApplicationError(str(e), type="ConfigError", non_retryable=True) from e


def _with_context(fn):
    """`fn` run in a new thread inside the calling activity's context (heartbeats go to that activity)."""
    import contextvars

    ctx = contextvars.copy_context()
    return lambda: ctx.run(fn)


async def serve(settings: Settings, device: torch.device, autocast: torch.dtype | None) -> int:
    tls: Any = False
    if settings.tls:
        from temporalio.service import TLSConfig

        tls = TLSConfig(server_root_ca_cert=settings.tls_ca, client_cert=settings.tls_cert, client_private_key=settings.tls_key,
                        domain=settings.tls_server_name)
    converter = data_converter()
    kw: dict[str, Any] = {"data_converter": converter} if converter else {}
    security = "plaintext" if not settings.tls else "TLS" + (f" ({', '.join(x for x in ('mTLS' if settings.tls_cert else '', 'API key' if settings.api_key else '') if x)})" if settings.tls_cert or settings.api_key else "")
    try:
        client = await Client.connect(settings.temporal_address, namespace=settings.namespace, api_key=settings.api_key, tls=tls, **kw)
    except Exception as e:  # the message names the address and how it was secured, never a secret
        print(f"cm2_torch worker: Temporal not reachable at {settings.temporal_address} over {security}: {e}; check temporal.tls and the API key variable",
              file=sys.stderr, flush=True)
        return 3
    acts = TrainActivities(Store(settings), device, autocast)
    multi = distributed()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as executor:
        worker = Worker(client, task_queue=settings.train_queue, activities=[acts.rl_train, acts.sft_train], activity_executor=executor,
                        max_concurrent_activities=1, graceful_shutdown_timeout=datetime.timedelta(seconds=30))
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, done.set)

        async def ping() -> None:
            # the other ranks wait for tasks inside a collective: keep it well inside the group's timeout
            while not done.is_set():
                await asyncio.sleep(60)
                if acts.group.acquire(blocking=False):
                    try:
                        await asyncio.to_thread(broadcast_object, "ping")
                    finally:
                        acts.group.release()

        async def watch() -> None:
            # polled: a thread left blocked in wait() would hold up the interpreter's exit
            while not done.is_set():
                if await asyncio.to_thread(acts.broken.wait, 1.0):
                    done.set()

        tasks = [asyncio.create_task(watch())] + ([asyncio.create_task(ping())] if multi else [])
        print(f"cm2_torch worker polling {settings.train_queue} on {settings.temporal_address} (namespace {settings.namespace}, "
              f"{security}, device {device}, payloads {'encrypted' if converter else 'not encrypted'}, {torch.distributed.get_world_size() if multi else 1} rank(s), pid {os.getpid()})", flush=True)
        async with worker:
            await done.wait()
        for t in tasks:
            t.cancel()
    if acts.broken.is_set():
        print("cm2_torch worker: an update failed after the ranks started it; exiting so that the group starts again", file=sys.stderr, flush=True)
        return 1
    if multi:
        # tell the other ranks to stop (under torchrun they got the signal too and may be gone: wait 10 s at most)
        t = threading.Thread(target=broadcast_object, args=(None,), daemon=True)
        t.start()
        t.join(10)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs the worker and ends the process with its exit code (never returns)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", help="the cm2 config file (its temporal and s3 sections)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cuda (each rank its LOCAL_RANK's GPU) or cpu")
    ap.add_argument("--bf16", action="store_true", help="matmuls in bf16 autocast (float32 weights, moments and log-probabilities)")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = load_settings(a.config)
        data_converter()  # a bad CM2_CODEC_KEY stops the worker here, naming the entry
    except (ConfigError, CodecKeyError) as e:
        print(f"cm2_torch worker: {e}", file=sys.stderr)
        return 2
    device = rank_device(a.device)
    rank, _ = init_distributed(device)
    autocast = torch.bfloat16 if a.bf16 else None
    if rank == 0:
        code = asyncio.run(serve(settings, device, autocast))
    else:
        code = 0
        try:
            follow(TrainContext(store=Store(settings), device=device, autocast=autocast, log=lambda m: log.info(m)))
        except BaseException:
            log.exception("rank %d: an update failed; exiting so that the group starts again", rank)
            code = 1
    # leave without the interpreter's finalization: a group whose peers are gone (or broken) may never let
    # destroy_process_group return, and the Temporal client's native threads can abort a finalizing interpreter
    # (seen in CI: "Fatal Python error: PyGILState_Release" after a refused connection, exit by signal instead of 3)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
