"""``trainhub``: submit and follow TrainHub jobs from a terminal or a CI pipeline.

Exit codes: 0 success (or the job succeeded), 1 the job failed, 2 the job was cancelled or
the server refused the request (invalid spec), 3 any other error (server unreachable, bad
token, not found). Never imports Django or torch.
"""
from __future__ import annotations

import json
import re
import sys
from datetime import datetime
from pathlib import Path
from urllib.parse import quote

import click
import yaml
from rich.console import Console
from rich.table import Table

from trainhub.cli.client import CANCELLED_OR_REFUSED, ERROR, OK, CliError, Client, load_config, save_config
from trainhub.cli.follow import FINAL_EXIT, follow, print_lines

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


class Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except CliError as exc:
            err.print(f"error: {exc}", style="red", markup=False)
            for field, message in exc.errors.items():
                err.print(f"  {field}: {message}", markup=False)
            ctx.exit(exc.code)
        except KeyboardInterrupt:
            err.print("interrupted; a submitted job keeps running (trainhub cancel ID stops it)", markup=False)
            ctx.exit(130)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option("0.1.0", prog_name="trainhub")
def cli():
    """Submit, follow and manage TrainHub training jobs."""


@cli.command()
@click.option("--url", help="server address, e.g. http://127.0.0.1:8000")
@click.option("--token-file", type=click.File("r"),
              help="read the API token from this file; - reads standard input")
@click.option("--token", help="API token on the command line (visible in the process list and shell history: "
                              "prefer the prompt or --token-file)")
def login(url, token_file, token):
    """Store the server URL and an API token (in ~/.config/trainhub/config.json, mode 0600).
    Without --token-file or --token, asks for the token at a hidden prompt."""
    current = load_config()
    url = (url or click.prompt("Server URL", default=current["url"] or "http://127.0.0.1:8000")).rstrip("/")
    if token_file is not None:
        token = token_file.read(4096).strip()
        if not token:
            raise CliError(f"{token_file.name}: no token in it; paste the token from the server's Tokens page",
                           CANCELLED_OR_REFUSED)
    token = token or click.prompt("API token", hide_input=True)
    client = Client(url, token)
    client.get("/api/jobs", limit=1)  # proves the URL and the token before saving them
    path = save_config(url, token)
    err.print(f"logged in to {url}; saved to {path}", markup=False)


def _read_spec(path: str) -> dict:
    from workers.runner.config import SpecError, load_text  # pydantic + yaml only, no torch

    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    try:
        return load_text(text)
    except SpecError as exc:
        raise CliError(f"{path} is not a valid spec", CANCELLED_OR_REFUSED, exc.errors) from None


def _overrides(pairs: tuple[str, ...]) -> dict:
    """``train.epochs=5`` pairs -> {"train": {"epochs": 5}}; values are read as YAML (5, 0.1, true, [a, b])."""
    out: dict = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--set {pair!r}: write KEY=VALUE, e.g. --set train.epochs=5", CANCELLED_OR_REFUSED)
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        *parents, leaf = key.strip().split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def _merge(base: dict, extra: dict) -> dict:
    merged = dict(base)
    for key, value in extra.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


SET_OPTION = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                          help="override one spec value, e.g. --set train.epochs=5 (repeatable)")


