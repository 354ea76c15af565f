"""Fixtures of the Python package's tests (pytest; ctest runs them through run_pytest.sh).

Environment: DLLM_BINARY (the `dllm` binary the results are compared with; default build/dllm),
DLLM_MODELS_DIR (default models/), PYTHONPATH with the built package (build/python).
"""
import json
import os
import subprocess
import tempfile

import pytest

import dllm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.environ.get("DLLM_MODELS_DIR", os.path.join(ROOT, "models"))
FIXTURES = os.environ.get("DLLM_FIXTURES_DIR", os.path.join(ROOT, "tests", "fixtures"))
DLLM = os.environ.get("DLLM_BINARY", os.path.join(ROOT, "build", "dllm"))
# cpu, or cuda for the GPU run (ctest PythonPackageCuda, label cuda): the package and the binary
# compared with run on this device.
DEVICE = os.environ.get("DLLM_TEST_DEVICE", "cpu")


def model_dir(name):
    return os.path.join(MODELS, name)


def heldout(task, n):
    """The first n held-out items of a task of the embedded models (tests/fixtures/heldout/)."""
    with open(os.path.join(FIXTURES, "heldout", task + ".jsonl")) as f:
        return [json.loads(line) for line in f][:n]


def cli_generate(model, requests, *args):
    """`dllm generate --requests` on a list of request objects: its results, in order."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as f:
        f.writelines(json.dumps(r) + "\n" for r in requests)
        f.flush()
        out = subprocess.run([DLLM, "generate", "-m", model_dir(model), "--requests", f.name,
                              "--device", DEVICE, *args],
                             capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


_engines = {}


@pytest.fixture(scope="session")
def engines():
    """One dllm.LLM per embedded model, shared by the tests (loaded on first use)."""
    def get(name):
        if name not in _engines:
            _engines[name] = dllm.LLM(model_dir(name), device=DEVICE)
        return _engines[name]
    yield get
    for llm in _engines.values():
        llm.close()
