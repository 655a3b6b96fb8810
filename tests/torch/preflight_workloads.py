#!/usr/bin/env python3
"""The workloads of preflight_validation.py, each run in a fresh process (the child):

    preflight_workloads.py WORKLOAD --batch B --steps N [--record SNAPSHOT] [--fraction F]
                           --json OUT
    preflight_workloads.py probe --json OUT

Three training jobs of different shapes, whose sizes depend on the batch alone (fixed seeds,
random data drawn on the GPU from a seeded generator, the same steps at every batch):
- transformer: a decoder of 8 pre-norm blocks (d_model 1024, 16 heads, causal attention through
  scaled_dot_product_attention, MLP 4096) over sequences of 512 random feature vectors (an input
  projection, not a token embedding: an embedding's backward changes kernels at 3072 indices and
  sizes buffers by the distinct ids drawn), logits over 8192 classes, bf16 autocast, AdamW:
  activations dominate;
- cnn: a ResNet-34-like net written with nn.Conv2d and nn.BatchNorm2d on 224x224 images, fp32,
  1000 classes, SGD with momentum: convolutions (cuDNN's workspaces, chosen by shape);
- mlp_embedding: an nn.Embedding of 2M rows of 256 (dense gradients) looked up for 2048 distinct
  ids per sample (above the backward's 3072-index switch from batch 2 on), a per-token MLP (256-4096-4096-256), mean over tokens, 1000 classes, Adam: constants
  (parameters, gradients, Adam's state and its step's temporaries) dominate at small batches.

The child sets no allocator setting of its own: PYTORCH_CUDA_ALLOC_CONF is whatever its
environment holds (nothing, or the policy the harness runs). With --fraction it calls
torch.cuda.set_per_process_memory_fraction(F) before anything is allocated (the caching allocator
may then reserve at most floor(F * total) bytes; the CUDA context is not counted). With --record
it turns on the memory history before the model is built, and dumps the snapshot at the end.
An out-of-memory error (torch.OutOfMemoryError) is caught and reported ("oom": true), exit 0.
The result, one JSON object, goes to --json OUT ("-": stdout): max_memory_reserved,
max_memory_allocated, the losses, each step's seconds, the PYTORCH_CUDA_ALLOC_CONF it saw.
`probe` writes the device's name and memory as torch.cuda.mem_get_info() sees it.
"""
import argparse
import json
import os
import sys
import time

NAMES = ("transformer", "cnn", "mlp_embedding")
SEED = 1234
HISTORY_ENTRIES = 5_000_000


