"""The driver JVM's stderr filter: Java's incubator warning goes, everything else passes as it
comes, a progress line drawn without a newline included."""

from __future__ import annotations

import os
import select
import threading

from runner.jvm.java_stderr import _pass_on


def test_the_warning_goes_and_the_rest_passes_as_it_comes():
    into_filter, written = os.pipe()
    shown, out = os.pipe()
    thread = threading.Thread(target=_pass_on, args=(into_filter, out), daemon=True)
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
