"""Train a small Kimi K3 on public-domain chat data and export it in the official checkpoint layout.

    /usr/bin/python3 train/train.py --k3 build/k3 --out train/runs/demo [--export models/k3-demo]

Steps (each skipped when its output exists in --out): build the conversations (train/data.py), learn a byte-level BPE
vocabulary on them (`k3 train-tokenizer`), render every conversation in K3's chat format and tokenize it
(`k3 tokenize`, so training sees exactly the ids k3 will produce), then train with AdamW for a fixed number of steps
(the routed experts quantisation-aware in MXFP4 for the last part), and export: bf16 trunk, MXFP4 experts,
config.json, the tokenizer files. The loss curve goes to OUT/loss.png and every figure to OUT/log.jsonl.
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import time

# Idle OpenMP threads spin only briefly before they sleep: with libgomp's long default spin, any other load on a
# small machine slows training tenfold; sleeping at once costs a factor of two. Set before torch starts its pool.
os.environ.setdefault("GOMP_SPINCOUNT", "20000")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # torch parallelises around BLAS calls itself

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint  # noqa: E402
import k3model  # noqa: E402
import render  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIALS = ["<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>"]
PROMPT_END, TURN_END = "[start_header_id]", "[end_header_id]"  # markers between the parts; dropped after tokenizing


def text_config(vocab):
    """The demo model: K3's architecture and schedule (KDA, KDA, KDA, MLA blocks) at a few million
    parameters."""
    return {
        "model_type": "kimi_linear",
        "architectures": ["KimiLinearForCausalLM"],
        "vocab_size": vocab,
        "hidden_size": 192,
        "num_hidden_layers": 8,
        "num_attention_heads": 3,
        "num_key_value_heads": 3,
        "rms_norm_eps": 1e-5,
        "intermediate_size": 512,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "q_lora_rank": 96,
        "kv_lora_rank": 64,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16,
        "v_head_dim": 32,
        "mla_use_nope": True,
        "mla_use_output_gate": True,
        "num_experts": 16,
        "num_experts_per_token": 4,
        "num_shared_experts": 2,
        "moe_intermediate_size": 64,
        "routed_expert_hidden_size": 96,
        "latent_moe_use_norm": True,
        "moe_router_activation_func": "sigmoid",
        "moe_renormalize": True,
        "routed_scaling_factor": 1.0,
        "topk_method": "noaux_tc",
        "use_grouped_topk": True,
        "num_expert_group": 1,
        "topk_group": 1,
        "hidden_act": "situ",
        "activation_situ_beta": 4.0,
        "activation_situ_linear_beta": 25.0,
        "attn_res_block_size": 4,
        "max_position_embeddings": 4096,
        "num_nextn_predict_layers": 0,
        "tie_word_embeddings": False,
        "bos_token_id": vocab - 256,
        "eos_token_id": vocab - 254,
        "pad_token_id": vocab - 1,
        "linear_attn_config": {
            "full_attn_layers": [4, 8],
            "kda_layers": [1, 2, 3, 5, 6, 7],
            "num_heads": 3,
            "head_dim": 64,
            "short_conv_kernel_size": 4,
            "gate_lower_bound": -5.0,
            "use_full_rank_gate": True,
        },
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "mxfp4-pack-quantized",
            "quantization_status": "compressed",
            "config_groups": {"group_0": {
                "format": "mxfp4-pack-quantized", "targets": ["Linear"], "input_activations": None,
                "output_activations": None,
                "weights": {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32, "symmetric": True,
                            "dynamic": False, "scale_dtype": "torch.uint8", "observer": "minmax", "actorder": None,
                            "block_structure": None, "zp_dtype": None}}},
            "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
                       "re:.*lm_head.*", "re:.*vision_tower.*", "re:.*mm_projector.*"],
        },
    }


def full_config(tc):
    return {
        "architectures": ["KimiK3ForConditionalGeneration"],
        "model_type": "kimi_k3",
        "bos_token_id": tc["bos_token_id"],
        "eos_token_id": tc["eos_token_id"],
        "pad_token_id": tc["pad_token_id"],
        "media_placeholder_token_id": tc["vocab_size"] - 256 + 21,
        "dtype": "bfloat16",
        "tie_word_embeddings": False,
        "text_config": tc,
    }


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- data preparation
def prepare(args):
    """OUT/tokens.npz: per conversation its ids and a mask of the tokens the loss counts (the completion)."""
    out = args.out
    conv_path = os.path.join(out, "conversations.jsonl")
    if not os.path.exists(conv_path):
        log("building conversations (train/data.py)")
        subprocess.run([sys.executable, os.path.join(HERE, "data.py"), "--out", conv_path, "--seed", str(args.seed),
                        "--stats"], check=True)
    convs = [json.loads(line) for line in open(conv_path, encoding="utf-8")]
    rng = random.Random(args.seed)
    efforts = [rng.choices(["max", "high", "low"], [8, 1, 1])[0] for _ in convs]
    rendered = [render.render(c["messages"], e) for c, e in zip(convs, efforts)]

    tok_dir = os.path.join(out, "tokenizer")
    if not os.path.exists(os.path.join(tok_dir, "tiktoken.model")):
        corpus = os.path.join(out, "tokenizer-corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            for p, c in rendered:
                text = p + c
                for s in SPECIALS:
                    text = text.replace(s, "\n")
                f.write(text + "\n")
        log(f"learning a {args.vocab}-token vocabulary (k3 train-tokenizer)")
        subprocess.run([args.k3, "train-tokenizer", "--text", corpus, "--vocab-size", str(args.vocab), "--out",
                        tok_dir], check=True)
        os.remove(corpus)

    tokens_path = os.path.join(out, "tokens.npz")
    if not os.path.exists(tokens_path):
        log("tokenizing (k3 tokenize)")
        specials = json.load(open(os.path.join(tok_dir, "tokenizer_config.json")))["added_tokens_decoder"]
        by_text = {v["content"]: int(k) for k, v in specials.items()}
        # The stream is tokenized with specials allowed, while k3 encodes message text as plain text: no message
        # may contain a special token's text.
        for conv in convs:
            for m in conv["messages"]:
                for field in ("content", "reasoning_content"):
                    bad = [t for t in by_text if t in m.get(field, "")]
                    assert not bad, f"special token text {bad[0]!r} in a message: {m[field][:80]!r}"
        stream = "".join(p + PROMPT_END + c + TURN_END for p, c in rendered)
        ids = json.loads(subprocess.run([args.k3, "tokenize", "--model", tok_dir, "--allow-special"], input=stream,
                                        capture_output=True, text=True, check=True).stdout)
        ids = np.array(ids, dtype=np.int32)
        ends = np.flatnonzero(ids == by_text[TURN_END])
        mids = np.flatnonzero(ids == by_text[PROMPT_END])
        assert len(ends) == len(mids) == len(rendered), "a marker token appears inside the text"
        starts = np.concatenate([[0], ends[:-1] + 1])
        seq, mask, offsets = [], [], [0]
        for s, m, e in zip(starts, mids, ends):
            part = np.concatenate([ids[s:m], ids[m + 1:e]])
            seq.append(part)
            mask.append(np.concatenate([np.zeros(m - s, np.uint8), np.ones(e - m - 1, np.uint8)]))
            offsets.append(offsets[-1] + len(part))
        np.savez(tokens_path, ids=np.concatenate(seq), mask=np.concatenate(mask), offsets=np.array(offsets))
    data = np.load(tokens_path)
    return data["ids"], data["mask"], data["offsets"], tok_dir


def pack(ids, mask, offsets, order, seq_len):
    """The conversations in the given order, laid end to end and cut into rows of seq_len tokens (the usual packing
    without document masks: a conversation sees the ones before it in its row, and may run on into the next row).
    Nothing is padded, so every step trains on seq_len tokens per row."""
    seq = np.concatenate([ids[offsets[i]:offsets[i + 1]] for i in order])
    keep = np.concatenate([mask[offsets[i]:offsets[i + 1]] for i in order])
    n = len(seq) // seq_len
    rows = torch.from_numpy(seq[:n * seq_len].astype(np.int64)).view(n, seq_len)
    masks = torch.from_numpy(keep[:n * seq_len].astype(bool)).view(n, seq_len)
    return rows, masks


# ---------------------------------------------------------------------------------------------- training
def loss_of(model, x, m):
    logits = model(x[:, :-1])
    target = x[:, 1:].masked_fill(~m[:, 1:], -100)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                                             ignore_index=-100)


@torch.no_grad()
def evaluate(model, rows, masks, batch):
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(rows), batch):
        x, m = rows[i:i + batch], masks[i:i + batch]
        n = int(m[:, 1:].sum())
        total += float(loss_of(model, x, m)) * n
        count += n
    model.train()
    return total / max(count, 1)


@torch.no_grad()
def expert_balance(model, rows, batch):
    """Per MoE layer, the busiest expert's share of the routed slots over its fair share (1.0 = perfectly even),
    on the given rows."""
    counts = [torch.zeros(moe.cfg.experts) for moe in model.moe_layers()]
    hooks = []
    for moe, c in zip(model.moe_layers(), counts):
        def hook(module, inputs, output, c=c):
            x = inputs[0].reshape(-1, module.cfg.d)
            s = torch.sigmoid(module.gate(x)) + module.e_score_correction_bias
            c += torch.bincount(s.topk(module.cfg.top_k, dim=-1).indices.reshape(-1), minlength=module.cfg.experts)
        hooks.append(moe.register_forward_hook(hook))
    model.eval()
    for i in range(0, len(rows), batch):
        model(rows[i:i + batch])
    model.train()
    for h in hooks:
        h.remove()
    return [round(float(c.max() / c.mean()), 2) for c in counts]


def train(args, ids, mask, offsets):
    torch.manual_seed(args.seed)
    n_conv = len(offsets) - 1
    order = list(range(n_conv))
    random.Random(args.seed).shuffle(order)
    n_val = max(1, n_conv // 50)
    tc = text_config(args.vocab)
    val_rows, val_masks = pack(ids, mask, offsets, order[:n_val], args.seq_len)
    train_rows, train_masks = pack(ids, mask, offsets, order[n_val:], args.seq_len)
    val_rows, val_masks = val_rows[:args.val_rows], val_masks[:args.val_rows]
    log(f"{n_conv} conversations, {int(mask.sum())} completion tokens; {len(train_rows)} training rows of "
        f"{args.seq_len}, {len(val_rows)} validation rows")

    cfg = k3model.Config(tc)
    model = k3model.K3(cfg)
    k3model.init_weights(model, args.seed)
    if args.init_from:  # continue from an exported checkpoint (its bf16 and MXFP4 values; a fresh optimizer)
        k3model.load_official(model, checkpoint.read_checkpoint(args.init_from))
        log(f"continuing from {args.init_from}")
    model.attn_res_enabled = not args.no_attn_res
    for moe in model.moe_layers():
        moe.balance = not args.no_router_bias
    n_params = sum(p.numel() for p in model.parameters())
    log(f"{n_params / 1e6:.2f} M parameters")

    # Weight decay on the projections and embeddings; not on gains, AttnRes queries, convs or KDA gate constants.
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "_res." not in n and "output_res" not in n]
    decay += [w for moe in model.moe_layers() for w in (moe.w1, moe.w2, moe.w3)]
    decayed = {id(p) for p in decay}
    rest = [p for p in model.parameters() if id(p) not in decayed]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed if args.sample_seed is None else args.sample_seed)
    log_path = os.path.join(args.out, args.name + "log.jsonl")
    logf = open(log_path, "w")
    start = time.time()
    qat_from = int(args.steps * (1 - args.qat_fraction))
    for step in range(args.steps if args.stop_after is None else min(args.stop_after, args.steps)):
        warm = min(1.0, (step + 1) / args.warmup)
        frac = step / max(1, args.steps - 1)
        lr = args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for group in opt.param_groups:
            group["lr"] = lr
        if step == qat_from:
            for moe in model.moe_layers():
                moe.qat = True
        pick = torch.randint(len(train_rows), (args.batch,), generator=gen)
        x = train_rows[pick]
        loss = loss_of(model, x, train_masks[pick])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        for moe in model.moe_layers():
            if moe.balance:
                moe.quantile_balance()
            else:
                moe.last_scores = None
        record = {"step": step + 1, "loss": float(loss), "lr": lr, "seconds": round(time.time() - start, 1)}
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            record["val_loss"] = evaluate(model, val_rows, val_masks, args.batch)
        logf.write(json.dumps(record) + "\n")
        logf.flush()
        if (step + 1) % 20 == 0 or "val_loss" in record:
            eta = (time.time() - start) / (step + 1) * (args.steps - step - 1)
            log(f"step {step + 1}/{args.steps} loss {record['loss']:.3f}" +
                (f" val {record['val_loss']:.3f}" if "val_loss" in record else "") + f" ({eta / 60:.1f} min left)")
    balance = expert_balance(model, val_rows, args.batch)
    log(f"busiest expert over its fair share, per MoE layer (validation): {balance}")
    logf.write(json.dumps({"expert_max_over_mean": balance}) + "\n")
    logf.close()
    return model, tc, log_path


def plot(log_path, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    records = [r for r in map(json.loads, open(log_path)) if "step" in r]
    steps = [r["step"] for r in records]
    losses = np.array([r["loss"] for r in records])
    smooth = np.convolve(losses, np.ones(20) / 20, mode="valid") if len(losses) >= 20 else losses
    plt.figure(figsize=(7, 4))
    plt.plot(steps, losses, alpha=0.3, label="training loss")
    plt.plot(steps[len(steps) - len(smooth):], smooth, label="training loss (mean of 20)")
    val = [(r["step"], r["val_loss"]) for r in records if "val_loss" in r]
    if val:
        plt.plot(*zip(*val), "o-", label="validation loss")
    plt.xlabel("step")
    plt.ylabel("cross-entropy (nats per completion token)")
    plt.yscale("log")
    plt.legend()
    plt.grid(alpha=0.3)
    plt.tight_layout()
    plt.savefig(png, dpi=100)


def export(model, tc, tok_dir, out_dir):
    """The official layout: bf16 trunk, MXFP4 routed experts, f32 KDA gates/convs/norms and router bias."""
    os.makedirs(out_dir, exist_ok=True)
    f32 = ("A_log", "dt_bias", "conv1d.weight", "o_norm.weight", "e_score_correction_bias")
    tensors = {}
    for name, arr in k3model.to_official(model).items():
        if ".experts." in name:
            packed, scale = checkpoint.mxfp4_encode(arr)
            base = name[: -len(".weight")]
            tensors[base + ".weight_packed"] = ("U8", packed)
            tensors[base + ".weight_scale"] = ("U8", scale)
        elif name.endswith(f32):
            tensors[name] = ("F32", arr.astype(np.float32))
        else:
            tensors[name] = ("BF16", checkpoint.bf16_round(arr))
    checkpoint.write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
    for f in ("tiktoken.model", "tokenizer_config.json"):
        with open(os.path.join(tok_dir, f), "rb") as src, open(os.path.join(out_dir, f), "wb") as dst:
            dst.write(src.read())
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(full_config(tc), f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k3", default="build/k3", help="the k3 binary (tokenizer training and tokenization)")
    ap.add_argument("--out", required=True, help="run directory (data, tokenizer, log, loss curve)")
    ap.add_argument("--export", help="write the trained checkpoint here")
    ap.add_argument("--name", default="", help="prefix of this run's log and plot in --out (for ablations)")
    ap.add_argument("--seed", type=int, default=0, help="initialisation, data order and validation split")
    ap.add_argument("--sample-seed", type=int, help="the order of training batches (default: --seed)")
    ap.add_argument("--init-from", help="start from this exported checkpoint instead of a fresh initialisation")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=980)
    ap.add_argument("--stop-after", type=int, help="end after this many steps, without export (the schedule stays "
                    "that of --steps): to check that a run reproduces the first steps of a log")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--qat-fraction", type=float, default=0.2, help="last part of training with MXFP4 experts")
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--val-rows", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-attn-res", action="store_true", help="ablation: a plain residual stream")
    ap.add_argument("--no-router-bias", action="store_true", help="ablation: no Quantile Balancing bias")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    ids, mask, offsets, tok_dir = prepare(args)
    # Subnormals flushed to zero while training (FTZ/DAZ): KDA's factorised chunk decays go down to exp(-80), so
    # products of them can fall below fp32's normal range, where x86 arithmetic takes a slow path; what is lost is
    # below 1e-38.
    torch.set_flush_denormal(True)
    model, tc, log_path = train(args, ids, mask, offsets)
    torch.set_flush_denormal(False)
    plot(log_path, os.path.join(args.out, args.name + "loss.png"))
    if args.export and args.stop_after is None:
        export(model, tc, tok_dir, args.export)
        log(f"exported to {args.export}")


if __name__ == "__main__":
    main()
