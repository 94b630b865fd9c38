"""Checks the PyTorch K3 against the k3-tiny-a golden logits (an independent fp32 reference of the released
modeling code), the chunked KDA against the per-token recurrence, and the quantisation-aware MXFP4 rounding
against the exporter's encoding. Exit status 0 when all hold.

    /usr/bin/python3 train/check_fixture.py [FIXTURE_DIR]
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint  # noqa: E402
import k3model  # noqa: E402


def check_chunked_kda():
    gen = torch.Generator().manual_seed(1)
    worst = 0.0
    for t in (1, 5, 16, 37, 64):
        q, k = (torch.nn.functional.normalize(torch.randn(2, 3, t, 8, generator=gen), dim=-1) for _ in range(2))
        v = torch.randn(2, 3, t, 6, generator=gen)
        g = -5 * torch.rand(2, 3, t, 8, generator=gen)  # the bounded gate's whole range, floor included
        beta = torch.rand(2, 3, t, generator=gen)
        ref = k3model.kda_recurrent(q.double(), k.double(), v.double(), g.double(), beta.double())
        got = k3model.kda_chunked(q, k, v, g, beta)
        worst = max(worst, ((got.double() - ref).abs().max() / ref.abs().max()).item())
    print(f"chunked KDA vs per-token recurrence: max rel diff {worst:.2e}")
    return worst < 1e-5


def check_mxfp4_export():
    """The quantisation-aware forward rounds expert weights exactly as the export encodes them, and both follow
    the OCP rule on exact ties (to the even code) and on an amax just below a power of two."""
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(24, 96, generator=gen) * torch.exp(torch.randn(24, 1, generator=gen))
    w[0, :32] = 0  # an all-zero group
    ties = torch.tensor([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -5.0])  # amax 6: scale 2^0
    w[1, :32] = 0
    w[1, :10] = ties
    w[2, :32] = 0.25
    w[2, 0] = float(np.nextafter(np.float32(1.0), np.float32(0.0)))  # amax just below 1: scale 2^-3, not 2^-2
    fake = k3model.fake_mxfp4(w).numpy()
    packed, scale = checkpoint.mxfp4_encode(w.numpy())
    exported = checkpoint.mxfp4_decode(packed, scale)
    want_ties = np.array([6.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -0.0, -4.0], dtype=np.float32)
    ok = (np.array_equal(fake, exported) and np.array_equal(exported[1, :10], want_ties) and scale[2, 0] == 127 - 3
          and exported[2, 0] == 0.75 and exported[2, 1] == 0.25)  # 0.99999994 / 2^-3 saturates at 6
    print(f"MXFP4: quantisation-aware forward equals export, OCP ties and exponents: {ok}")
    return ok


def check_golden(fixture):
    cfg = k3model.Config(json.load(open(os.path.join(fixture, "config.json")))["text_config"])
    model = k3model.K3(cfg).eval()
    k3model.load_official(model, checkpoint.read_checkpoint(fixture))
    golden, _ = checkpoint.read_safetensors(os.path.join(fixture, "golden.safetensors"))
    ok = True
    for i in range(len(json.load(open(os.path.join(fixture, "golden.json")))["prompts"])):
        ids = torch.from_numpy(golden[f"p{i}.prompt_ids"].astype(np.int64))
        gen = torch.from_numpy(golden[f"p{i}.gen_tokens"].astype(np.int64))
        with torch.no_grad():  # teacher-forced prompt + continuation in one pass: rows T-1.. predict gen
            logits = model(torch.cat([ids, gen[:-1]])[None])[0].numpy()
        want = np.concatenate([golden[f"p{i}.prefill_logits"], golden[f"p{i}.decode_logits"][:-1]])
        rel = np.abs(logits - want).max() / np.abs(want).max()
        greedy = (logits[len(ids) - 1:].argmax(-1) == gen.numpy()).all()
        print(f"p{i}: max rel diff {rel:.2e} (tolerance 5e-4), greedy tokens equal: {greedy}")
        ok &= rel <= 5e-4 and greedy
    return ok


if __name__ == "__main__":
    torch.set_num_threads(os.cpu_count() or 1)
    here = os.path.dirname(os.path.abspath(__file__))
    fixture = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "tests", "data", "fixtures", "k3-tiny-a")
    sys.exit(0 if check_chunked_kda() & check_mxfp4_export() & check_golden(fixture) else 1)
