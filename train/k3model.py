"""Kimi K3's text model in PyTorch, written from the specification, for training small K3s.

One forward over whole sequences (training and scoring), all in fp32:
  Block Attention Residuals around every sublayer; Kimi Delta Attention (bounded forget gate, short convs, full-rank
  output gate) or gated NoPE MLA; a dense SiTU MLP in layer 0, Stable LatentMoE (sigmoid router with a selection
  bias, SiTU-GLU experts in a latent width, RMSNorm on the combined latent, shared experts) after it.
Parameter names are the checkpoint's names without the `language_model.model.` prefix; the routed experts of a
layer are stacked ([E, out, in]) and split per expert on export. It is an implementation independent of k3's C++
one: the tests compare the two on the trained checkpoint.
"""
import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

KDA_CHUNK = 16  # tokens per chunk: with the gate bounded at -5 per token, exp(+-cumsum) stays inside fp32


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def situ(g, u, beta1, beta2):
    """SiTU-GLU: [beta1 tanh(g/beta1) sigmoid(g)] * [beta2 tanh(u/beta2)]; the sigmoid takes the raw gate."""
    return beta1 * torch.tanh(g / beta1) * torch.sigmoid(g) * (beta2 * torch.tanh(u / beta2))


class Config:
    """The text_config fields the model reads, with the layer schedule from linear_attn_config (1-based lists)."""

    def __init__(self, text_config):
        c = text_config
        lin = c["linear_attn_config"]
        self.vocab = c["vocab_size"]
        self.d = c["hidden_size"]
        self.layers = c["num_hidden_layers"]
        self.eps = c["rms_norm_eps"]
        self.kda_layers = {i - 1 for i in lin["kda_layers"]}
        self.kda_heads = lin["num_heads"]
        self.kda_dim = lin["head_dim"]
        self.conv = lin["short_conv_kernel_size"]
        self.lower_bound = lin["gate_lower_bound"]
        self.mla_heads = c["num_attention_heads"]
        self.q_lora = c["q_lora_rank"]
        self.kv_lora = c["kv_lora_rank"]
        self.nope = c["qk_nope_head_dim"]
        self.rope = c["qk_rope_head_dim"]
        self.v_dim = c["v_head_dim"]
        self.dense = c["intermediate_size"]
        self.first_dense = c["first_k_dense_replace"]
        self.experts = c["num_experts"]
        self.top_k = c["num_experts_per_token"]
        self.shared = c["num_shared_experts"]
        self.moe_inter = c["moe_intermediate_size"]
        self.latent = c["routed_expert_hidden_size"]
        self.scaling = c["routed_scaling_factor"]
        self.beta1 = c["activation_situ_beta"]
        self.beta2 = c["activation_situ_linear_beta"]
        self.block = c["attn_res_block_size"]


def linear(out_f, in_f):
    return nn.Linear(in_f, out_f, bias=False)


class AttnRes(nn.Module):
    """Depth attention over the block bank and the current partial sum (spec: attnres-moe.md 1.6)."""

    def __init__(self, d, eps):
        super().__init__()
        self.norm = nn.Parameter(torch.ones(d))
        self.proj = nn.Parameter(torch.zeros(1, d))
        self.eps = eps

    def forward(self, sources):
        v = torch.stack(sources)  # [S, B, T, d]
        keys = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + self.eps)
        scores = (keys * (self.norm * self.proj[0])).sum(-1)
        return (torch.softmax(scores, dim=0).unsqueeze(-1) * v).sum(0)


