"""The TPC-H scenario's results (bench/tpch.py): a result per step and table type in the
bench's common form (bench/__main__.py's render), and a table of its own, step by step."""

from __future__ import annotations

from bench.tpch import COLD, DELTA_RS, SPARK_WRITE, STEPS, TABLE_TYPES, WARM, Measured
from bench.tpch_data import TpchData
from bench.write import size_text


def results(
    scale: str,
    buckets: int,
    data: TpchData,
    engines: dict[str, dict[str, dict[str, Measured]]],
    peers: dict[str, dict[str, Measured]],
    skipped: dict[str, str],
) -> list[dict]:
    """`engines`: by table type, the engines that have one (the runner's, Hudi); `peers`:
    those that do not (delta-rs, delta-spark), beside both; `scale`: "SF 1" and the like."""
    out = []
    for table_type in engines:
        for step in STEPS:
            measured = {name: steps[step.name] for name, steps in engines[table_type].items()}
            measured.update(
                {name: steps[step.name] for name, steps in peers.items() if step.name in steps}
            )
            warm = measured.pop(WARM)
            sums = data.expected[step.name]
            out.append(
                {
                    "scenario": f"TPC-H {scale} lineitem, {step.label} "
                    f"({data.rows[step.name]:,} rows), {table_type}",
                    "tpch": {"step": step.name, "table_type": table_type, "buckets": buckets},
                    "runner_s": round(warm.seconds, 3),
                    "peers": {name: round(m.seconds, 3) for name, m in measured.items()},
                    "peers_skipped": skipped,
                    "bytes_written": {
                        WARM: warm.written,
                        **{name: m.written for name, m in measured.items()},
                    },
                    "notes": [
                        f"every table after the step: {sums.rows:,} rows, l_orderkey sum "
                        f"{sums.orderkeys:,}, l_extendedprice sum {sums.cents / 100:,.2f}, "
                        f"{sums.final:,} lines with status F"
                    ],
                }
            )
    return out


def render_tpch(results: list[dict]) -> str:
    """Per table type, a line per step: each engine's seconds, then the bytes it wrote."""
    engines = list(dict.fromkeys(name for r in results for name in r["bytes_written"]))
    names = [e.split(" (")[0] for e in engines]  # without the unit
    head = " | ".join(names)
    bytes_head = " | ".join(f"bytes: {n}" for n in names)
    lines = []
    for table_type in TABLE_TYPES:
        rows = [r for r in results if r["tpch"]["table_type"] == table_type]
        if not rows:
            continue
        lines += [
            f"\n{table_type}, {rows[0]['tpch']['buckets']} buckets: seconds (median), then bytes",
            f"| step | {head} | warm / delta-rs | whole process / delta-rs | warm / Spark "
            f"parquet | {bytes_head} |",
            "|" + "---|" * (4 + 2 * len(engines)),
        ]
        for r in rows:
            seconds = {WARM: r["runner_s"], **r["peers"]}
            times = " | ".join(f"{seconds[e]:.2f}" if e in seconds else "" for e in engines)
            written = r["bytes_written"]
            sizes = " | ".join(size_text(written[e]) if e in written else "" for e in engines)
            ratios = " | ".join(
                f"{seconds[runner] / seconds[DELTA_RS]:.2f}x"
                if runner in seconds and DELTA_RS in seconds
                else ""
                for runner in (WARM, COLD)
            )
            plain = f"{seconds[WARM] / seconds[SPARK_WRITE]:.2f}x" if SPARK_WRITE in seconds else ""
            lines.append(f"| {r['tpch']['step']} | {times} | {ratios} | {plain} | {sizes} |")
    return "\n".join(lines)
