"""Load test of `dllm serve` through the `openai` client from PyPI, for machines where aiperf
cannot be installed (the GPU machine reaches no package registry; scripts/make-gpu-pydeps.sh packs
the client and its few missing dependencies to travel there): C clients send streamed
/v1/completions requests with prompts of ISL token ids and exactly OSL output tokens
(ignore_eos), and the same measures as tools/bench_serve.sh's aiperf table: output tokens/s over
the measured requests, TTFT (first chunk carrying committed tokens), inter-block latency (between
such chunks), inter-token latency ((e2e - TTFT) / (tokens - 1)) and request latency, p50 / p99.
This file only schedules the clients and computes the percentiles; every request goes through
openai.AsyncOpenAI.

    python3 tools/load_serve.py --url http://127.0.0.1:8000 --concurrency 1,8,32,128 \
        [--isl 128] [--osl 64] [--requests-per-client 4] [--extra '{"block_length": 4}']

Prints one markdown row per concurrency (header first) and writes --json if given."""
import argparse
import asyncio
import json
import multiprocessing
import os
import random
import time

import openai


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


async def one_request(client, model, body):
    """Streams one request; returns (ttft, [inter-block gaps], e2e, completion tokens, start, end)."""
    t0 = time.perf_counter()
    first, last, gaps, usage = None, None, [], 0
    prompt, extra = body["prompt"], {k: v for k, v in body.items() if k != "prompt"}
    stream = await client.completions.create(
        model=model, prompt=prompt, max_tokens=extra.pop("max_tokens"), stream=True,
        stream_options={"include_usage": True}, extra_body=extra)
    async for chunk in stream:
        if chunk.usage:
            usage = chunk.usage.completion_tokens
        # One chunk per committed block; its token ids (return_token_ids) say it carries
        # tokens even when their text is empty (end-of-text filled by ignore_eos).
        if any(getattr(c, "token_ids", None) or c.text for c in chunk.choices):
            now = time.perf_counter()
            if first is None:
                first = now
            else:
                gaps.append(now - last)
            last = now
    end = time.perf_counter()
    return (first - t0 if first else float("nan")), gaps, end - t0, usage, t0, end


async def client_share(url, model, clients, n, args, seed, barrier):
    """One worker process's share: `clients` concurrent clients send `n` measured requests (after
    one warm-up request each, and a barrier across workers so the measured phase starts
    together); returns the raw per-request results."""
    rng = random.Random(seed)
    base = {"max_tokens": args.osl, "ignore_eos": True, "return_token_ids": True,
            **json.loads(args.extra)}

    def body():
        return {**base, "prompt": [rng.randrange(args.vocab) for _ in range(args.isl)]}

    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=args.api_key, timeout=3600,
                                max_retries=0)
    await asyncio.gather(*(one_request(client, model, body()) for _ in range(clients)))
    if barrier is not None:
        await asyncio.get_running_loop().run_in_executor(None, barrier.wait)
    queue = list(range(n))
    results = []

    async def one_client():
        while queue:
            queue.pop()
            results.append(await one_request(client, model, body()))

    await asyncio.gather(*(one_client() for _ in range(clients)))
    await client.close()
    return results


def worker_main(url, model, clients, n, args, seed, barrier, out_queue):
    out_queue.put(asyncio.run(client_share(url, model, clients, n, args, seed, barrier)))


def split(total, parts):
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


async def first_model(url, args):
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=args.api_key, max_retries=0)
    model = args.model or (await client.models.list()).data[0].id
    await client.close()
    return model


def run_level(url, concurrency, n, args, seed):
    """The clients run in `workers` processes: the openai client spends ~10-25 ms of CPU preparing
    each request with a 1K-id prompt, so one process with 128 clients sends its first request only
    after preparing all of them (seconds), and that would be measured as the server's time."""
    model = asyncio.run(first_model(url, args))
    workers = max(1, min(concurrency, args.workers or os.cpu_count() or 1))
    if workers == 1:
        results = asyncio.run(client_share(url, model, concurrency, n, args, seed, None))
    else:
        ctx = multiprocessing.get_context("spawn")
        barrier, out_queue = ctx.Barrier(workers), ctx.Queue()
        procs = [ctx.Process(target=worker_main,
                             args=(url, model, c, k, args, seed * 1000 + i, barrier, out_queue))
                 for i, (c, k) in enumerate(zip(split(concurrency, workers), split(n, workers)))]
        for proc in procs:
            proc.start()
        results = [r for _ in procs for r in out_queue.get()]
        for proc in procs:
            proc.join()
    ttft = [r[0] for r in results]
    gaps = [g for r in results for g in r[1]]
    e2e = [r[2] for r in results]
    tokens = sum(r[3] for r in results)
    itl = [(r[2] - r[0]) / (r[3] - 1) for r in results if r[3] > 1]
    wall = max(r[5] for r in results) - min(r[4] for r in results)
    ms = lambda xs: (percentile(xs, 0.5) * 1e3, percentile(xs, 0.99) * 1e3)
    return {"concurrency": concurrency, "requests": len(results), "output_tokens": tokens,
            "seconds": wall, "output_tokens_per_second": tokens / wall, "ttft_ms": ms(ttft),
            "inter_block_ms": ms(gaps), "inter_token_ms": ms(itl), "request_ms": ms(e2e)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--model", default="", help="default: the server's first model")
    p.add_argument("--api-key", default="none")
    p.add_argument("--concurrency", default="1,8,32,128")
    p.add_argument("--isl", type=int, default=128)
    p.add_argument("--osl", type=int, default=64)
    p.add_argument("--vocab", type=int, default=4000, help="prompt ids are drawn below this")
    p.add_argument("--requests-per-client", type=int, default=4)
    p.add_argument("--extra", default="{}", help="more request body keys, as JSON")
    p.add_argument("--workers", type=int, default=0,
                   help="client processes (default: min(concurrency, CPU count))")
    p.add_argument("--json", default="")
    args = p.parse_args()
    rng = random.Random(1)
    rows = []
    print("| concurrency | requests | output tok/s | TTFT p50 / p99 ms | inter-block p50 / p99 ms "
          "| inter-token p50 / p99 ms | request p50 / p99 ms |")
    print("|---:|---:|---:|---|---|---|---|", flush=True)
    for c in [int(x) for x in args.concurrency.split(",")]:
        n = max(16, c * args.requests_per_client)
        r = run_level(args.url, c, n, args, seed=rng.randrange(1 << 30))
        rows.append(r)
        f = lambda pair: f"{pair[0]:.1f} / {pair[1]:.1f}"
        print(f"| {c} | {r['requests']} | {r['output_tokens_per_second']:.1f} | {f(r['ttft_ms'])} "
              f"| {f(r['inter_block_ms'])} | {f(r['inter_token_ms'])} | {f(r['request_ms'])} |",
              flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
