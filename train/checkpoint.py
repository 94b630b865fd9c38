"""Reading and writing K3 checkpoints in the official layout, with numpy only.

safetensors: an 8-byte little-endian header length, a JSON header (dtype, shape, data_offsets per tensor,
`__metadata__ {"format": "pt"}`), then the tensor bytes. The trunk is stored as bf16 (round to nearest even), the
routed experts as compressed-tensors `mxfp4-pack-quantized` (E2M1 codes, column 2j in the low nibble, one E8M0
scale per 32 input columns), a few KDA tensors as f32: exactly what k3 reads from the real release.
"""
import json
import os
import struct

import numpy as np

_DTYPES = {"F32": np.float32, "I32": np.int32, "U8": np.uint8, "BF16": np.uint16}

# E2M1 magnitudes of codes 0..7; codes 8..15 are their negations.
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)


def bf16_round(x):
    """fp32 -> bf16 bit patterns (uint16), round to nearest even."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).astype(np.uint16)


def bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def mxfp4_encode(w):
    """[out, in] fp32 -> (packed U8 [out, in/2], scale U8 [out, in/32]); OCP MX rule.

    Shared exponent floor(log2(amax)) - 2 per group of 32 input columns, values rounded to the nearest E2M1 code
    (ties to the even code) and saturated at 6.
    """
    out, n = w.shape
    assert n % 32 == 0, "MXFP4 needs the input width to be a multiple of 32"
    g = w.reshape(out, n // 32, 32).astype(np.float32)
    amax = np.abs(g).max(axis=2)
    # floor(log2(amax)) exactly: frexp gives amax = m * 2^e with m in [0.5, 1).
    exp = np.where(amax > 0, np.frexp(amax)[1] - 1 - 2, -127).astype(np.int32)
    exp = np.clip(exp, -127, 127)
    scaled = g / np.exp2(exp)[..., None].astype(np.float32)
    mag = np.minimum(np.abs(scaled), 6.0)
    # The nearest E2M1 magnitude, ties to the even code: the grid steps by 0.5 below 2, by 1 up to 4, by 2 up to
    # 6, and np.round rounds halves to even, which lands on the even code in every range.
    q = np.where(mag < 2, np.round(mag * 2) / 2, np.where(mag < 4, np.round(mag), np.round(mag / 2) * 2))
    best = np.searchsorted(E2M1, q)
    codes = (best | np.where(scaled < 0, 8, 0)).astype(np.uint8).reshape(out, n)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return packed, (exp + 127).astype(np.uint8)


def mxfp4_decode(packed, scale):
    lo = packed & 0xF
    hi = packed >> 4
    codes = np.stack([lo, hi], axis=-1).reshape(packed.shape[0], -1)
    vals = E2M1[codes & 7] * np.where(codes >= 8, -1.0, 1.0).astype(np.float32)
    s = np.exp2(scale.astype(np.float32) - 127.0)
    return (vals.reshape(vals.shape[0], -1, 32) * s[..., None]).reshape(vals.shape[0], -1).astype(np.float32)


def write_safetensors(path, tensors):
    """tensors: name -> (dtype string, numpy array). Written aside, then renamed into place."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    blobs = []
    for name in sorted(tensors):
        dtype, arr = tensors[name]
        data = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".partial"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
    return offset


def read_safetensors(path):
    """name -> numpy array (BF16 comes back as uint16 bit patterns; see bf16_to_f32)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            a, b = info["data_offsets"]
            f.seek(base + a)
            out[name] = np.frombuffer(f.read(b - a), dtype=_DTYPES[info["dtype"]]).reshape(info["shape"])
        return out, header


def read_checkpoint(model_dir):
    """All weights of a checkpoint directory, dequantised to fp32, keyed by their official names."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else [
        "model.safetensors"]
    raw, dtypes = {}, {}
    for fname in files:
        tensors, header = read_safetensors(os.path.join(model_dir, fname))
        raw.update(tensors)
        dtypes.update({k: v["dtype"] for k, v in header.items() if k != "__metadata__"})
    out = {}
    for name, arr in raw.items():
        if name.endswith(".weight_scale"):
            continue
        if name.endswith(".weight_packed"):
            base = name[: -len(".weight_packed")]
            out[base + ".weight"] = mxfp4_decode(arr, raw[base + ".weight_scale"])
        elif dtypes[name] == "BF16":
            out[name] = bf16_to_f32(arr)
        else:
            out[name] = arr.astype(np.float32) if dtypes[name] == "F32" else arr
    return out
