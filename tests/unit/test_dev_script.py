"""`./dev`'s first set-up as a new user sees it: what it installs and how big, then pip's own
progress, never minutes of silence. Run in a copy of the script with a stand-in `python3`
that records what it is asked and installs nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAKE_PYTHON = """\
#!/bin/sh
# python3 -m venv .venv: a .venv whose python records its arguments (and prints as pip does)
# and whose runner exits 0
echo "python3 $*" >> calls.log
mkdir -p .venv/bin
printf '#!/bin/sh\\necho "venv python $*" >> calls.log\\necho "Collecting $*"\\n' > .venv/bin/python
printf '#!/bin/sh\\necho "runner $*" >> calls.log\\n' > .venv/bin/runner
chmod +x .venv/bin/python .venv/bin/runner
"""


def test_the_first_quickstart_says_how_big_the_install_is_and_shows_pips_progress(tmp_path):
    shutil.copy(ROOT / "dev", tmp_path / "dev")
    (tmp_path / "pyproject.toml").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["./dev", "quickstart"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "about 1.8 GB once installed" in done.stderr and "~400 MB download" in done.stderr
    assert done.stderr.rstrip().endswith(".venv is ready")
    calls = (tmp_path / "calls.log").read_text().splitlines()
    install = next(c for c in calls if "install -e" in c)
    assert "--quiet" not in install  # pip prints what it collects, downloads and builds
    assert calls[-1] == "runner pipelines/quickstart.yaml"
    assert done.stdout == ""  # pip's lines go to stderr: stdout is the run's summary
    assert "Collecting -m pip install -e .[dev]" in done.stderr
