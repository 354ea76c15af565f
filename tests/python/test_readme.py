"""The README's Python example runs verbatim (as tests/server/openai_client_test.py runs the
Serve example)."""
import os
import re

from conftest import ROOT


def test_readme_python_example(capsys, monkeypatch):
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    section = readme[readme.index("\n## Python\n"):]
    example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(ROOT)  # the example's model paths are relative to the repository root
    exec(compile(example, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "stop" in out or "length" in out