@cli.command()
@click.argument("spec_file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("-f", "--follow", "follow_", is_flag=True, help="stream the log; exit code mirrors the outcome")
@click.option("--name", help="override the spec's name")
@click.option("--pool", help="override the spec's pool")
@SET_OPTION
def submit(spec_file, follow_, name, pool, sets):
    """Submit SPEC_FILE (YAML or JSON job spec, or a FedML fedml_config.yaml); prints the job id."""
    spec = _merge(_read_spec(spec_file), _overrides(sets))
    if name:
        spec["name"] = name
    if pool:
        spec["pool"] = pool
    client = Client.from_config()
    created = client.post("/api/jobs", spec)
    _submitted(client, created, follow_)


def _submitted(client: Client, created: dict, follow_: bool) -> None:
    click.echo(created["id"])
    err.print(f"submitted job {created['id']} ({created['status']}): {client.url}{created['url']}", markup=False)
    if created.get("warning"):
        err.print(f"warning: {created['warning']}", style="yellow", markup=False, highlight=False)
    if follow_:
        sys.exit(follow(client, created["id"], out))


def _progress(job: dict) -> str:
    return f"{job['progress'] * 100:.0f}%" if job.get("progress") is not None else ""


def _when(value: str | None) -> str:
    return datetime.fromisoformat(value).astimezone().strftime("%Y-%m-%d %H:%M:%S") if value else ""


@cli.command("ls")
@click.option("--status", type=click.Choice(["queued", "running", "cancelling", "succeeded", "failed", "cancelled"]))
@click.option("--mode")
@click.option("--pool")
@click.option("--owner", help="username (staff see everyone's jobs)")
@click.option("-q", "--search", help="name contains")
@click.option("-n", "--limit", default=20, show_default=True, type=click.IntRange(1, 500))
def ls(status, mode, pool, owner, search, limit):
    """List jobs, newest first."""
    page = Client.from_config().get("/api/jobs", status=status, mode=mode, pool=pool, owner=owner, q=search,
                                    limit=limit)
    table = Table("ID", "Name", "Mode", "Pool", "Owner", "Status", "Progress", "Submitted", box=None)
    for job in page["items"]:
        table.add_row(str(job["id"]), job["name"], job["mode"], job["pool"], job["owner"], job["status"],
                      _progress(job), _when(job["created_at"]))
    out.print(table)


@cli.command()
@click.argument("job_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="print the job as JSON")
def status(job_id, as_json):
    """Show one job."""
    job = Client.from_config().get(f"/api/jobs/{job_id}")
    if as_json:
        click.echo(json.dumps(job, indent=2))
        return
    waiting = job.get("waiting_reason")
    rows = [("job", f"{job['id']} {job['name']}"),
            ("status", job["status"] + (f" ({waiting})" if waiting else "")), ("mode", job["mode"]),
            ("pool", job["pool"]), ("owner", job["owner"]), ("attempt", str(job["attempt"])),
            ("progress", f"{_progress(job)} (step {job['step']}/{job['total_steps']})" if job["total_steps"] else ""),
            ("submitted", _when(job["created_at"])), ("started", _when(job["started_at"])),
            ("finished", _when(job["finished_at"])),
            ("exit code", "" if job["exit_code"] is None else str(job["exit_code"])), ("error", job["error"])]
    for key, value in rows:
        if value:
            out.print(f"{key:>10}  {value}", markup=False)
    if job.get("sites"):  # a cross-site job: each site as the job page's Sites panel shows it
        table = Table("Site (pool)", "State", "Restarts", "Outer step", "Participants", "Last sync", "Syncing",
                      box=None, title="sites", title_justify="left")
        for site in job["sites"]:
            table.add_row(site["pool"], site["state"], f"{site['restarts']} of {site['max_restarts']}",
                          _number(site["outer_step"]), _number(site["participants"]),
                          _seconds(site["last_sync_seconds"]), _seconds(site["sync_seconds"]))
        out.print(table)


def _number(value) -> str:
    return "" if value is None else f"{value:g}"


def _seconds(value) -> str:
    return "" if value is None else f"{value:.2f} s"


@cli.command()
@click.argument("job_id", type=int)
@click.option("-f", "--follow", "follow_", is_flag=True, help="keep printing until the job ends; exit code mirrors it")
@click.option("--after", default=-1, type=int, help="only lines after this sequence number")
def logs(job_id, follow_, after):
    """Print a job's log (every rank)."""
    client = Client.from_config()
    if follow_:
        sys.exit(follow(client, job_id, out, after=after))
    while True:
        page = client.get(f"/api/jobs/{job_id}/logs", after=after, limit=5000)
        print_lines(out, page["lines"], ranks=any(line["rank"] for line in page["lines"]))
        if len(page["lines"]) < 5000:
            return
        after = page["next_after"]


@cli.command()
@click.argument("job_ids", type=int, nargs=-1, required=True)
def cancel(job_ids):
    """Cancel jobs (a queued job at once, a running one after its processes stop)."""
    client = Client.from_config()
    for job_id in job_ids:
        job = client.post(f"/api/jobs/{job_id}/cancel")
        out.print(f"job {job_id} {job['status']}", markup=False)


@cli.command()
@click.argument("job_id", type=int)
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), help="write the spec here")
def clone(job_id, output):
    """Print a job's spec as YAML (named NAME-copy) to edit and submit again."""
    job = Client.from_config().get(f"/api/jobs/{job_id}")
    spec = dict(job["spec"])
    spec["name"] = f"{job['name']}-copy"[:200]
    text = yaml.safe_dump(spec, sort_keys=False)
    if output:
        Path(output).write_text(text, encoding="utf-8")
        err.print(f"wrote {output}; submit it with: trainhub submit {output}", markup=False)
    else:
        click.echo(text, nl=False)