class KDA(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, k, d = cfg.kda_heads, cfg.kda_dim, cfg.d
        p = h * k
        self.h, self.k, self.cfg = h, k, cfg
        self.q_proj, self.k_proj, self.v_proj, self.g_proj = (linear(p, d) for _ in range(4))
        self.o_proj = linear(d, p)
        self.f_a_proj = linear(k, d)
        self.f_b_proj = linear(p, k)
        self.b_proj = linear(h, d)
        self.q_conv1d, self.k_conv1d, self.v_conv1d = (nn.Parameter(torch.zeros(p, 1, cfg.conv)) for _ in range(3))
        self.A_log = nn.Parameter(torch.zeros(k))  # stored [head_dim]; only the first `heads` entries are live
        self.dt_bias = nn.Parameter(torch.zeros(p))
        self.o_norm = nn.Parameter(torch.ones(k))

    def short_conv(self, x, weight):  # x [B, T, P]: causal depthwise conv, tap W-1 on the current token, then SiLU
        w = weight.shape[-1]
        y = F.conv1d(F.pad(x.transpose(1, 2), (w - 1, 0)), weight, groups=x.shape[-1])
        return F.silu(y).transpose(1, 2)

    def forward(self, x):
        b, t, _ = x.shape
        h, k = self.h, self.k
        q = self.short_conv(self.q_proj(x), self.q_conv1d).view(b, t, h, k)
        kk = self.short_conv(self.k_proj(x), self.k_conv1d).view(b, t, h, k)
        v = self.short_conv(self.v_proj(x), self.v_conv1d).view(b, t, h, k)
        f = self.f_b_proj(self.f_a_proj(x)).view(b, t, h, k)
        a = torch.exp(self.A_log[:h]).view(1, 1, h, 1)
        g = self.cfg.lower_bound * torch.sigmoid(a * (f + self.dt_bias.view(h, k)))
        beta = torch.sigmoid(self.b_proj(x))  # [B, T, H]
        q = q / torch.sqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) * k ** -0.5
        kk = kk / torch.sqrt(kk.pow(2).sum(-1, keepdim=True) + 1e-6)
        o = kda_chunked(*(z.transpose(1, 2) for z in (q, kk, v, g)), beta.transpose(1, 2)).transpose(1, 2)
        o = rms_norm(o, self.o_norm, self.cfg.eps) * torch.sigmoid(self.g_proj(x)).view(b, t, h, k)
        return self.o_proj(o.reshape(b, t, h * k))


def kda_recurrent(q, k, v, g, beta):
    """The per-token delta rule (the golden definition; [B, H, T, K] inputs): decay, error, write, read."""
    b, h, t, dk = q.shape
    s = q.new_zeros(b, h, dk, v.shape[-1])
    out = []
    for i in range(t):
        s = s * torch.exp(g[:, :, i]).unsqueeze(-1)
        err = (v[:, :, i] - torch.einsum("bhkv,bhk->bhv", s, k[:, :, i])) * beta[:, :, i, None]
        s = s + k[:, :, i, :, None] * err[:, :, None, :]
        out.append(torch.einsum("bhkv,bhk->bhv", s, q[:, :, i]))
    return torch.stack(out, dim=2)


def kda_chunked(q, k, v, g, beta, chunk=KDA_CHUNK):
    """The same delta rule in chunks (WY / UT form, spec kda.md 3.5); [B, H, T, K] inputs.

    Within a chunk the pairwise decays exp(G_r - G_s) factor into exp(G_r) * exp(-G_s): with g >= -5 per token and
    16 tokens, |G| <= 80 keeps both factors finite in fp32.
    """
    b, h, t, dk = q.shape
    dv = v.shape[-1]
    pad = -t % chunk
    if pad:
        q, k, v, g = (F.pad(z, (0, 0, 0, pad)) for z in (q, k, v, g))
        beta = F.pad(beta, (0, pad))
    n = (t + pad) // chunk
    q, k, v, g = (z.reshape(b, h, n, chunk, z.shape[-1]) for z in (q, k, v, g))
    beta = beta.reshape(b, h, n, chunk)
    cum = g.cumsum(-2)
    kd, ki, qd = k * torch.exp(cum), k * torch.exp(-cum), q * torch.exp(cum)
    strict = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril(-1)
    lower = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    ell = (kd @ ki.transpose(-1, -2)) * beta.unsqueeze(-1) * strict
    aqk = (qd @ ki.transpose(-1, -2)) * lower
    eye = torch.eye(chunk, device=q.device).expand_as(ell)
    tmat = torch.linalg.solve_triangular(eye + ell, torch.diag_embed(beta), upper=False, unitriangular=True)
    w, u = tmat @ kd, tmat @ v
    kg = k * torch.exp(cum[..., -1:, :] - cum)
    decay = torch.exp(cum[..., -1, :]).unsqueeze(-1)  # [B, H, N, K, 1]: a whole chunk's decay of the state
    s = q.new_zeros(b, h, dk, dv)
    outs = []
    # Split along the chunk axis once: indexing chunk by chunk would make autograd allocate and sum a full-size
    # gradient for every index.
    for u_c, w_c, qd_c, aqk_c, kg_c, decay_c in zip(*(z.unbind(2) for z in (u, w, qd, aqk, kg, decay))):
        vn = u_c - w_c @ s
        outs.append(qd_c @ s + aqk_c @ vn)
        s = decay_c * s + kg_c.transpose(-1, -2) @ vn
    return torch.stack(outs, dim=2).reshape(b, h, n * chunk, dv)[:, :, :t]


