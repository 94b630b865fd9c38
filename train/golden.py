"""The trainer's own outputs on an exported checkpoint, for k3's test against an independent implementation.

    /usr/bin/python3 train/golden.py --model models/k3-demo --k3 build/k3 --out tests/data/k3-demo

For five prompts (a chat turn rendered as k3 renders it; the first candidates without a near-tie on their greedy
path): the prompt ids, a 64-token greedy continuation (end of
message ignored) from repeated full forwards, the fp32 logits of the last prompt row and of every 8th greedy step,
and each greedy step's top-1 minus top-2 logit gap (so a test can tell a near-tie from a mismatch). The weights
are read back from the checkpoint files, dequantised exactly, so both sides compute on the same numbers.
"""
import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("GOMP_SPINCOUNT", "20000")  # see train.py
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint  # noqa: E402
import k3model  # noqa: E402
import render  # noqa: E402

# Candidates in order; the first five whose greedy path has no near-tie (top-2 gap >= MIN_GAP at every step, as
# the k3-tiny-a fixture requires) are kept, so fp32 rounding differences cannot flip a greedy choice.
CANDIDATES = [
    "What does ephemeral mean?",
    "Hello! What can you do?",
    "Quote John 3:16.",
    "Tell me a fortune.",
    "Define the noun lighthouse.",
    "What is a harbor?",
    "Who are you?",
    "Give me a verse from the Psalms.",
    "What does it mean to wander?",
    "Say something wise.",
    "What is the meaning of the word 'candle'?",
    "Recite Genesis 1:1.",
    "What does serene mean?",
    "Tell me a joke.",
    "Define the verb whisper.",
    "What is a river?",
]
N_PROMPTS = 5
MIN_GAP = 0.01
N_GEN = 64
DECODE_ROWS = list(range(0, N_GEN, 8)) + [N_GEN - 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--k3", default="build/k3")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    cfg = k3model.Config(json.load(open(os.path.join(args.model, "config.json")))["text_config"])
    model = k3model.K3(cfg).eval()
    k3model.load_official(model, checkpoint.read_checkpoint(args.model))
    out = {}
    summary = []
    for question in CANDIDATES:
        if len(summary) == N_PROMPTS:
            break
        text = render.render_prompt([{"role": "user", "content": question}])
        ids = json.loads(subprocess.run([args.k3, "tokenize", "--model", args.model, "--allow-special"], input=text,
                                        capture_output=True, text=True, check=True).stdout)
        seq = list(ids)
        rows, gaps = [], []
        with torch.no_grad():
            for _ in range(N_GEN):
                logits = model(torch.tensor([seq]))[0, -1]
                top = logits.topk(2).values
                gaps.append(float(top[0] - top[1]))
                rows.append(logits.numpy().copy())
                seq.append(int(logits.argmax()))
        gen = seq[len(ids):]
        reply = subprocess.run([args.k3, "detokenize", "--model", args.model], input=json.dumps(gen),
                               capture_output=True, text=True, check=True).stdout
        print(f"{question!r}: min greedy gap {min(gaps):.3f}{'' if min(gaps) >= MIN_GAP else ' (near-tie: skipped)'}"
              f"\n  {reply!r}", file=sys.stderr)
        if min(gaps) < MIN_GAP:
            continue
        i = len(summary)
        out[f"p{i}.prompt_ids"] = ("I32", np.array(ids, dtype=np.int32))
        out[f"p{i}.gen_tokens"] = ("I32", np.array(gen, dtype=np.int32))
        out[f"p{i}.gen_top2_gap"] = ("F32", np.array(gaps, dtype=np.float32))
        # Row k: the logits that chose gen[k]; row 0 is the last prompt row, row k > 0 a decode step.
        out[f"p{i}.rows"] = ("I32", np.array(DECODE_ROWS, dtype=np.int32))
        out[f"p{i}.logits"] = ("F32", np.stack([rows[k] for k in DECODE_ROWS]).astype(np.float32))
        summary.append({"prompt": question, "prompt_tokens": len(ids), "min_gap": min(gaps), "reply": reply})
    if len(summary) < N_PROMPTS:
        sys.exit(f"only {len(summary)} of the candidate prompts have no near-tie on their greedy path")
    os.makedirs(args.out, exist_ok=True)
    checkpoint.write_safetensors(os.path.join(args.out, "golden.safetensors"), out)
    with open(os.path.join(args.out, "golden.json"), "w") as f:
        json.dump({"prompts": summary, "n_gen": N_GEN, "rows": DECODE_ROWS}, f, indent=2, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