def transformer(torch, batch, device):
    nn, F = torch.nn, torch.nn.functional
    vocab, d, layers, heads, seq = 8192, 1024, 8, 16, 512

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.drop = nn.Dropout(0.1)

        def forward(self, x):
            b, t, _ = x.shape
            qkv = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, t, d)))
            return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(d, d)
            self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, feats):
            x = self.inp(feats) + self.pos
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    with torch.device(device):  # parameters made on the GPU, in the order built
        model = Decoder()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator(device=device)
    gen.manual_seed(SEED)

    def step():
        feats = torch.randn(batch, seq, d, device=device, generator=gen)
        ids = torch.randint(vocab, (batch, seq), device=device, generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(feats)
            loss = F.cross_entropy(logits.reshape(-1, vocab), ids.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def cnn(torch, batch, device):
    nn, F = torch.nn, torch.nn.functional

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.short = None
            if stride != 1 or cin != cout:
                self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                           nn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + (x if self.short is None else self.short(x)))

    class ResNet(nn.Module):
        def __init__(self, stages=((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)),
                     classes=1000):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                      nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
            blocks, cin = [], 64
            for cout, n, stride in stages:
                for i in range(n):
                    blocks.append(BasicBlock(cin, cout, stride if i == 0 else 1))
                    cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            x = self.blocks(self.stem(x))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    with torch.device(device):  # parameters made on the GPU, in the order built
        model = ResNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    gen = torch.Generator(device=device)
    gen.manual_seed(SEED)

    def step():
        x = torch.randn(batch, 3, 224, 224, device=device, generator=gen)
        y = torch.randint(1000, (batch,), device=device, generator=gen)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def mlp_embedding(torch, batch, device):
    nn, F = torch.nn, torch.nn.functional
    rows, dim, tokens, hidden, classes = 2_000_000, 256, 2048, 4096, 1000

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(rows, dim, sparse=False)
            self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, hidden),
                                     nn.GELU(), nn.Linear(hidden, dim))
            self.head = nn.Linear(dim, classes)

        def forward(self, ids):
            return self.head(self.mlp(self.emb(ids)).mean(1))

    with torch.device(device):  # parameters made on the GPU, in the order built
        model = Model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator(device=device)
    gen.manual_seed(SEED)

    def step():
        # Distinct ids: the embedding's backward sizes some buffers by the number of distinct
        # ids, which random draws would make depend on the data rather than on the batch.
        ids = torch.randperm(rows, device=device, generator=gen)[:batch * tokens]
        ids = ids.view(batch, tokens)
        y = torch.randint(classes, (batch,), device=device, generator=gen)
        loss = F.cross_entropy(model(ids), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


WORKLOADS = {"transformer": transformer, "cnn": cnn, "mlp_embedding": mlp_embedding}


def oom_type(torch):
    """torch.OutOfMemoryError (PyTorch 2.5+), else torch.cuda.OutOfMemoryError (the same class)."""
    return getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


def write(out: dict, path: str) -> None:
    text = json.dumps(out)
    if path == "-":
        print(text, flush=True)
        return
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def probe(args) -> int:
    import torch

    free, total = torch.cuda.mem_get_info(0)
    props = torch.cuda.get_device_properties(0)
    write({"mem_get_info_total": total, "free": free, "total_memory": props.total_memory,
           "name": props.name, "torch": torch.__version__, "cuda": torch.version.cuda,
           "python": sys.executable}, args.json)
    return 0


def child(args) -> int:
    import torch

    device = torch.device("cuda", 0)
    torch.cuda.init()
    out = {"workload": args.workload, "batch": args.batch, "steps": args.steps, "oom": False,
           "conf_seen": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), "fraction": args.fraction,
           "limit_bytes": None, "losses": [], "step_seconds": [], "torch": torch.__version__}
    if args.fraction is not None:  # before the first allocation
        total = torch.cuda.mem_get_info(device)[1]
        torch.cuda.set_per_process_memory_fraction(args.fraction, device)
        out["limit_bytes"] = int(args.fraction * float(total))  # what PyTorch allows, floored
        out["device_total"] = total
    if args.record:  # from the first allocation: the model is built below
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                 max_entries=HISTORY_ENTRIES)
    torch.manual_seed(SEED)
    t0 = time.perf_counter()
    try:
        step = WORKLOADS[args.workload](torch, args.batch, device)
        for _ in range(args.steps):
            s0 = time.perf_counter()
            loss = step()
            out["losses"].append(float(loss.item()))  # synchronizes
            out["step_seconds"].append(time.perf_counter() - s0)
            del loss
    except oom_type(torch) as e:
        out["oom"] = True
        out["message"] = str(e).splitlines()[0][:300]
        out["oom_at_step"] = len(out["losses"])
    torch.cuda.synchronize(device)
    out["seconds"] = time.perf_counter() - t0
    out["max_reserved"] = torch.cuda.max_memory_reserved(device)
    out["max_allocated"] = torch.cuda.max_memory_allocated(device)
    if args.record:
        torch.cuda.memory._dump_snapshot(args.record)
    write(out, args.json)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=NAMES + ("probe",))
    p.add_argument("--batch", type=int)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--record", help="dump a memory snapshot of the run here (pickle)")
    p.add_argument("--fraction", type=float,
                   help="torch.cuda.set_per_process_memory_fraction, before any allocation")
    p.add_argument("--json", required=True, help="the result's path, or - for stdout")
    args = p.parse_args()
    if args.workload == "probe":
        return probe(args)
    if not args.batch or args.batch < 1 or args.steps < 1:
        p.error("--batch B (B >= 1) and --steps N (N >= 1) are needed")
    if args.fraction is not None and not 0.0 < args.fraction <= 1.0:
        p.error("--fraction must be in (0, 1]")
    return child(args)


if __name__ == "__main__":
    sys.exit(main())