class MLA(nn.Module):
    """Gated NoPE multi-head latent attention: nothing rotated, scale (nope+rope)^-0.5, q_a/kv_a norms eps 1e-6."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d, h = cfg.d, cfg.mla_heads
        self.q_a_proj = linear(cfg.q_lora, d)
        self.q_a_layernorm = nn.Parameter(torch.ones(cfg.q_lora))
        self.q_b_proj = linear(h * (cfg.nope + cfg.rope), cfg.q_lora)
        self.kv_a_proj_with_mqa = linear(cfg.kv_lora + cfg.rope, d)
        self.kv_a_layernorm = nn.Parameter(torch.ones(cfg.kv_lora))
        self.kv_b_proj = linear(h * (cfg.nope + cfg.v_dim), cfg.kv_lora)
        self.g_proj = linear(h * cfg.v_dim, d)
        self.o_proj = linear(d, h * cfg.v_dim)

    def forward(self, x):
        c = self.cfg
        b, t, _ = x.shape
        h = c.mla_heads
        q = self.q_b_proj(rms_norm(self.q_a_proj(x), self.q_a_layernorm, 1e-6)).view(b, t, h, c.nope + c.rope)
        ckv, k_rope = self.kv_a_proj_with_mqa(x).split([c.kv_lora, c.rope], dim=-1)
        kv = self.kv_b_proj(rms_norm(ckv, self.kv_a_layernorm, 1e-6)).view(b, t, h, c.nope + c.v_dim)
        k_nope, v = kv.split([c.nope, c.v_dim], dim=-1)
        key = torch.cat([k_nope, k_rope.unsqueeze(2).expand(b, t, h, c.rope)], dim=-1)
        scores = torch.einsum("bthd,bshd->bhts", q, key) * (c.nope + c.rope) ** -0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        p = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        o = torch.einsum("bhts,bshd->bthd", p, v).reshape(b, t, h * c.v_dim)
        return self.o_proj(o * torch.sigmoid(self.g_proj(x)))


class MLP(nn.Module):
    def __init__(self, cfg, width):
        super().__init__()
        self.cfg = cfg
        self.gate_proj, self.up_proj = linear(width, cfg.d), linear(width, cfg.d)
        self.down_proj = linear(cfg.d, width)

    def forward(self, x):
        return self.down_proj(situ(self.gate_proj(x), self.up_proj(x), self.cfg.beta1, self.cfg.beta2))


def fake_mxfp4(w):
    """Weights rounded to MXFP4 in the forward pass, straight-through in the backward (quantisation-aware)."""
    out_f, in_f = w.shape[-2:]
    g = w.reshape(*w.shape[:-1], in_f // 32, 32)
    amax = g.detach().abs().amax(-1, keepdim=True).clamp_min(1e-30)
    scale = torch.exp2((torch.frexp(amax).exponent - 1 - 2).float())  # 2^(floor(log2 amax) - 2), exactly
    x = (g / scale).clamp(-6, 6)
    mag = x.abs()
    # E2M1 grid: steps of 0.5 below 2, of 1 from 2 to 4, of 2 from 4 to 6 (round half to even code).
    q = torch.where(mag < 2, torch.round(mag * 2) / 2, torch.where(mag < 4, torch.round(mag), torch.round(mag / 2) * 2))
    q = q * torch.sign(x) * scale
    return (g + (q - g).detach()).reshape(w.shape)


class MoE(nn.Module):
    """Stable LatentMoE: router and shared experts on the full width, routed SiTU-GLU experts in the latent."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        e, lat, inter = cfg.experts, cfg.latent, cfg.moe_inter
        self.gate = linear(e, cfg.d)
        self.register_buffer("e_score_correction_bias", torch.zeros(e))
        self.routed_expert_down_proj = linear(lat, cfg.d)
        self.routed_expert_up_proj = linear(cfg.d, lat)
        self.routed_expert_norm = nn.Parameter(torch.ones(lat))
        self.w1 = nn.Parameter(torch.zeros(e, inter, lat))  # stacked routed experts, [E, out, in]
        self.w3 = nn.Parameter(torch.zeros(e, inter, lat))
        self.w2 = nn.Parameter(torch.zeros(e, lat, inter))
        self.shared_experts = MLP(cfg, inter * cfg.shared)
        self.qat = False
        self.balance = True  # Quantile Balancing of the selection bias while training
        self.last_scores = None

    def forward(self, x):
        c = self.cfg
        shape = x.shape
        x = x.reshape(-1, c.d)
        scores = torch.sigmoid(self.gate(x))
        chosen = (scores + self.e_score_correction_bias).topk(c.top_k, dim=-1).indices
        weights = scores.gather(-1, chosen)
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20) * c.scaling
        if self.training:  # for Quantile Balancing
            self.last_scores = scores.detach()
        z = self.routed_expert_down_proj(x)
        w1, w2, w3 = (fake_mxfp4(w) if self.qat else w for w in (self.w1, self.w2, self.w3))
        # Token slots grouped by expert: one gather before the experts and one scatter-add after them.
        flat = chosen.reshape(-1)
        order = flat.argsort(stable=True)
        counts = torch.bincount(flat, minlength=c.experts).tolist()
        rows = order // c.top_k
        outs = []
        for e, ze in enumerate(z[rows].split(counts)):
            if counts[e]:
                outs.append(situ(ze @ w1[e].t(), ze @ w3[e].t(), c.beta1, c.beta2) @ w2[e].t())
        y = torch.cat(outs) * weights.reshape(-1)[order].unsqueeze(-1)
        combined = torch.zeros_like(z).index_add(0, rows, y)
        out = self.routed_expert_up_proj(rms_norm(combined, self.routed_expert_norm, c.eps))
        return (out + self.shared_experts(x)).reshape(shape)

    @torch.no_grad()
    def quantile_balance(self):
        """Quantile Balancing (spec attnres-moe.md 2.3): each expert's bias becomes the (k/n)-quantile of the bias
        it would need to admit each token, so the last batch would have given every expert k*T/n tokens."""
        if self.last_scores is None:
            return
        s, c = self.last_scores, self.cfg
        cutoff = (s + self.e_score_correction_bias).topk(c.top_k + 1, dim=-1).values[:, -1:]
        need = cutoff - s  # [T, E]
        b = torch.quantile(need, c.top_k / c.experts, dim=0)
        self.e_score_correction_bias.copy_(b - b.mean())
        self.last_scores = None


