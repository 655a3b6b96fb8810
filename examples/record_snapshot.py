#!/usr/bin/env python3
"""Record a PyTorch memory snapshot of a small transformer's training, with PyTorch's own
allocator: the sequence length changes every step, so segments split, merge and grow.

    python examples/record_snapshot.py --out snapshot.pickle [--steps 12] [--gzip]

Recording starts after the model and optimizer exist, so the snapshot begins with live blocks
(weights) that its trace never saw allocated, as a real job's would. The file is what
torch.cuda.memory._dump_snapshot writes (a pickle, read by `python -m torch.cuda._memory_viz`
and https://pytorch.org/memory_viz); --gzip also writes PATH.gz. The defaults keep it small
(under 1 MiB gzip-compressed): no stack traces (context=None) and a bounded history.
"""
import argparse
import gzip
import os
import shutil
import sys


def main() -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tiny_transformer as tt
    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="snapshot pickle to write")
    p.add_argument("--max-entries", type=int, default=20000, help="history entries kept")
    p.add_argument("--gzip", action="store_true", help="also write OUT.gz")
    tt.add_model_args(p, steps=12, layers=2, d_model=256, heads=4, vocab=4096, batch=4,
                      min_seq=32, max_seq=256)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("record_snapshot: no CUDA device visible", file=sys.stderr)
        return 3
    device = torch.device("cuda", 0)
    model, opt = tt.build(args, device)
    torch.cuda.reset_peak_memory_stats(device)
    torch.cuda.memory._record_memory_history(enabled="all", context=None,
                                             max_entries=args.max_entries)
    losses = []
    for _, _, x, y in tt.batches(args):
        losses.append(tt.train_step(model, opt, x.to(device), y.to(device)).item())
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(args.out)
    torch.cuda.memory._record_memory_history(enabled=None)
    size = os.path.getsize(args.out)
    line = (f"record_snapshot: {args.out}: {size / 1024:.0f} KiB, {len(losses)} steps, "
            f"last loss {losses[-1]:.4f}; max_memory_reserved "
            f"{torch.cuda.max_memory_reserved(device)} B, max_memory_allocated "
            f"{torch.cuda.max_memory_allocated(device)} B")
    if args.gzip:
        with open(args.out, "rb") as src, gzip.open(args.out + ".gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        gz = os.path.getsize(args.out + ".gz")
        line += f"; {args.out}.gz: {gz / 1024:.0f} KiB"
        if gz > 1 << 20:
            line += " (over 1 MiB: use fewer --steps or a smaller --max-entries)"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
