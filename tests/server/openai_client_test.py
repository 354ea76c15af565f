"""`dllm serve` through the official `openai` Python client (what users point at it): chat and
completions, streamed and whole, stop strings, usage, n, the errors the client raises for each
status, the README's example verbatim, and equality with `dllm generate` run alone.

Run by ctest (tests/server/run_openai_client_test.sh) as:
    python openai_client_test.py DLLM_BINARY
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import unittest

import openai

DLLM = sys.argv.pop(1) if len(sys.argv) > 1 else "build/dllm"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Server:
    """A `dllm serve --port 0` process with the embedded default model."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([DLLM, "serve", "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError("dllm serve did not start: " + line)
        self.port = int(m.group(1))
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def client(self, api_key="unused", **kw):
        return openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0, **kw)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        status = self.proc.wait(timeout=60)
        self.proc.stdout.close()
        return status


class OpenAiClient(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.client = cls.server.client()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def test_models(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], ["tiny-block"])

    def test_chat_whole_and_streamed(self):
        messages = [{"role": "user", "content": "What is 12+30?"}]
        whole = self.client.chat.completions.create(model="tiny-block", messages=messages,
                                                    max_tokens=16)
        text = whole.choices[0].message.content
        self.assertIn(whole.choices[0].finish_reason, ("stop", "length"))
        self.assertGreater(whole.usage.completion_tokens, 0)
        self.assertEqual(whole.usage.total_tokens,
                         whole.usage.prompt_tokens + whole.usage.completion_tokens)
        chunks = list(self.client.chat.completions.create(
            model="tiny-block", messages=messages, max_tokens=16, stream=True,
            stream_options={"include_usage": True}))
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(streamed, text)
        self.assertEqual(chunks[-1].usage.completion_tokens, whole.usage.completion_tokens)
        self.assertEqual([c.choices[0].finish_reason for c in chunks if c.choices][-1],
                         whole.choices[0].finish_reason)

    def test_completion_stop_and_n(self):
        free = self.client.completions.create(model="tiny-block", prompt="Q: 305+196? A:",
                                              max_tokens=24, extra_body={"ignore_eos": True})
        text = free.choices[0].text
        stop = text[len(text) // 2:len(text) // 2 + 2]
        cut = self.client.completions.create(model="tiny-block", prompt="Q: 305+196? A:",
                                             max_tokens=24, stop=[stop], n=2,
                                             extra_body={"ignore_eos": True})
        self.assertEqual(len(cut.choices), 2)
        for c in cut.choices:
            self.assertEqual(c.text, text[:text.find(stop)])
            self.assertEqual(c.finish_reason, "stop")
        streamed = "".join(c.choices[0].text for c in self.client.completions.create(
            model="tiny-block", prompt="Q: 305+196? A:", max_tokens=24, stop=stop, stream=True,
            extra_body={"ignore_eos": True}) if c.choices)
        self.assertEqual(streamed, text[:text.find(stop)])

    def test_dllm_fields_and_provisional_stream(self):
        stream = self.client.chat.completions.create(
            model="tiny-block", messages=[{"role": "user", "content": "What is 5+6?"}],
            max_tokens=12, stream=True,
            extra_body={"strategy": "block", "block_length": 4, "threshold": 0.9,
                        "dllm": {"stream_provisional": True}})
        provisional = 0
        for chunk in stream:
            extra = getattr(chunk, "model_extra", None) or {}
            if "dllm" in extra:
                self.assertTrue(extra["dllm"]["provisional"])
                self.assertEqual(chunk.choices, [])
                provisional += 1
        self.assertGreater(provisional, 0)

    def test_errors(self):
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="tiny-block", prompt="x", temperature=-1)
        self.assertEqual(e.exception.body["param"], "temperature")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="tiny-block", prompt="x",
                                           extra_body={"block_length": "four"})
        self.assertEqual(e.exception.body["param"], "block_length")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.chat.completions.create(model="tiny-block", messages=[])
        self.assertEqual(e.exception.body["param"], "messages")
        with self.assertRaises(openai.NotFoundError):
            self.client.completions.create(model="gpt-4", prompt="x")

    def test_equal_to_generate_alone(self):
        requests = [
            {"messages": [{"role": "user", "content": f"What is {a}+{b}?"}], "max_tokens": 16,
             "strategy": s, "seed": a}
            for a, b, s in [(1, 2, "block"), (40, 2, "ar"), (333, 444, "s2d2"), (9, 9, "block")]
        ]
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for r in requests:
                f.write(json.dumps(r) + "\n")
        out = subprocess.run([DLLM, "generate", "--requests", f.name, "--concurrency", "1"],
                             capture_output=True, text=True, check=True).stdout
        alone = [json.loads(line) for line in out.splitlines()]
        for r, a in zip(requests, alone):
            got = self.client.chat.completions.create(
                model="tiny-block", messages=r["messages"], max_tokens=r["max_tokens"],
                seed=r["seed"], extra_body={"strategy": r["strategy"], "return_token_ids": True})
            self.assertEqual(got.choices[0].message.content, a["text"])
            self.assertEqual(got.choices[0].model_extra["token_ids"], a["ids"])


class ServerOptions(unittest.TestCase):
    def test_api_key(self):
        server = Server("--api-key", "sekrit")
        try:
            with self.assertRaises(openai.AuthenticationError):
                server.client("wrong").models.list()
            self.assertEqual(len(server.client("sekrit").models.list().data), 1)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_queue_full_is_rate_limit(self):
        server = Server("--max-running", "1", "--max-queued", "0")
        try:
            client = server.client()
            long = client.completions.create(model="tiny-block", prompt="Count:", max_tokens=4000,
                                             stream=True, extra_body={"ignore_eos": True})
            next(iter(long))
            with self.assertRaises(openai.RateLimitError) as e:
                client.completions.create(model="tiny-block", prompt="x", max_tokens=2)
            self.assertEqual(e.exception.response.headers["retry-after"], "1")
            long.close()  # hang up: the server cancels the request
        finally:
            self.assertEqual(server.stop(), 0)

    @staticmethod
    def readme_block(language):
        with open(os.path.join(ROOT, "README.md")) as f:
            return re.search(r"```" + language + r"\n(.*?)```", f.read(), re.S).group(1)

    def test_readme_curl_verbatim(self):
        """The README's curl example, run as written against a server on its port."""
        server = Server()
        try:
            cmd = self.readme_block("bash").replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
            out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=True)
            reply = json.loads(out.stdout)
            self.assertEqual(reply["object"], "chat.completion")
            self.assertTrue(reply["choices"][0]["message"]["content"])
        finally:
            self.assertEqual(server.stop(), 0)

    def test_readme_example_verbatim(self):
        """The README's Python example, run as written against a server on its port."""
        code = self.readme_block("python")
        server = Server()
        try:
            code = code.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 cwd=ROOT)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertTrue(out.stdout.strip())
        finally:
            self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
