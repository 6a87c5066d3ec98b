"""`runner init`: a spec to start from, made from a sample of the data
(runner/commands/init_spec.py)."""

from __future__ import annotations

from typing import Any

import click


@click.command()
@click.argument("data", required=False, type=click.Path(exists=True))
@click.option("--jdbc", "url", metavar="URL", help="A database's JDBC URL (with --table).")
@click.option("--table", help="The database table to read (schema.table).")
@click.option("--user-env", metavar="NAME", help="The variable holding the database user.")
@click.option("--password-env", metavar="NAME", help="The variable holding its password.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    help="The spec file to write (default: NAME.yaml here).",
)
@click.option("--name", help="The pipeline's and source's name (default: DATA's or the table's).")
@click.option("--key", "record_key", metavar="FIELD[,FIELD]", help="The record key.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "json", "parquet"]),
    help="DATA's format (default: from its first file's name).",
)
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
def init(data: str | None, url: str | None, table: str | None, **given: Any) -> None:
    """Write a spec to start from, made from a sample of DATA (a file or a directory of
    csv, json lines or parquet files) or of a database table.

    \b
      runner init data/orders
      runner init --jdbc jdbc:postgresql://db:5432/shop --table public.orders \\
          --user-env SHOP_USER --password-env SHOP_PASSWORD

    DATA: declares the columns of its first file (parquet's schema; CSV and JSON types
    inferred from its first MiB), guesses the record key, the ordering field and a bucket
    count, each marked `# check:` on its line; starts no JVM. A table: its columns and its
    primary key (the record key) are asked of the database through Spark (a JVM starts);
    the spec holds ${env:NAME} references for the user and password. Either way the spec
    is checked as `runner validate` checks it before it is written.
    """
    from pathlib import Path

    from runner.commands.init_spec import InitRequest, database_sample, sample, write_spec

    if (data is None) == (url is None) or (url is None) != (table is None):
        raise click.UsageError("give DATA, or --jdbc URL with --table TABLE")
    name, fmt = given["name"], given["fmt"]
    stem = Path(data).stem if data else str(table).rpartition(".")[2]
    out = Path(given["out"] or f"{name or stem}.yaml")
    if data is not None:
        found = sample(Path(data), fmt, out.parent)
    else:
        refs = [f"${{env:{given[k]}}}" if given[k] else None for k in ("user_env", "password_env")]
        found = database_sample(str(url), str(table), *refs)
    request = InitRequest(Path(data) if data else None, out, name, given["record_key"], fmt)
    write_spec(request, found, given["force"])
    click.echo(f"wrote {out}: check the lines marked `check:`, then `runner validate {out}`")


COMMANDS = (init,)
