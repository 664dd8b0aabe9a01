"""``python -m workers.runner --config job.yaml --run-dir DIR`` (also under torchrun).

Runs any spec without Django or Celery. Exit codes: 0 succeeded, 1 failed, 2 invalid spec,
143 interrupted by SIGTERM/SIGINT (after writing a checkpoint when it could).
"""
from __future__ import annotations

import argparse
import sys
import traceback

from workers import runner
from workers.runner import fence
from workers.runner.config import SpecError
from workers.runner.signals import EXIT_INTERRUPTED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.runner", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="job spec (YAML/JSON) or a FedML fedml_config.yaml")
    parser.add_argument("--run-dir", help="where events, checkpoints and artifacts go (default runs/<name>)")
    parser.add_argument("--workspace-dir", help="script mode: the directory holding the team's code")
    ns = parser.parse_args(argv)
    try:
        args = runner.load_arguments(ns.config, run_dir=ns.run_dir, workspace_dir=ns.workspace_dir)
    except (SpecError, OSError) as exc:
        return _spec_error(exc)
    if args.spec.workload == "script":
        from workers.runner.workloads import script

        try:
            return script.run(args)
        except SpecError as exc:
            return _spec_error(exc)
    return train(args)


def train(args: runner.Arguments) -> int:
    """init → device → data → model → Runner.run, leaving the process group in ``finally``."""
    if args.is_main:  # before torch, the workload's libraries and the data load (seconds): the log shows it started
        print(f"{args.spec.name}: starting (mode {args.spec.mode}, strategy {args.spec.strategy_name}), "
              "loading torch and the data", flush=True)
    from workers.runner.train import Interrupted

    try:
        runner.init(args)
        device = runner.device.get_device(args)
        dataset = runner.data.load(args)
        # no local keeps the model: teardown frees it, and with it a ZeRO-3 model's process groups
        runner.Runner(args, device, dataset, runner.model.create(args, dataset.output_dim)).run()
        return 0
    except Interrupted as exc:
        print(f"interrupted: {exc}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except fence.Superseded as exc:
        print(f"superseded: {exc}", file=sys.stderr, flush=True)
        return fence.EXIT_SUPERSEDED
    except SpecError as exc:
        _report_end(args, exc, "spec error: " + str(exc))
        return _spec_error(exc)
    except Exception as exc:
        traceback.print_exc()
        print(f"failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        _report_end(args, exc, f"{type(exc).__name__}: {exc}")
        return 1
    finally:
        runner.teardown(args)


def _spec_error(exc: Exception) -> int:
    errors = exc.errors if isinstance(exc, SpecError) else {"config": str(exc)}
    for field, message in errors.items():
        print(f"spec error: {field}: {message}", file=sys.stderr, flush=True)
    return 2


def _report_end(args: runner.Arguments, exc: BaseException, reason: str) -> None:
    """A failure before the loop started (data, model, strategy setup) still ends the event stream."""
    if getattr(exc, "trainhub_reported", False) or not args.is_main or not args.run_dir.is_dir():
        return
    from workers.runner.report import Reporter

    reporter = Reporter(args.run_dir)
    reporter.emit("end", status="failed", reason=reason, step=0)
    reporter.close()


if __name__ == "__main__":
    from workers.runner.fastexit import exit_now

    exit_now(main())  # not sys.exit: the interpreter's teardown after training costs seconds (fastexit.py)
