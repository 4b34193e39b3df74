"""cm2's bridge to PyPI's bfcl-eval (issue 34): one long-lived process per worker, JSON lines on stdin/stdout.

BFCL's multi-turn categories execute the model's calls against BFCL's own Python backends (GorillaFileSystem,
TradingBot, TravelAPI, ...) and score an entry by re-executing the model's calls and the ground truth's, turn by turn,
and comparing the backends' states and results. This process wraps exactly those functions of the installed
`bfcl_eval` package, nothing re-implemented:

- `load`: `bfcl_eval.utils.load_dataset_entry` (the questions with BFCL's function docs filled in and the held-back
  functions of `miss_func` moved to their turns) and `load_ground_truth_entry`;
- `open` / `execute` / `close`: `multi_turn_utils.execute_multi_turn_func_call`, as BFCL's inference loop calls it;
- `check`: `eval_runner._evaluate_single_multi_turn_entry`, BFCL's per-entry evaluation (force-termination, empty
  steps, `multi_turn_checker`), given each step's decoded call strings;
- `decode`: `default_decode_execute_prompting`, BFCL's parser of a prompting model's text; `to_calls`:
  `convert_to_function_call`, its writer of call strings from `{name: arguments}`;
- `system_prompt`: `system_prompt_pre_processing_chat_model`, BFCL's system prompt for a prompting model;
  `format_results` and `missed_function_prompt`: its messages with execution results and with held-back functions
  (`format_execution_results_prompting`, `DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING`);
- `prompt_messages` and `decode_ast`: the same prompting mode for the single-turn (AST) categories, by entry id;
- `parse_calls`: call strings as data (Python's `ast`), for harness checks that play the ground truth.

Two things differ from running BFCL once per process, both so that a long-lived process stays correct:
- BFCL keeps backend instances in a module-level dict keyed by model name and entry id, and a second evaluation of
  the same entry would reuse the first one's mutated instances. Every session and every check here gets a model
  name of its own, and its instances are dropped when it ends.
- `eval_runner` imports BFCL's model registry, which imports every vendor SDK; the registry is not used by the
  per-entry function, so an empty stand-in is registered before the import (python/bfcl_bridge/requirements.txt
  installs bfcl-eval without those SDKs).

Requests: {"id": n, "op": "...", ...}; answers: {"id": n, "ok": true, ...} or {"id": n, "ok": false, "error": "..."}.
A failing request never ends the process. stdout carries only answers (BFCL's prints go to stderr).
"""
import ast
import copy
import json
import re
import sys
import traceback
import types
from importlib.metadata import version

_answers = sys.stdout
sys.stdout = sys.stderr  # BFCL prints progress; keep the protocol stream clean

# eval_runner imports MODEL_CONFIG_MAPPING from the model registry, which imports every vendor SDK. Not used here.
_registry = types.ModuleType("bfcl_eval.constants.model_config")
_registry.MODEL_CONFIG_MAPPING = {}
sys.modules.setdefault("bfcl_eval.constants.model_config", _registry)

from bfcl_eval.constants.eval_config import PROMPT_PATH  # noqa: E402
from bfcl_eval.eval_checker import eval_runner  # noqa: E402
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils  # noqa: E402
from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING  # noqa: E402
from bfcl_eval.constants.enums import ReturnFormat  # noqa: E402
from bfcl_eval.model_handler.utils import (  # noqa: E402
    convert_to_function_call,
    default_decode_ast_prompting,
    default_decode_execute_prompting,
    format_execution_results_prompting,
    system_prompt_pre_processing_chat_model,
)
from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry  # noqa: E402

_entries: dict = {}  # entry id -> BFCL's test entry (as load_dataset_entry gives it)
_truth: dict = {}  # entry id -> ground truth (list of turns of call strings)
_sessions: dict = {}  # session name -> (model name, entry id)
_serial = [0]


def _fresh_model_name(kind: str) -> str:
    _serial[0] += 1
    return f"cm2{kind}{_serial[0]}"


def _drop_instances(model_name: str) -> None:
    """Drops the backend instances BFCL made for this model name (eval runs append "_eval" to it)."""
    prefix = re.sub(r"[-./:]", "_", model_name) + "_"
    g = vars(multi_turn_utils)
    for key in [k for k in g if k.startswith(prefix) and k.endswith("_instance")]:
        del g[key]


def _long_context(entry_id: str) -> bool:
    category = entry_id.rsplit("_", 1)[0]
    return "long_context" in category or "composite" in category


def _entry(entry_id: str) -> dict:
    if entry_id not in _entries:
        raise KeyError(f"entry {entry_id!r} is not loaded (load its category first)")
    return _entries[entry_id]


def op_hello(_req):
    return {"bfcl_eval": version("bfcl-eval"), "python": sys.version.split()[0], "data": str(PROMPT_PATH)}


def op_load(req):
    category = req["category"]
    entries = load_dataset_entry(category)
    try:
        truth = {t["id"]: t["ground_truth"] for t in load_ground_truth_entry(category)}
    except FileNotFoundError:  # relevance categories have no possible answers
        truth = {}
    for e in entries:
        _entries[e["id"]] = e
        if e["id"] in truth:
            _truth[e["id"]] = truth[e["id"]]
    return {"entries": entries, "ground_truth": [{"id": e["id"], "ground_truth": truth.get(e["id"])} for e in entries]}


def op_open(req):
    session, entry = req["session"], _entry(req["entry"])
    if session in _sessions:
        _drop_instances(_sessions.pop(session)[0])
    model_name = _fresh_model_name("s")
    multi_turn_utils.execute_multi_turn_func_call(
        [], entry.get("initial_config", {}), entry["involved_classes"], model_name, entry["id"],
        long_context=_long_context(entry["id"]), is_evaL_run=False,
    )
    _sessions[session] = (model_name, entry["id"])
    return {}


