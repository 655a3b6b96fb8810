"""A small decoder-only transformer and its data, shared by the PyTorch examples.

Only deterministic operations (attention written out, no fused SDPA kernel) so that two runs with
torch.use_deterministic_algorithms(True) give bit-identical losses whatever allocator hands out
the memory. Random token data from fixed seeds, with a sequence length that changes every step:
that is what makes a caching allocator split, merge and grow its segments.
"""
import math
import random

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, h, c // h).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // h))
        att = att.masked_fill(causal[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, max_seq: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.register_buffer(
            "causal", torch.ones(max_seq, max_seq, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x, self.causal)
        return self.head(self.ln(x))


def add_model_args(p, steps=40, layers=4, d_model=384, heads=6, vocab=8192, batch=8,
                   min_seq=64, max_seq=512):
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--layers", type=int, default=layers)
    p.add_argument("--d-model", type=int, default=d_model)
    p.add_argument("--heads", type=int, default=heads)
    p.add_argument("--vocab", type=int, default=vocab)
    p.add_argument("--batch", type=int, default=batch)
    p.add_argument("--min-seq", type=int, default=min_seq)
    p.add_argument("--max-seq", type=int, default=max_seq)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--autocast", choices=["off", "bf16"], default="off",
                   help="run forward and loss under torch.autocast(dtype=bfloat16)")


def model_config(args) -> dict:
    return {k: getattr(args, k) for k in
            ("steps", "layers", "d_model", "heads", "vocab", "batch", "min_seq", "max_seq", "seed",
             "autocast")}


def build(args, device):
    """The model (initialised on the CPU from the seed, then moved) and its AdamW optimizer."""
    torch.manual_seed(args.seed)
    model = TinyGPT(args.vocab, args.d_model, args.heads, args.layers, args.max_seq).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
    return model, opt


def batches(args):
    """(step, sequence length, inputs, targets) on the CPU, the same for every run of a seed."""
    rng = random.Random(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    for step in range(args.steps):
        t = rng.randint(args.min_seq, args.max_seq)
        tokens = torch.randint(args.vocab, (args.batch, t + 1), generator=gen)
        yield step, t, tokens[:, :-1], tokens[:, 1:]


def train_step(model, opt, x, y, autocast: str = "off") -> torch.Tensor:
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast == "bf16"):
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()
