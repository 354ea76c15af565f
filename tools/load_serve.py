"""A small load generator for `dllm serve`, for machines where aiperf cannot be installed (the GPU
machine reaches no package registry; its image has aiohttp): C clients send streamed
/v1/completions requests with prompts of ISL token ids and exactly OSL output tokens
(ignore_eos), and the same measures as tools/bench_serve.sh's aiperf table: output tokens/s over
the measured requests, TTFT (first chunk carrying committed tokens), inter-block latency (between
such chunks), inter-token latency ((e2e - TTFT) / (tokens - 1)) and request latency, p50 / p99.

    python3 tools/load_serve.py --url http://127.0.0.1:8000 --concurrency 1,8,32,128 \
        [--isl 128] [--osl 64] [--requests-per-client 4] [--extra '{"block_length": 4}']

Prints one markdown row per concurrency (header first) and writes --json if given."""
import argparse
import asyncio
import json
import random
import time

import aiohttp


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


async def one_request(session, url, body):
    """Streams one request; returns (ttft, [inter-block gaps], e2e, completion tokens)."""
    t0 = time.perf_counter()
    first, last, gaps, usage = None, None, [], 0
    async with session.post(url + "/v1/completions", json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {await resp.text()}")
        buffer = b""
        async for data in resp.content.iter_any():
            buffer += data
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                payload = event[len(b"data: "):]
                if payload == b"[DONE]":
                    continue
                chunk = json.loads(payload)
                if chunk.get("usage"):
                    usage = chunk["usage"]["completion_tokens"]
                if any(c.get("token_ids") for c in chunk.get("choices", [])):
                    now = time.perf_counter()
                    if first is None:
                        first = now
                    else:
                        gaps.append(now - last)
                    last = now
    end = time.perf_counter()
    return (first - t0 if first else float("nan")), gaps, end - t0, usage, t0, end


async def run_level(url, concurrency, n, args, rng):
    base = {"max_tokens": args.osl, "ignore_eos": True, "stream": True, "return_token_ids": True,
            "stream_options": {"include_usage": True}, **json.loads(args.extra)}
    if args.model:
        base["model"] = args.model

    def body():
        return {**base, "prompt": [rng.randrange(args.vocab) for _ in range(args.isl)]}

    timeout = aiohttp.ClientTimeout(total=None, sock_read=3600)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        await asyncio.gather(*(one_request(session, url, body()) for _ in range(concurrency)))
        queue = list(range(n))
        results = []

        async def client():
            while queue:
                queue.pop()
                results.append(await one_request(session, url, body()))

        await asyncio.gather(*(client() for _ in range(concurrency)))
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
    p.add_argument("--model", default="")
    p.add_argument("--concurrency", default="1,8,32,128")
    p.add_argument("--isl", type=int, default=128)
    p.add_argument("--osl", type=int, default=64)
    p.add_argument("--vocab", type=int, default=4000, help="prompt ids are drawn below this")
    p.add_argument("--requests-per-client", type=int, default=4)
    p.add_argument("--extra", default="{}", help="more request body keys, as JSON")
    p.add_argument("--json", default="")
    args = p.parse_args()
    rng = random.Random(1)
    rows = []
    print("| concurrency | requests | output tok/s | TTFT p50 / p99 ms | inter-block p50 / p99 ms "
          "| inter-token p50 / p99 ms | request p50 / p99 ms |")
    print("|---:|---:|---:|---|---|---|---|", flush=True)
    for c in [int(x) for x in args.concurrency.split(",")]:
        n = max(16, c * args.requests_per_client)
        r = asyncio.run(run_level(args.url, c, n, args, rng))
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