def op_execute(req):
    session = req["session"]
    if session not in _sessions:
        raise KeyError(f"no open session {session!r}")
    model_name, entry_id = _sessions[session]
    entry = _entries[entry_id]
    results, _ = multi_turn_utils.execute_multi_turn_func_call(
        list(req["calls"]), entry.get("initial_config", {}), entry["involved_classes"], model_name, entry_id,
        long_context=_long_context(entry_id), is_evaL_run=False,
    )
    return {"results": results}


def op_close(req):
    found = _sessions.pop(req["session"], None)
    if found:
        _drop_instances(found[0])
    return {}


class _DecodedHandler:
    """The one handler method `_evaluate_single_multi_turn_entry` calls: steps arrive already decoded."""

    def decode_execute(self, result, has_tool_call_tag=False):
        if not isinstance(result, list) or not all(isinstance(c, str) for c in result):
            raise ValueError(f"a step is not a list of call strings: {result!r}")
        return result


def op_check(req):
    entry_id = req["entry"]
    entry = copy.deepcopy(_entry(entry_id))
    truth = req["ground_truth"] if "ground_truth" in req else _truth.get(entry_id)
    if truth is None:
        raise KeyError(f"entry {entry_id!r} has no ground truth")
    model_name = _fresh_model_name("c")
    category = entry_id.rsplit("_", 1)[0]
    try:
        verdict = eval_runner._evaluate_single_multi_turn_entry(
            _DecodedHandler(), entry_id, req["result"], truth, entry, model_name, category,
        )
    finally:
        _drop_instances(model_name)  # also the "_eval" and "_ground_truth_eval" instances: the same prefix
    if verdict.get("valid"):
        return {"valid": True}
    error = verdict.get("error", {})
    message = error.get("error_message", "")
    if isinstance(message, list):
        message = " ".join(str(m) for m in message)
    return {"valid": False, "error_type": error.get("error_type", ""), "error_message": message,
            "details": _jsonable(error.get("details"))}


def _jsonable(value):
    try:
        return json.loads(json.dumps(value, default=repr))
    except Exception:
        return repr(value)


def op_decode(req):
    try:
        return {"calls": default_decode_execute_prompting(req["text"], has_tool_call_tag=False)}
    except Exception as e:  # BFCL's inference loop treats a decoding failure as the end of the turn
        return {"calls": None, "error": f"{type(e).__name__}: {e}"}


def op_to_calls(req):
    """`calls_json`: [{name: {argument: value}}] as JSON text (floats written with a fraction stay floats)."""
    calls = json.loads(req["calls_json"]) if "calls_json" in req else req["calls"]
    return {"calls": convert_to_function_call(list(calls))}


def op_format_results(req):
    """BFCL's one user message with a step's execution results, for a prompting model (a Python repr)."""
    return {"content": format_execution_results_prompting({}, list(req["results"]), {"model_responses_decoded": list(req["calls"])})}


def op_missed_function_prompt(req):
    """BFCL's user message of a turn that offers held-back functions, for a prompting model."""
    return {"content": DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(functions=req["functions"])}


def op_prompt_messages(req):
    """A loaded entry's first-turn messages with BFCL's system prompt for a prompting model (its function docs as
    `load_dataset_entry` gives them: language hints included)."""
    if req["entry"] not in _entries:  # loaded on first use: the category is the id without its last "_<n>"
        for e in load_dataset_entry(req["entry"].rsplit("_", 1)[0]):
            _entries[e["id"]] = e
    entry = _entry(req["entry"])
    return {"messages": system_prompt_pre_processing_chat_model(copy.deepcopy(entry["question"][0]), entry["function"], entry["id"])}


def op_decode_ast(req):
    """BFCL's parser of a prompting model's text for the AST categories: [{name: {argument: value}}] as JSON text."""
    try:
        calls = default_decode_ast_prompting(req["text"], ReturnFormat[req.get("language", "python").upper()], has_tool_call_tag=False)
        return {"calls_json": json.dumps(calls)}
    except Exception as e:  # a text that does not parse: BFCL's decoder failure
        return {"calls_json": None, "error": f"{type(e).__name__}: {e}"}


def op_system_prompt(req):
    return {"messages": system_prompt_pre_processing_chat_model(copy.deepcopy(req["messages"]), req["functions"], req["entry"])}


def op_parse_calls(req):
    """Call strings as data (Python's own parser): name, keyword arguments and positional ones, values as JSON text
    (floats keep their fraction). For harness checks that play the ground truth as a model would write it."""
    out = []
    for text in req["calls"]:
        node = ast.parse(text, mode="eval").body
        if not isinstance(node, ast.Call):
            raise ValueError(f"not a call: {text!r}")
        out.append({
            "name": ast.unparse(node.func),
            "kwargs_json": json.dumps({k.arg: ast.literal_eval(k.value) for k in node.keywords}),
            "positional_json": json.dumps([ast.literal_eval(a) for a in node.args]),
        })
    return {"calls": out}


OPS = {name[3:]: fn for name, fn in globals().items() if name.startswith("op_")}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        rid = None
        try:
            req = json.loads(line)
            rid = req.get("id")
            fn = OPS.get(req.get("op"))
            if fn is None:
                raise KeyError(f"unknown op {req.get('op')!r}")
            out = {"id": rid, "ok": True, **fn(req)}
        except Exception as e:  # noqa: BLE001 - every failure is an answer, never the end of the process
            out = {"id": rid, "ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=4)}
        _answers.write(json.dumps(out, default=repr) + "\n")
        _answers.flush()


if __name__ == "__main__":
    main()