@cli.command()
@click.argument("job_id", type=int)
def files(job_id):
    """List a job's checkpoints and artifacts (what 'download' accepts)."""
    client = Client.from_config()
    table = Table("Path", "Size", "Modified", box=None)
    for ckpt in client.get(f"/api/jobs/{job_id}/checkpoints"):
        table.add_row(ckpt["path"] + "/", _size(ckpt["size"]), _when(ckpt["modified"]))
    for item in client.get(f"/api/jobs/{job_id}/artifacts"):
        table.add_row(item["path"], _size(item["size"]), _when(item["modified"]))
    out.print(table)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@cli.command()
@click.argument("job_id", type=int)
@click.argument("artifact")
@click.option("-o", "--output", type=click.Path(writable=True), help="file to write (default: the server's name)")
def download(job_id, artifact, output):
    """Download ARTIFACT of a job (a path from 'trainhub files'; a checkpoint directory comes as .tar)."""
    from rich.progress import DownloadColumn, Progress, TransferSpeedColumn

    client = Client.from_config()
    with client.stream(f"/api/jobs/{job_id}/files/{quote(artifact, safe='/')}") as response:
        if not response.is_success:
            response.read()
            from trainhub.cli.client import check

            check(response)
        match = re.search(r'filename="?([^";]+)"?', response.headers.get("content-disposition", ""))
        target = Path(output or (match.group(1) if match else Path(artifact).name))
        if target.is_dir():
            target = target / (match.group(1) if match else Path(artifact).name)
        total = int(response.headers["content-length"]) if "content-length" in response.headers else None
        with Progress(*Progress.get_default_columns()[:2], DownloadColumn(), TransferSpeedColumn(),
                      console=err, transient=True) as bar, target.open("wb") as fh:
            task = bar.add_task(target.name, total=total)
            for chunk in response.iter_bytes(1 << 20):
                fh.write(chunk)
                bar.advance(task, len(chunk))
    err.print(f"wrote {target}", markup=False)


@cli.command()
def templates():
    """List your job templates."""
    table = Table("ID", "Name", "Mode", "Pool", "Updated", "Description", box=None)
    for t in Client.from_config().get("/api/templates"):
        table.add_row(str(t["id"]), t["name"], t["spec"].get("mode", ""), t["spec"].get("pool", ""),
                      _when(t["updated_at"]), t["description"])
    out.print(table)


@cli.command("save-template")
@click.argument("name")
@click.argument("spec_file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--description", default="")
@click.option("--replace", is_flag=True, help="overwrite a template of that name")
def save_template(name, spec_file, description, replace):
    """Save SPEC_FILE as template NAME."""
    saved = Client.from_config().request("POST", "/api/templates", json={
        "name": name, "spec": _read_spec(spec_file), "description": description, "replace": replace}).json()
    out.print(f"saved template {saved['id']} {saved['name']}", markup=False)


@cli.command()
@click.argument("template")
@click.option("-f", "--follow", "follow_", is_flag=True, help="stream the log; exit code mirrors the outcome")
@SET_OPTION
def start(template, follow_, sets):
    """Submit a job from TEMPLATE (its name or id), with --set overrides."""
    client = Client.from_config()
    found = [t for t in client.get("/api/templates") if template in (t["name"], str(t["id"]))]
    if not found:
        raise CliError(f"no template named {template!r}; list them with 'trainhub templates'")
    created = client.post(f"/api/templates/{found[0]['id']}/jobs", _overrides(sets))
    _submitted(client, created, follow_)


@cli.command()
def pools():
    """List worker pools and their load."""
    table = Table("Pool", "Kind", "Enabled", "Workers online", "Queued", "Running", box=None)
    for pool in Client.from_config().get("/api/pools"):
        table.add_row(pool["name"], pool["kind"], "yes" if pool["enabled"] else "no", str(pool["workers_online"]),
                      str(pool["queued"]), str(pool["running"]))
    out.print(table)


def main() -> None:
    cli(prog_name="trainhub")


__all__ = ["main", "cli", "OK", "ERROR", "FINAL_EXIT"]
