#!/usr/bin/env python3
"""All-reduce time through torch's NCCL on this host's GPUs (issue 27's sizing): a tensor-parallel
layer all-reduces its o_proj and down_proj outputs, rows x hidden (dllm: fp32), twice per layer per step.

    python3 tools/bench_allreduce_torch.py [--world 2] [--hidden 4096] [--rows 4,32,128,512,1024,4096]
                                           [--dtypes bf16,fp32] [--graph]

Prints one table row per size (rank 0): microseconds per all-reduce (CUDA events over 200 calls
after 20 warm-up calls; with --graph the 200 calls are captured in one CUDA graph and replayed, so
the host's launch cost is out of the time, as in dllm's captured forwards) and the bus bandwidth, 2 (world - 1) / world x bytes / time (nccl-tests'
definition). NVLink multicast stays off (NCCL_NVLS_ENABLE=0), as on the shared machines.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def run(rank, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", NCCL_NVLS_ENABLE="0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=args.world)
    for dtype, rows in [(d, r) for d in args.dtypes for r in args.rows]:
        x = torch.randn(rows, args.hidden, device="cuda", dtype=DTYPES[dtype])
        for _ in range(20):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        calls = 200
        if args.graph:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(calls):
                    dist.all_reduce(x)
            graph.replay()
            torch.cuda.synchronize()
        start.record()
        if args.graph:
            graph.replay()
        else:
            for _ in range(calls):
                dist.all_reduce(x)
        stop.record()
        torch.cuda.synchronize()
        us = start.elapsed_time(stop) * 1e3 / calls
        nbytes = x.numel() * x.element_size()
        bus = 2 * (args.world - 1) / args.world * nbytes / (us * 1e-6) / 1e9
        if rank == 0:
            print(f"| {rows} x {args.hidden} {dtype} | {nbytes / 1e6:.3f} MB | {us:.1f} | {bus:.0f} |", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--rows", type=lambda s: [int(v) for v in s.split(",")],
                   default=[4, 32, 128, 512, 1024, 4096])
    p.add_argument("--dtypes", type=lambda s: s.split(","), default=["bf16"],
                   help="element types, comma-separated: bf16, fp32")
    p.add_argument("--graph", action="store_true",
                   help="time a captured CUDA graph of the calls (no host launch cost)")
    args = p.parse_args()
    for d in args.dtypes:
        if d not in DTYPES:
            p.error(f"--dtypes: {d!r} is not one of {', '.join(DTYPES)}")
    if torch.cuda.device_count() < args.world:
        raise SystemExit(f"--world {args.world}: this host has {torch.cuda.device_count()} GPUs")
    print(f"torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}, "
          f"{args.world} x {torch.cuda.get_device_name(0)}")
    print("| rows x hidden dtype | bytes | us per all-reduce | bus GB/s |\n|---|---|---|---|")
    mp.spawn(run, args=(args,), nprocs=args.world)


if __name__ == "__main__":
    main()
