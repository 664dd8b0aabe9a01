"""``python -m workers.runner --config job.yaml --run-dir DIR`` (also under torchrun).

Runs any spec without Django or Celery. Exit codes: 0 succeeded, 1 failed, 2 invalid spec,
143 interrupted by SIGTERM/SIGINT (after writing a checkpoint when it could).
"""
from __future__ import annotations

import argparse
import sys
import traceback

from workers import runner
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
        if args.spec.mode == "script":
            from workers.runner.workloads import script

            return script.run(args)
        return train(args)
    except SpecError as exc:
        for field, message in exc.errors.items():
            print(f"spec error: {field}: {message}", file=sys.stderr, flush=True)
        return 2


def train(args: runner.Arguments) -> int:
    """init → device → data → model → Runner.run, leaving the process group in ``finally``."""
    from workers.runner.train import Interrupted

    try:
        runner.init(args)
        device = runner.device.get_device(args)
        dataset = runner.data.load(args)
        model = runner.model.create(args, dataset.output_dim)
        runner.Runner(args, device, dataset, model).run()
        return 0
    except Interrupted as exc:
        print(f"interrupted: {exc}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except SpecError:
        raise
    except Exception as exc:
        traceback.print_exc()
        print(f"failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        runner.teardown(args)


if __name__ == "__main__":
    sys.exit(main())
