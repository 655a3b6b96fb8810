#!/usr/bin/env python3
"""The workloads of advise_validation.py, each run in a fresh process (the child):

    advise_workloads.py --workload NAME --examples DIR [--limit BYTES] [--record SNAPSHOT]
    advise_workloads.py --probe

The child sets no allocator setting of its own: PYTORCH_CUDA_ALLOC_CONF is whatever its
environment holds (a printed line, run by bash before it). Only with --limit (the checks of the
bisected limits) does it call torch.cuda.set_per_process_memory_fraction. It prints one line
"RESULT {json}": whether it ran out of memory, max_memory_reserved, max_memory_allocated, the
workload's value (a loss or a sum, to compare runs) and the PYTORCH_CUDA_ALLOC_CONF it saw.
--probe prints the device's memory as torch.cuda.mem_get_info() sees it.

Each workload is deterministic in what it asks of the allocator (fixed seeds, sizes drawn from
seeded generators, and a host synchronisation wherever a free waits for another stream's event),
takes a few seconds on an H100, and has its own shape:
- transformer: a small GPT's training steps, the sequence length changing every step;
- kv_cache: inference whose KV cache grows a token at a time by concatenation;
- two_streams: an MLP's training steps with batches of changing size, each copied from pinned
  host memory on a side stream while the main stream computes the step before (record_stream);
- dataloader: a torch.utils.data.DataLoader (pin_memory=True) of variable-length sequences padded
  per batch, copied with non_blocking=True, into a small attention encoder.
"""
import argparse
import json
import os
import random
import sys
import time


def transformer(torch, args, device):
    sys.path.insert(0, args.examples)
    import tiny_transformer as tt

    p = argparse.ArgumentParser()
    tt.add_model_args(p, steps=10, layers=4, d_model=512, heads=8, vocab=8192, batch=8,
                      min_seq=64, max_seq=512)
    margs = p.parse_args([])
    model, opt = tt.build(margs, device)
    loss = None
    for _, _, x, y in tt.batches(margs):
        loss = tt.train_step(model, opt, x.to(device), y.to(device))
    return float(loss.item())