class Layer(nn.Module):
    def __init__(self, cfg, idx):
        super().__init__()
        self.idx = idx
        self.is_kda = idx in cfg.kda_layers
        self.self_attn = KDA(cfg) if self.is_kda else MLA(cfg)
        if idx < cfg.first_dense:
            self.mlp = MLP(cfg, cfg.dense)
        else:
            self.block_sparse_moe = MoE(cfg)
        self.input_layernorm = nn.Parameter(torch.ones(cfg.d))
        self.post_attention_layernorm = nn.Parameter(torch.ones(cfg.d))
        self.attn_res = AttnRes(cfg.d, cfg.eps)
        self.mlp_res = AttnRes(cfg.d, cfg.eps)

    def ffn(self, x):
        return self.mlp(x) if hasattr(self, "mlp") else self.block_sparse_moe(x)


class K3(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.d)
        self.layers = nn.ModuleList(Layer(cfg, i) for i in range(cfg.layers))
        self.norm = nn.Parameter(torch.ones(cfg.d))
        self.output_res = AttnRes(cfg.d, cfg.eps)
        self.lm_head = linear(cfg.vocab, cfg.d)
        self.attn_res_enabled = True  # off: a plain residual stream (for the ablation)

    def forward(self, ids):
        c = self.cfg
        prefix = self.embed_tokens(ids)
        bank = []
        for layer in self.layers:
            if self.attn_res_enabled:
                x = layer.attn_res(bank + [prefix])
                if layer.idx % c.block == 0:  # a block opens: bank the finished partial sum, restart the sum
                    bank.append(prefix)
                    prefix = None
            else:
                x = prefix
            a = layer.self_attn(rms_norm(x, layer.input_layernorm, c.eps))
            prefix = a if prefix is None else prefix + a
            x = layer.mlp_res(bank + [prefix]) if self.attn_res_enabled else prefix
            prefix = prefix + layer.ffn(rms_norm(x, layer.post_attention_layernorm, c.eps))
        h = self.output_res(bank + [prefix]) if self.attn_res_enabled else prefix
        return self.lm_head(rms_norm(h, self.norm, c.eps))

    def moe_layers(self):
        return [l.block_sparse_moe for l in self.layers if hasattr(l, "block_sparse_moe")]


