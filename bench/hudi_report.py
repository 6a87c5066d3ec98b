"""The Hudi comparison (bench/hudi.py) as its own table in `python -m bench --only hudi`'s
output."""

from __future__ import annotations

from bench.write import size_text


def render_hudi(results: list[dict]) -> str:
    """The Hudi comparison as its own table: seconds, ratio runner / Hudi, bytes."""
    lines = [
        "| scenario | runner (s) | Hudi (s) | runner / Hudi | bytes: runner | Hudi data | "
        "Hudi .hoodie |",
        "|---|---|---|---|---|---|---|",
    ]
    if not any("hudi_s" in r for r in results):
        return "Hudi: skipped (--skip-peer hudi)"
    for r in results:
        if "hudi_s" not in r:
            continue
        sizes = [size_text(n) for n in r.get("bytes_written", {}).values()] or ["", "", ""]
        lines.append(
            f"| {r['scenario']} | {r['runner_s']:.2f} | {r['hudi_s']:.2f} | "
            f"{r['runner_over_hudi']:.2f} | {' | '.join(sizes)} |"
        )
    return "\n".join(lines)