def kv_cache(torch, args, device):
    """Requests of random batch and prompt length; each generated token concatenates onto every
    layer's K and V (a new, slightly larger tensor each time), as a naive decoder does."""
    torch.manual_seed(7)
    rng = random.Random(7)
    layers, d_model, heads, vocab = 8, 1024, 16, 16384
    emb = torch.nn.Embedding(vocab, d_model).to(device, torch.float16)
    proj = [torch.nn.Linear(d_model, 3 * d_model).to(device, torch.float16) for _ in range(layers)]
    head = torch.nn.Linear(d_model, vocab).to(device, torch.float16)
    total = 0.0
    with torch.no_grad():
        for _ in range(6):
            b, t = rng.randint(1, 8), rng.randint(64, 512)
            x = emb(torch.randint(vocab, (b, t), device=device))
            ks, vs = [], []
            for layer in proj:
                q, k, v = layer(x).view(b, t, 3, heads, d_model // heads).unbind(2)
                ks.append(k)
                vs.append(v)
            h = x[:, -1:]
            for _ in range(48):
                for i, layer in enumerate(proj):
                    q, k, v = layer(h).view(b, 1, 3, heads, d_model // heads).unbind(2)
                    ks[i] = torch.cat([ks[i], k], dim=1)
                    vs[i] = torch.cat([vs[i], v], dim=1)
                    att = (q.transpose(1, 2) @ ks[i].permute(0, 2, 3, 1)).softmax(-1)
                    h = h + (att @ vs[i].transpose(1, 2)).transpose(1, 2).reshape(b, 1, d_model)
                h = emb(head(h).argmax(-1))
            total += float(h.float().mean().item())
            del ks, vs, x, h
    return total


def two_streams(torch, args, device):
    """Batches of changing size copied host-to-device on a side stream while the main stream
    trains on the batch before. A batch is allocated on the side stream and used on the main one:
    record_stream makes its free wait for the main stream's work, and the loss read each step
    synchronises the main stream, so that wait is over by the next allocation in every run."""
    torch.manual_seed(11)
    rng = random.Random(11)
    d_in, d_hidden, classes, steps = 4096, 4096, 1000, 16
    nn = torch.nn
    model = nn.Sequential(nn.Linear(d_in, d_hidden), nn.GELU(), nn.Linear(d_hidden, d_hidden),
                          nn.GELU(), nn.Linear(d_hidden, classes)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    gen = torch.Generator().manual_seed(11)
    host = []
    for _ in range(steps):
        b = rng.choice((256, 512, 768, 1024, 1536, 2048))
        host.append((torch.randn(b, d_in, generator=gen).pin_memory(),
                     torch.randint(classes, (b,), generator=gen).pin_memory()))
    main, side = torch.cuda.current_stream(device), torch.cuda.Stream(device)

    def load(i):
        with torch.cuda.stream(side):
            return (host[i][0].to(device, non_blocking=True),
                    host[i][1].to(device, non_blocking=True))

    nxt, total = load(0), 0.0
    for i in range(steps):
        main.wait_stream(side)  # the batch's copy is done before the step reads it
        x, y = nxt
        x.record_stream(main)
        y.record_stream(main)
        nxt = load(i + 1) if i + 1 < steps else None  # overlaps the step below
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del x, y
        total += float(loss.item())  # the main stream is idle: the batch's free completes
    return total


def dataloader(torch, args, device):
    """A DataLoader with pinned memory: sequences of 32 to 512 feature vectors, shuffled with a
    seeded generator, padded to the longest of each batch, copied with non_blocking=True, into
    two attention blocks (tiny_transformer.Block, no mask) and a mean over the real tokens."""
    sys.path.insert(0, args.examples)
    import tiny_transformer as tt

    nn, data = torch.nn, torch.utils.data
    d_in, d_model, heads, classes, n, batch = 64, 512, 8, 16, 384, 16
    rng = random.Random(23)
    lengths = [rng.randint(32, 512) for _ in range(n)]

    class Seqs(data.Dataset):
        def __len__(self):
            return n

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(1000 + i)
            return torch.randn(lengths[i], d_in, generator=g), i % classes

    def collate(items):
        t = max(x.shape[0] for x, _ in items)
        xs = torch.zeros(len(items), t, d_in)
        mask = torch.zeros(len(items), t)
        for k, (x, _) in enumerate(items):
            xs[k, :x.shape[0]] = x
            mask[k, :x.shape[0]] = 1
        return xs, mask, torch.tensor([c for _, c in items])

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(d_in, d_model)
            self.blocks = nn.ModuleList(tt.Block(d_model, heads) for _ in range(2))
            self.out = nn.Linear(d_model, classes)
            self.register_buffer("no_mask", torch.zeros(512, 512, dtype=torch.bool),
                                 persistent=False)

        def forward(self, x, mask):
            h = self.inp(x)
            for blk in self.blocks:
                h = blk(h, self.no_mask)
            h = (h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
            return self.out(h)

    torch.manual_seed(23)
    model = Encoder().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    loader = data.DataLoader(Seqs(), batch_size=batch, shuffle=True, num_workers=0,
                             pin_memory=True, collate_fn=collate,
                             generator=torch.Generator().manual_seed(23))
    total = 0.0
    for x, mask, y in loader:
        x = x.to(device, non_blocking=True)
        mask = mask.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(x, mask), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += float(loss.item())
    return total


WORKLOADS = {"transformer": transformer, "kv_cache": kv_cache, "two_streams": two_streams,
             "dataloader": dataloader}
NAMES = ("transformer", "kv_cache", "two_streams", "dataloader")


def probe() -> int:
    import torch

    free, total = torch.cuda.mem_get_info(0)
    props = torch.cuda.get_device_properties(0)
    print("RESULT " + json.dumps({"mem_get_info_total": total, "free": free,
                                  "total_memory": props.total_memory, "name": props.name,
                                  "torch": torch.__version__, "cuda": torch.version.cuda,
                                  "python": sys.executable}))
    return 0


def child(args) -> int:
    import torch

    device = torch.device("cuda", 0)
    torch.cuda.init()
    if args.limit:  # only for the checks of the bisected limits, never for a printed line
        total = torch.cuda.mem_get_info(device)[1]
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.limit / total), device)
    if args.record:
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                 max_entries=5_000_000)
    out = {"oom": False, "env_seen": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}
    t0 = time.perf_counter()
    try:
        out["value"] = WORKLOADS[args.workload](torch, args, device)
    except torch.OutOfMemoryError as e:
        out["oom"] = True
        out["message"] = str(e).splitlines()[0][:240]
    torch.cuda.synchronize(device)
    out["seconds"] = time.perf_counter() - t0
    out["max_reserved"] = torch.cuda.max_memory_reserved(device)
    out["max_allocated"] = torch.cuda.max_memory_allocated(device)
    if args.record:
        torch.cuda.memory._dump_snapshot(args.record)
    print("RESULT " + json.dumps(out))
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--probe", action="store_true")
    p.add_argument("--workload", choices=NAMES)
    p.add_argument("--examples")
    p.add_argument("--limit", type=int)
    p.add_argument("--record")
    args = p.parse_args()
    if args.probe:
        return probe()
    if not args.workload or not args.examples:
        p.error("--workload and --examples are needed")
    args.examples = os.path.abspath(args.examples)
    return child(args)


if __name__ == "__main__":
    sys.exit(main())
