"""Snapshots of a synthetic training job at a batch size, for the pre-flight page's browser test:
parameters (constant, live throughout), then per step a forward pass keeping activations whose
sizes are a + b * batch and a backward pass freeing them in reverse with a gradient each
(constant). The dict torch.cuda.memory._dump_snapshot pickles, with frames; standard library only.
"""
import pickle

MiB = 1 << 20


def job_snapshot(batch, steps=2, layers=12):
    trace = []
    next_block = [1]

    def alloc(size, site, line):
        addr = next_block[0] << 24
        next_block[0] += 1
        trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0,
                      "time_us": len(trace),
                      "frames": [{"filename": "model.py", "line": line, "name": site}]})
        return addr, size

    def free(block):
        addr, size = block
        trace.append({"action": "free_requested", "addr": addr, "size": size, "stream": 0,
                      "time_us": len(trace), "frames": []})

    for p in range(6):
        alloc(3 * MiB + p * 4096, "__init__", p)
    for _ in range(steps):
        acts = [alloc(1000 * layer + 70000 * batch * (layer % 3 + 1) + (512 if layer % 2 else 0),
                      "forward", 100 + layer) for layer in range(layers)]
        for layer in reversed(range(layers)):
            grad = alloc(256 * 1024 * (layer % 3 + 1), "backward", 200 + layer)
            free(acts[layer])
            free(grad)
    return {"segments": [], "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}}


def write_job(path, batch):
    with open(path, "wb") as f:
        pickle.dump(job_snapshot(batch), f, protocol=4)
