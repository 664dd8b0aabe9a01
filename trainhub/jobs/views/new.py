"""The new-job page: typed form per mode (htmx swaps the mode's fields), inline validation,
YAML tab that round-trips with the form, FedML upload, clone, templates, "run locally" hint."""
from __future__ import annotations

import json
import shlex

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from trainhub.jobs.forms import DEFAULT_NAMES, SPEC_FILE_LIMIT, JobForm, initial_from_spec, mode_initial, spec_from_fields
from trainhub.jobs.job_templates import template_save, templates_of
from trainhub.jobs.models import WAITING
from trainhub.jobs import runfiles
from trainhub.jobs.services import job_clone_spec, job_resume_spec, job_submit, spec_validate
from trainhub.jobs.views import int_param, job_for_user
from trainhub.pools.models import Workspace, WorkerPool
from workers.runner.config import MODES, JobSpec, SpecError, dump_yaml, parse_spec
from workers.runner.modes import DEFAULT_MODE


def run_locally(spec: JobSpec) -> list[str]:
    """Commands that run ``spec`` (saved as job.yaml) without TrainHub's server, and with its CLI."""
    r = spec.resources
    many = r.nodes * r.procs_per_node > 1
    if spec.workload == "script":
        target = spec.script.entry if spec.script.entry.endswith(".py") else f"-m {spec.script.entry}"
        args = shlex.join(spec.script.args)
        where = Workspace.objects.filter(name=spec.script.workspace).values_list("path", flat=True).first()
        cd = f"cd {shlex.quote(where)}" if where else f"cd <the directory of workspace {spec.script.workspace}>"
        venv = shlex.quote(str(settings.BASE_DIR / ".venv" / "bin"))  # the workspace is elsewhere: a full path
        if many:
            return [f"{cd} && {venv}/torchrun --standalone --nproc-per-node "
                    f"{r.procs_per_node} {target} {args}".rstrip(), ".venv/bin/trainhub submit job.yaml --follow"]
        return [f"{cd} && {venv}/python {target} {args}".rstrip(),
                ".venv/bin/trainhub submit job.yaml --follow"]
    # from the repository's directory, with its virtualenv (a bare `python` lacks torch)
    if many:
        local = (f".venv/bin/torchrun --standalone --nproc-per-node {r.procs_per_node} -m workers.runner "
                 f"--config job.yaml")
    else:
        local = ".venv/bin/python -m workers.runner --config job.yaml"
    return [local, ".venv/bin/trainhub submit job.yaml --follow"]


def _context(request, form: JobForm, tab: str = "form", **extra) -> dict:
    """Page context; the "run locally" hint and YAML preview when the form's values make a valid spec."""
    if form.is_bound:
        values = form.cleaned_data if not form.errors else None
    else:
        values = form.initial
    preview_yaml, commands = "", []
    if values is not None and tab == "form":
        try:
            data = spec_from_fields(values, form.mode)
            spec = JobSpec.model_validate(data)
            preview_yaml, commands = dump_yaml(data), run_locally(spec)
        except ValueError:  # SpecError and pydantic's ValidationError: no hint for an invalid spec
            pass
    return {"form": form, "tab": tab, "templates": templates_of(request.user)[:50],
            "preview_yaml": preview_yaml, "commands": commands, **extra}


def _hidden_settings(initial: dict) -> list[str]:
    """The settings a clone (or template) carries that the form has no field for: "path = value"."""
    try:
        extra = json.loads(initial.get("extra") or "{}")
    except ValueError:
        return []

    def flat(value, prefix=""):
        if isinstance(value, dict) and value:
            for key, inner in value.items():
                yield from flat(inner, f"{prefix}{key}.")
        else:
            yield f"{prefix[:-1]} = {json.dumps(value)}"
    return list(flat(extra)) if isinstance(extra, dict) else []


def _pools(user) -> list[str]:
    """Pools this user may submit to now (the spec check says why any other is refused)."""
    return [p.name for p in WorkerPool.objects.for_user(user) if p.accepts_submissions and p.user_allowed]


@login_required
@require_http_methods(["GET", "POST"])
def job_new(request: HttpRequest) -> HttpResponse:
    pools = _pools(request.user)
    if request.method == "POST":
        return _post(request, pools)
    if request.GET.get("fragment") == "mode-fields":
        mode = request.GET.get("mode", DEFAULT_MODE)
        mode = mode if mode in MODES else DEFAULT_MODE
        form = JobForm(initial=mode_initial(mode), pools=pools, mode=mode)
        typed = request.GET.get("name", "")
        new_name = DEFAULT_NAMES[mode] if typed in ("", *DEFAULT_NAMES.values()) else ""
        return render(request, "jobs/new.html#mode-fields", {"form": form, "new_name": new_name})
    initial = {"pool": pools[0] if pools else "cpu"}
    clone, template = int_param(request.GET.get("clone")), int_param(request.GET.get("template"))
    resume = ""
    if clone:
        source = job_for_user(request, clone)
        checkpoint = request.GET.get("checkpoint", "")
        if checkpoint and checkpoint in {c["name"] for c in runfiles.checkpoints(source.pk)}:
            initial = initial_from_spec(job_resume_spec(source, checkpoint))
            resume = f"checkpoint {checkpoint} of job #{source.pk} {source.name}"
        else:
            initial = initial_from_spec(job_clone_spec(source))
    elif template:
        source = get_object_or_404(templates_of(request.user), pk=template)
        initial = {**initial_from_spec(source.spec), "template_name": source.name}
    form = JobForm(initial={**mode_initial(initial.get("mode", DEFAULT_MODE)), **initial}, pools=pools)
    return render(request, "jobs/new.html", _context(request, form, source_template=initial.get("template_name"),
                                                     resume=resume, hidden=_hidden_settings(initial)))