def init_weights(model, seed):
    """Small-model initialisation: normal(0, 0.02) projections and experts, the attention output projections
    scaled down by depth, KDA forget gates spread between fast and slow decay (dt_bias) with A_log 0 (exp 1), and
    short convs that start close to passing the current token through."""
    gen = torch.Generator().manual_seed(seed)
    cfg = model.cfg
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".weight") and p.dim() == 2:  # projections and the embedding
                p.normal_(0, 0.02, generator=gen)
        for layer in model.layers:
            if layer.is_kda:
                a = layer.self_attn
                a.dt_bias.copy_(torch.linspace(-4.0, 1.0, a.dt_bias.numel())[torch.randperm(a.dt_bias.numel(),
                                                                                           generator=gen)])
                a.A_log.zero_()
                for conv in (a.q_conv1d, a.k_conv1d, a.v_conv1d):
                    conv.normal_(0, 0.3, generator=gen)
                    conv[:, 0, -1] += 1.0
            layer.self_attn.o_proj.weight.mul_(1 / math.sqrt(2 * cfg.layers))
        for moe in model.moe_layers():
            for w in (moe.w1, moe.w3, moe.w2):
                w.normal_(0, 0.02, generator=gen)


# Official tensor names (under `language_model.`) <-> this module's parameter names.
_RENAMES = [
    (r"^layers\.(\d+)\.attn_res\.(norm|proj)$", r"model.layers.\1.self_attention_res_\2.weight"),
    (r"^layers\.(\d+)\.mlp_res\.(norm|proj)$", r"model.layers.\1.mlp_res_\2.weight"),
    (r"^output_res\.(norm|proj)$", r"model.output_attn_res_\1.weight"),
    (r"^layers\.(\d+)\.block_sparse_moe\.e_score_correction_bias$",
     r"model.layers.\1.block_sparse_moe.gate.e_score_correction_bias"),
    (r"^(.*\.self_attn\.(A_log|dt_bias))$", r"model.\1"),
    (r"^lm_head\.weight$", r"lm_head.weight"),
    (r"^(.*)\.weight$", r"model.\1.weight"),
    (r"^(.*)$", r"model.\1.weight"),  # bare gains and conv weights
]


def official_name(name):
    for pattern, repl in _RENAMES:
        if re.match(pattern, name):
            return "language_model." + re.sub(pattern, repl, name)
    raise KeyError(name)


def to_official(model):
    """name -> fp32 numpy array, experts split per expert as in the checkpoint."""
    out = {}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        m = re.match(r"^(layers\.\d+\.block_sparse_moe)\.(w[123])$", name)
        if m:
            for e in range(t.shape[0]):
                out[f"language_model.model.{m.group(1)}.experts.{e}.{m.group(2)}.weight"] = t[e].detach().numpy()
        else:
            out[official_name(name)] = t.detach().float().numpy()
    return out


def load_official(model, tensors):
    """Fill the model from a name -> fp32 array dict (see checkpoint.read_checkpoint); every tensor must be used."""
    used = set()
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            m = re.match(r"^(layers\.\d+\.block_sparse_moe)\.(w[123])$", name)
            if m:
                for e in range(t.shape[0]):
                    key = f"language_model.model.{m.group(1)}.experts.{e}.{m.group(2)}.weight"
                    t[e].copy_(torch.from_numpy(tensors[key]))
                    used.add(key)
            else:
                key = official_name(name)
                t.copy_(torch.from_numpy(tensors[key].reshape(t.shape)))
                used.add(key)
    extra = sorted(set(tensors) - used)
    if extra:
        raise ValueError(f"unused tensors in the checkpoint: {extra[:5]}")
