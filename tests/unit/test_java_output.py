"""The driver JVM's output through the runner: Java's incubator warning goes, everything else
passes as it comes (a progress line drawn without a newline included), and a caller reading
the runner's output is not held by the JVM's teardown."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import threading

from runner.jvm.java_output import _without_warning


def test_the_warning_goes_and_the_rest_passes_as_it_comes():
    into_filter, written = os.pipe()
    shown, out = os.pipe()
    thread = threading.Thread(target=_without_warning, args=(into_filter, out), daemon=True)
    thread.start()
    os.write(written, b"WARNING: Using incubator ")
    os.write(written, b"modules: jdk.incubator.vector\nWARNING: other\n\r\x1b[Ktrips run 4s")
    seen = b""
    # the progress line shows before any newline comes
    while not seen.endswith(b"run 4s") and select.select([shown], [], [], 10)[0]:
        seen += os.read(shown, 1024)
    assert seen == b"WARNING: other\n\r\x1b[Ktrips run 4s"
    os.write(written, b"  start\nWARNING: Using incubator modules: jdk.incubator.vector\n")
    os.close(written)
    thread.join(timeout=10)
    rest = b"".join(iter(lambda: os.read(shown, 1024), b""))
    assert rest == b"  start\n"


CHILD_SCRIPT = """
import os, subprocess
from runner.jvm.java_output import relayed_java_output
with relayed_java_output():
    # stands for the driver JVM: says something on both streams, then outlives the runner
    child = subprocess.Popen(["sh", "-c", "echo out; echo 'WARNING: Using incubator modules: x'"
                              " >&2; echo err >&2; exec sleep 60"])
print("runner done", child.pid, flush=True)
import time; time.sleep(0.5)  # the relays pass the child's lines on
os._exit(0)
"""


def test_a_caller_reading_the_output_is_done_when_the_runner_is():
    """The JVM's teardown after the run (Spark deletes its temporary directories) must not
    hold a caller that reads the runner's output: the child's streams go through the
    runner's relays, so the caller's pipes close when the runner exits."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD_SCRIPT], capture_output=True, text=True, timeout=50
    )
    # the relay may write the child's "out" between the pid and its newline (two writes)
    child = int(re.search(r"runner done (\d+)", done.stdout)[1])
    try:
        assert os.path.exists(f"/proc/{child}"), "the child still runs after the caller is done"
        assert "out\n" in done.stdout
        assert done.stderr == "err\n"  # the incubator warning dropped, the rest passed on
    finally:
        os.kill(child, 9)