def _upload_as_text(request: HttpRequest):
    """POST data with an uploaded spec's text in the YAML field (an upload wins over the text, as it
    always did), so a refused upload stays on the page: a browser cannot refill a file input.
    Files over the size limit stay uploads, to be refused as such."""
    upload = request.FILES.get("spec_file")
    if upload is None or upload.size > SPEC_FILE_LIMIT:
        return request.POST, request.FILES
    data = request.POST.copy()
    data["spec_yaml"] = upload.read().decode("utf-8", "replace")
    return data, {}


def _post(request: HttpRequest, pools: list[str]) -> HttpResponse:
    action = request.POST.get("action", "submit")
    post, files = _upload_as_text(request)
    form = JobForm(post, files, pools=pools)
    uses_text = bool(post.get("spec_yaml", "").strip() or files.get("spec_file"))
    if request.GET.get("validate"):
        return _validate(request, form)
    if action == "to_form":
        return _to_form(request, pools)
    if not form.is_valid():
        return render(request, "jobs/new.html", _context(request, form, "yaml" if uses_text else "form"), status=422)
    tab = "yaml" if uses_text else "form"
    try:
        data = form.spec_data()
        if action == "save_template":
            saved = template_save(owner=request.user, name=request.POST.get("template_name", ""), spec=data,
                                  replace=bool(request.POST.get("replace")))
            return redirect(f"/templates/?saved={saved.pk}")
        if action != "to_yaml":
            job = job_submit(owner=request.user, data=data)
            warning = WAITING["pool"](job.pool)
            if warning:
                messages.warning(request, f"Job submitted, but {warning}.")
            return redirect("job_detail", job_id=job.pk)
    except SpecError as exc:
        form.add_spec_errors(exc.errors)
        return render(request, "jobs/new.html", _context(request, form, tab), status=422)
    text = dump_yaml(data)
    yaml_form = JobForm(initial={**form.cleaned_data, "spec_yaml": text, "spec_file": None}, pools=pools,
                        mode=form.mode)
    return render(request, "jobs/new.html", _context(request, yaml_form, "yaml"))


def _to_form(request: HttpRequest, pools: list[str]) -> HttpResponse:
    """YAML tab -> form tab: the spec's values in the typed fields, the rest kept in ``extra``."""
    text_form = JobForm(request.POST, request.FILES, pools=pools)
    text_form.is_valid()
    try:
        data = text_form.spec_data() if text_form.uses_text() else spec_from_fields(text_form.cleaned_data,
                                                                                      text_form.mode)
        initial = initial_from_spec(parse_spec(data).to_dict())
    except SpecError as exc:
        for path, message in exc.errors.items():
            text_form.add_error("spec_yaml", f"{path}: {message}")
        return render(request, "jobs/new.html", _context(request, text_form, "yaml"), status=422)
    form = JobForm(initial={**mode_initial(initial["mode"]), **initial}, pools=pools)
    return render(request, "jobs/new.html", _context(request, form, "form"))


def _validate(request: HttpRequest, form: JobForm) -> HttpResponse:
    """Inline validation: every field's current error (or none) as out-of-band swaps, plus the hint."""
    errors: dict[str, list[str]] = {}
    preview = None
    data = None
    if form.is_valid():
        try:
            data = form.spec_data()
            spec_validate(data, owner=request.user)
            preview = JobSpec.model_validate(data) if not form.uses_text() else None
        except SpecError as exc:
            form.add_spec_errors(exc.errors)
    for name, found in form.errors.items():
        errors[name] = list(found)
    if request.GET.get("quiet"):  # a check on load, before any input: an empty field is not an error yet
        required = str(forms.Field.default_error_messages["required"])
        errors = {name: [m for m in found if m != required] for name, found in errors.items()}
    shown = [(n, errors.get(n, [])) for n in form.fields if n not in ("extra", "spec_file")]
    pool = WorkerPool.objects.filter(name=(data or {}).get("pool") or form.cleaned_data.get("pool") or "").first()
    context = {"form": form, "fields": shown, "non_field": errors.get("__all__", []),
               "pool_warning": WAITING["pool"](pool) if pool else "",
               "preview_yaml": dump_yaml(data) if preview and data is not None else "",
               "commands": run_locally(preview) if preview else []}
    return render(request, "jobs/new.html#validation", context)


