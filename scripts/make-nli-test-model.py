#!/usr/bin/env python3
"""Writes a tiny, deterministic NLI "cross-encoder" for the tests of slm's `nli:DIR` verifier.

    make-nli-test-model.py DIR TOKENIZER_JSON

DIR gets model.onnx, config.json and a copy of TOKENIZER_JSON (the MiniLM tokenizer the
project already has, models/all-MiniLM-L6-v2/tokenizer.json). Nothing is downloaded and
nothing is learned: the model is a handful of plain ONNX ops whose output follows from the
tokens, so the tests can check slm's real loading, pair tokenisation, batching and label
mapping (src/nli.rs) against known answers.

The rule, per pair (premise = segment 0, hypothesis = segment 1):
  neg = 1 if the token "not" occurs in the premise (token_type 0) at an attended position
  pad = 1 if a [PAD] token occurs at an attended position (only a wrong attention mask can
        cause that: padding must be masked out)
  logits = [contradiction, entailment, neutral] = [3*neg, 3*(1-neg), 10*pad]
So "PR 42 is NOT approved" -> contradiction, "PR 42 is approved" -> entailment (P = e^3/(e^3+2)
= 0.909), a "not" only in the hypothesis does not count, and attended padding -> neutral.
config.json lists the labels deliberately not entailment-first, so a mapping that assumed an
order would fail.

Requires the `onnx` package (pinned in scripts/test.sh). Output is byte-identical across runs.
"""

import json
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # ReduceMax still takes `axes` as an attribute; ONNX Runtime 1.31 supports it.
IR_VERSION = 8
LABELS = {"0": "contradiction", "1": "entailment", "2": "neutral"}


def build(not_id: int, pad_id: int) -> onnx.ModelProto:
    def const(name, value, dtype):
        return numpy_helper.from_array(np.array(value, dtype=dtype), name)

    inits = [
        const("not_id", not_id, np.int64),
        const("pad_id", pad_id, np.int64),
        const("premise_type", 0, np.int64),
        const("one", 1.0, np.float32),
        const("three", 3.0, np.float32),
        const("ten", 10.0, np.float32),
    ]
    n = helper.make_node
    nodes = [
        n("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        # "not" in the premise, at attended positions
        n("Equal", ["input_ids", "not_id"], ["is_not_b"]),
        n("Cast", ["is_not_b"], ["is_not"], to=TensorProto.FLOAT),
        n("Equal", ["token_type_ids", "premise_type"], ["is_premise_b"]),
        n("Cast", ["is_premise_b"], ["is_premise"], to=TensorProto.FLOAT),
        n("Mul", ["is_not", "is_premise"], ["not_in_premise"]),
        n("Mul", ["not_in_premise", "mask"], ["neg_tok"]),
        n("ReduceMax", ["neg_tok"], ["neg"], axes=[1], keepdims=1),
        # [PAD] at attended positions
        n("Equal", ["input_ids", "pad_id"], ["is_pad_b"]),
        n("Cast", ["is_pad_b"], ["is_pad"], to=TensorProto.FLOAT),
        n("Mul", ["is_pad", "mask"], ["pad_tok"]),
        n("ReduceMax", ["pad_tok"], ["pad"], axes=[1], keepdims=1),
        # logits in id2label order: contradiction, entailment, neutral
        n("Mul", ["neg", "three"], ["contradiction"]),
        n("Sub", ["one", "neg"], ["not_neg"]),
        n("Mul", ["not_neg", "three"], ["entailment"]),
        n("Mul", ["pad", "ten"], ["neutral"]),
        n("Concat", ["contradiction", "entailment", "neutral"], ["logits"], axis=1),
    ]
    ints = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])
    graph = helper.make_graph(nodes, "slm-nli-test", ints, [out], initializer=inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="slm make-nli-test-model.py"
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def self_check(model: onnx.ModelProto, not_id: int, pad_id: int) -> None:
    """Runs the rule on hand-made ids with onnx's reference evaluator, so a wrong graph fails here."""
    from onnx.reference import ReferenceEvaluator

    cls, sep, w = 101, 102, 2000  # [CLS], [SEP], an ordinary word
    ids = np.array(
        [
            [cls, w, not_id, sep, w, sep],  # "not" in the premise -> contradiction
            [cls, w, sep, not_id, sep, pad_id],  # "not" in the hypothesis, padded -> entailment
            [cls, w, sep, w, sep, pad_id],  # padding attended (wrong mask) -> neutral
        ],
        dtype=np.int64,
    )
    types = np.array([[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 0], [0, 0, 0, 1, 1, 0]], dtype=np.int64)
    mask = np.array([[1] * 6, [1, 1, 1, 1, 1, 0], [1] * 6], dtype=np.int64)
    (logits,) = ReferenceEvaluator(model).run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
    want = np.array([[3, 0, 0], [0, 3, 0], [0, 3, 10]], dtype=np.float32)
    assert np.array_equal(logits, want), f"self-check failed: {logits.tolist()}"


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} DIR TOKENIZER_JSON")
    out_dir, tokenizer_json = sys.argv[1], sys.argv[2]
    with open(tokenizer_json, encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    not_id, pad_id = vocab["not"], vocab["[PAD]"]
    model = build(not_id, pad_id)
    self_check(model, not_id, pad_id)

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString(deterministic=True))
    config = {
        "architectures": ["SlmNliTestModel"],
        "id2label": LABELS,
        "label2id": {v: int(k) for k, v in LABELS.items()},
        "max_position_embeddings": 512,
        "pad_token_id": pad_id,
    }
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    shutil.copyfile(tokenizer_json, os.path.join(out_dir, "tokenizer.json"))
    print(f"wrote {out_dir}: model.onnx (not={not_id}, pad={pad_id}), config.json, tokenizer.json")


if __name__ == "__main__":
    main()
